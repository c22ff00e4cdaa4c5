#!/usr/bin/env bash
# Issue 33's GPU check of the search's defaults on a 4-GPU machine whose GPU model recorded the corpus (H200):
# 3 fresh tunings per shape, one family per GPU, each choice judged by the corpus; GPU 0 also times the first key
# with compiles (a fresh Triton cache, no user code). Writes $OUT/validate.tgz and $OUT/vlog_*.txt.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/validate_out}; mkdir -p "$OUT/validate"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
v() { local gpu=$1; shift; CUDA_VISIBLE_DEVICES=$gpu timeout ${VTIME:-330} python3 benchmarks/validate_search.py \
  --corpus benchmarks/results/corpus --tunings 3 "$@" > "$OUT/vlog_gpu$gpu.txt" 2>&1; }
v 0 --family gemm_k4096_n4096 --first-key 256 --out "$OUT/validate/gemm_k4096_n4096.json" &
v 1 --family gemm_k8192_n2048 --out "$OUT/validate/gemm_k8192_n2048.json" &
v 2 --family moe --out "$OUT/validate/moe.json" &
v 3 --family gemm_fp16_bt --out "$OUT/validate/gemm_fp16_bt.json" &
wait
(cd "$OUT" && tar czf validate.tgz validate)
python3 - "$OUT/validate" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    d = json.loads(f.read_text())
    if "first_key" in d: print("first key", d["first_key"])
    for r in d["rows"]:
        print(d["family"], r["m"], r["tuning"], r["choice"], r["ratio"], round(r["seconds"], 2), r["best_screened"], r["search"])
PY
