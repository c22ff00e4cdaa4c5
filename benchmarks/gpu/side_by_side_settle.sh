#!/usr/bin/env bash
# Issue 41, one GPU: the GEMM validation (840 configs, N = K = 4096) at M = 1024 / 4096 / 8192 with the timing
# protocol's settling as it is (screening samples settle 5 ms, a round's first sample 25 ms more) and shorter
# (--screen-settle-ms 2: a config that follows another in a back-to-back round; --round-settle-ms 10), one after
# the other in one call, in an order reversed halfway: choices within 1.02, seconds per key and their breakdown.
# Usage: OUT=DIR bash benchmarks/gpu/side_by_side_settle.sh     (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1)
set -u
export PYTHONUNBUFFERED=1 HOME=$(mktemp -d)
OUT=${OUT:-/tmp/side_settle}; mkdir -p "$OUT"
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
for variant in ${ARMS:-default s2 s2r10 s2r10 s2 default}; do
  n=$((${n:-0} + 1))
  case $variant in
    default) flag=() ;;
    s2) flag=(--screen-settle-ms 2) ;;
    s2r10) flag=(--screen-settle-ms 2 --round-settle-ms 10) ;;
  esac
  limit=${STIME:-110}; [ "$n" -eq 1 ] && limit=${STIME_FIRST:-230}
  timeout "$limit" python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus \
    --family gemm_k4096_n4096 --tunings 3 --shapes "${SHAPES:-1024,4096,8192}" --out "$OUT/gemm_${variant}_$n.json" \
    "${flag[@]}" "${smoke[@]}" > "$OUT/log_${variant}_$n.txt" 2>&1
  echo "$variant ($n): exit $? after $SECONDS s"
  grep -o "M=[0-9]* tuning [0-9]: [^ ]* ratio [^ ]* in [0-9.]* s" "$OUT/log_${variant}_$n.txt"
done
