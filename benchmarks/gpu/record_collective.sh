#!/usr/bin/env bash
# Issue 39, item 3: the collective landscapes (AG-GEMM and GEMM-RS at 2 shapes each, 840 configs, group device
# time) on 4 GPUs, or on 2 where only 2 are (device tool, kind nvidia-h200-x4 or -x2). REPEATS recordings (default
# 3), each in a process of its own, then pooled: each config's median ratio over the recordings (on 2 H200s the
# landscapes did not repeat to 2% from one process to the next; benchmarks/_collective_report.py says how). Each
# command records within LIMIT seconds (the recordings share it, their cases share theirs); run the same command
# again on the warm machine until every case says "complete": recorded cases are skipped, a case cut short resumes
# (state and Triton's cache in $STATE).
#   bash benchmarks/gpu/record_collective.sh            (OP=ag or OP=rs for one op per command)
# CPU plumbing: TRITON_INTERPRET=1 EXTRA=--cpu-smoke REPEATS=2 OUT=/tmp/x STATE=/tmp/x bash benchmarks/gpu/record_collective.sh
# Writes $OUT/collective_w{N}.json (pooled: commit it as benchmarks/results/corpus/collective_w{N}.json), each
# recording ($OUT/collective_w{N}_r{K}.json) and the log.
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HOME=$(mktemp -d); export HOME
STATE=${STATE:-/tmp/tdt_collective}; mkdir -p "$STATE"
export TRITON_CACHE_DIR="$STATE/triton_cache"
OUT=${OUT:-/tmp/collective_out}; mkdir -p "$OUT"
N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); if [ "$N" -ge 4 ]; then N=4; else N=2; fi
REPEATS=${REPEATS:-3}
nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.device_count(), "GPUs")'
files=()
for k in $(seq 1 "$REPEATS"); do
  FILE="$STATE/collective_w${N}_r$k.json"
  echo "== recording $k of $REPEATS"
  timeout $(( ${TIMEOUT:-585} / REPEATS )) python3 -m torch.distributed.run --standalone --nproc-per-node "$N" \
    benchmarks/corpus_collective.py --op "${OP:-ag,rs}" --time-limit $(( ${LIMIT:-540} / REPEATS )) --out "$FILE" ${EXTRA:-} 2>&1 \
    | grep -v -i 'warn' | grep -v 'screened [0-9]*/' | tee -a "$OUT/log_w$N.txt"
  [ -f "$FILE" ] && { cp "$FILE" "$OUT/collective_w${N}_r$k.json" 2>/dev/null; files+=("$FILE"); }
  python3 - "$FILE" <<'PY'
import json, sys
for k, v in json.load(open(sys.argv[1])).items():
    print(k, "complete" if v["complete"] else "INCOMPLETE", f"{len(v['screen_ms'])}/{v['kept']} screened,",
          len(v["failed"]), "failed, best", v["best"], round(v["best_ms"], 4), "ms,", round(v["seconds"]), "s")
PY
done
if [ ${#files[@]} -gt 0 ]; then
  python3 benchmarks/_collective_report.py --oracle "${files[@]}" --pooled-out "$OUT/collective_w$N.json" \
    && echo "pooled ${#files[@]} recording(s) into $OUT/collective_w$N.json"
  cp "$OUT/collective_w$N.json" "$STATE/collective_w$N.json" 2>/dev/null  # the choices' oracle on a warm machine
fi
