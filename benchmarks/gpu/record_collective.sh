#!/usr/bin/env bash
# Issue 39, item 3: the collective landscapes (AG-GEMM and GEMM-RS at 2 shapes each, 840 configs, group device
# time) on 4 GPUs, or on 2 where only 2 are (device tool, kind nvidia-h200-x4 or -x2). Each command records
# within LIMIT seconds (cases share it); run the same command again on the warm machine until every case says
# "complete": recorded cases are skipped, a case cut short resumes (state and Triton's cache in $STATE).
#   bash benchmarks/gpu/record_collective.sh            (OP=ag or OP=rs for one op per command)
# Writes $OUT/collective_w{N}.json and the log. The corpus's benchmarks/results/corpus/collective_w{N}.json pools
# several such recordings, each from its own process (the landscapes are not repeatable to 2% from one process to
# the next): python benchmarks/_collective_report.py CHOICES.json --oracle R1.json R2.json R3.json --out DIR
#   --pooled-out benchmarks/results/corpus/collective_w{N}.json
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HOME=$(mktemp -d); export HOME
STATE=${STATE:-/tmp/tdt_collective}; mkdir -p "$STATE"
export TRITON_CACHE_DIR="$STATE/triton_cache"
OUT=${OUT:-/tmp/collective_out}; mkdir -p "$OUT"
N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); if [ "$N" -ge 4 ]; then N=4; else N=2; fi
FILE="$STATE/collective_w$N.json"
nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.device_count(), "GPUs")'
timeout "${TIMEOUT:-585}" python3 -m torch.distributed.run --standalone --nproc-per-node "$N" \
  benchmarks/corpus_collective.py --op "${OP:-ag,rs}" --time-limit "${LIMIT:-540}" --out "$FILE" 2>&1 \
  | grep -v -i 'warn' | tee -a "$OUT/log_w$N.txt"
cp "$FILE" "$OUT/collective_w$N.json" 2>/dev/null
python3 - "$FILE" <<'PY'
import json, sys
for k, v in json.load(open(sys.argv[1])).items():
    print(k, "complete" if v["complete"] else "INCOMPLETE", f"{len(v['screen_ms'])}/{v['kept']} screened,",
          len(v["failed"]), "failed, best", v["best"], round(v["best_ms"], 4), "ms,", round(v["seconds"]), "s")
PY
