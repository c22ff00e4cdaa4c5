#!/usr/bin/env bash
# Issue 41, one GPU: the GEMM validation (840 configs, N = K = 4096) at the shapes where the far-behind screening
# acts, with it (the default) and without it (--no-far-behind: every screened config gets its steady sample), one
# after the other in one call, two rounds in alternating order: choices within 1.02 and seconds per key.
# Usage: OUT=DIR bash benchmarks/gpu/side_by_side_far.sh     (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1)
set -u
export PYTHONUNBUFFERED=1 HOME=$(mktemp -d)
OUT=${OUT:-/tmp/side_far}; mkdir -p "$OUT"
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
for variant in default without without default; do
  n=$((${n:-0} + 1))
  flag=(); [ "$variant" = without ] && flag=(--no-far-behind)
  timeout "${STIME:-120}" python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus \
    --family gemm_k4096_n4096 --tunings 3 --shapes "${SHAPES:-1024,4096,8192}" --out "$OUT/gemm_${variant}_$n.json" \
    "${flag[@]}" "${smoke[@]}" > "$OUT/log_${variant}_$n.txt" 2>&1
  echo "$variant ($n): exit $? after $SECONDS s"
  grep -o "M=[0-9]* tuning [0-9]: [^ ]* ratio [^ ]* in [0-9.]* s" "$OUT/log_${variant}_$n.txt"
done
