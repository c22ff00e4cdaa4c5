#!/usr/bin/env bash
# Issue 39, item 5: why bench_ag_gemm.py's cells spread over repeats. One tuning (its cache shared by every run,
# so every run times the same chosen configs), then the benchmark in several regimes, each with 3 repeats in one
# process; every run writes its raw samples and diagnosis.md (benchmarks/_ag_diagnose.py). nvidia-smi samples the
# SM clock, power and clock-event reasons every 50 ms beside it (a fallback where pynvml is missing).
#   bash benchmarks/gpu/diagnose_ag_gemm.sh      (4 GPUs, or 2 where only 2 are; about 5 minutes)
# EXTRA: more arguments for every run (a CPU plumbing check: TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= EXTRA="--ag-shapes
# 32x16x16 --rs-shapes 32x16x16 --rounds 2 --lat-calls 2 --warmup 1 --window-ms 1 --settle-ms 1")
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HOME=$(mktemp -d); export HOME
OUT=${OUT:-/tmp/ag_diag_out}; mkdir -p "$OUT"
export TRITON_DIST_AUTOTUNE_CACHE_DIR="$OUT/tune_cache" TRITON_CACHE_DIR="$HOME/triton_cache"
N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); if [ "$N" -ge 4 ]; then N=4; else N=2; fi
python3 -c 'import pynvml' 2>/dev/null && echo "pynvml: yes" || echo "pynvml: no (nvidia-smi log only)"
for reasons in clocks_event_reasons.active clocks_throttle_reasons.active ""; do
  fields="timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu${reasons:+,$reasons}"
  nvidia-smi --query-gpu="$fields" --format=csv,noheader >/dev/null 2>&1 && break
done
nvidia-smi --query-gpu="$fields" --format=csv -lms 50 > "$OUT/smi.csv" 2>&1 &
smi=$!
bench() { local name=$1; shift
  echo "== $name: $*"
  timeout 240 python3 -m torch.distributed.run --standalone --nproc-per-node "$N" benchmarks/bench_ag_gemm.py \
    --out "$OUT/$name" --repeats 3 ${EXTRA:-} "$@" 2>&1 | grep -v -i warn > "$OUT/$name.log"
  grep -A12 '^### Verdicts' "$OUT/$name/bench_ag_gemm.md" 2>/dev/null || tail -n 20 "$OUT/$name.log"
}
bench default --nccl-debug --window-ms 15 --settle-ms 20   # the regime of the 5-36% figures (15 ms, shuffled)
bench fixed_order --order fixed --window-ms 15 --settle-ms 20  # the same order every round
bench long_windows --window-ms 60 --settle-ms 100  # the benchmark's default since this diagnosis
bench short_windows --window-ms 5 --settle-ms 20
(export NCCL_ALGO=Ring NCCL_PROTO=Simple; bench ring_simple --window-ms 15 --settle-ms 20)   # NCCL's algorithm and protocol pinned
kill "$smi" 2>/dev/null
for d in "$OUT"/*/; do [ -f "$d/diagnosis.md" ] && { echo "== $d"; cat "$d/diagnosis.md"; }; done
