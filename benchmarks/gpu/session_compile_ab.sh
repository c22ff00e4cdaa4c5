#!/usr/bin/env bash
# One H200 call of the 2026-11-29 third session (issue 41): the first key with compiles (M = 256, a fresh Triton
# cache each), four ways side by side, in two rounds (the second in reverse order): 16 compile threads (the default),
# 16 threads handing their compiles to 16 worker processes (TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=16), 16 threads
# with a 0.5 ms thread switch interval (TDT_BENCH_SWITCH_S), 8 threads; then the quick start with and without
# workers.
# Usage: OUT=DIR bash benchmarks/gpu/session_compile_ab.sh     (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/session_compile_ab}; mkdir -p "$OUT/ab"
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
one() {  # NAME PROCESSES SWITCH THREADS
  mkdir -p "$OUT/ab/$1"
  TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=$2 TDT_BENCH_SWITCH_S=$3 TRITON_DIST_AUTOTUNE_COMPILE_THREADS=$4 \
    timeout "${ABTIME:-60}" python3 benchmarks/bench_breakdown.py --out "$OUT/ab/$1" --shapes "${AB_SHAPES:-256}" \
    --passes 1 "${smoke[@]}" > "$OUT/ab/$1/log.txt" 2>&1
  echo "$1 exit $? after $SECONDS s: $(grep '^| p0' "$OUT/ab/$1/breakdown.md" | head -n 1)"
}
one r1-threads16 0 "" 16; one r1-workers16 16 "" 16; one r1-switch05 0 0.0005 16; one r1-threads8 0 "" 8
one r2-threads8 0 "" 8; one r2-switch05 0 0.0005 16; one r2-workers16 16 "" 16; one r2-threads16 0 "" 16
(cd "$OUT" && tar czf ab.tgz ab)
rm -rf "$OUT/ab"
cpu=(); [ -n "${CPU_SMOKE:-}" ] && cpu=(--cpu)
for procs in 0 16; do
  HOME=$(mktemp -d) TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=$procs TRITON_DIST_AUTOTUNE_LOG_DIR=$(mktemp -d) \
    timeout 120 bash launch.sh "${cpu[@]}" examples/quickstart.py > "$OUT/quickstart_$procs.txt" 2>&1
  echo "quickstart processes=$procs exit $? after $SECONDS s: $(grep -h 'time:' "$OUT/quickstart_$procs.txt" | head -n 1)"
done
