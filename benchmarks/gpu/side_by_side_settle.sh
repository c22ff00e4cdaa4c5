#!/usr/bin/env bash
# Issue 41, one GPU: a family's validation (FAMILY, default the 840-config GEMM, N = K = 4096; SHAPES) under the
# timing protocol's settling and probe as given per arm, one after the other in one call, in an order reversed
# halfway: choices within 1.02, seconds per key and their breakdown. Arms: default (the library's: screening
# samples settle 5 ms, a round's first 25 ms more, a probe times one call after a config of 0.5 ms or more), s2 /
# s2r10 (settling 2 ms / and a round's first 10 ms more), old (5 ms, 25 ms, one probe call from 2 ms: the third
# session's protocol). What "default" was in each recorded run: benchmarks/results/session_h200_4/README.md.
# Usage: OUT=DIR [ARMS="default old old default"] [FAMILY=moe SHAPES=32,256,512] bash benchmarks/gpu/side_by_side_settle.sh
# (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1)
set -u
export PYTHONUNBUFFERED=1 HOME=$(mktemp -d)
OUT=${OUT:-/tmp/side_settle}; mkdir -p "$OUT"
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
for variant in ${ARMS:-default old old default}; do
  n=$((${n:-0} + 1))
  case $variant in
    default) flag=() ;;
    s2) flag=(--screen-settle-ms 2) ;;
    s2r10) flag=(--screen-settle-ms 2 --round-settle-ms 10) ;;
    old) flag=(--screen-settle-ms 5 --round-settle-ms 25 --probe-one-call-ms 2) ;;
  esac
  limit=${STIME:-110}; [ "$n" -eq 1 ] && limit=${STIME_FIRST:-230}
  timeout "$limit" python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus \
    --family "${FAMILY:-gemm_k4096_n4096}" --tunings 3 --shapes "${SHAPES:-1024,4096,8192}" \
    --out "$OUT/${FAMILY:-gemm}_${variant}_$n.json" \
    "${flag[@]}" "${smoke[@]}" > "$OUT/log_${variant}_$n.txt" 2>&1
  echo "$variant ($n): exit $? after $SECONDS s"
  grep -o "M=[0-9]* tuning [0-9]: [^ ]* ratio [^ ]* in [0-9.]* s" "$OUT/log_${variant}_$n.txt"
done
