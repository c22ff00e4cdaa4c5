#!/usr/bin/env bash
# Issue 41, forty-fifth session, the final call on one H200: the held-out shapes' candidates (N = 4096, K = 14336,
# M = 8192 and 16384) timed alone, interleaved as the settled block, and in an MLP after a cuBLAS up projection
# (benchmarks/power_regimes.py, no tuning; into OUT/regimes_final.tgz), then this session's final code through
# session42_h100.sh: the GPU tests, the whole one-GPU acceptance, the command line, two campaigns alone.
# Usage: OUT=DIR bash benchmarks/gpu/session45_final.sh   (carry arms/fla_site: bash benchmarks/gpu/fla_site.sh arms/fla_site)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/regimes_final"
export PYTHONUNBUFFERED=1
c8=128x256x64-g8-w8-s4,128x256x64-g8-w8-s3,64x256x64-g8-w4-s4,64x256x64-g8-w8-s4,64x256x64-g8-w8-s5
c16=128x256x64-g8-w8-s4,128x256x64-g8-w8-s3,64x256x64-g8-w4-s4,64x256x64-g8-w4-s5,64x256x64-g8-w8-s4
for m in 8192 16384; do
  cfgs=$c8; [ $m = 16384 ] && cfgs=$c16
  HOME=$(mktemp -d) PYTHONPATH=$PWD timeout 60 taskset -c 0-15 python3 benchmarks/power_regimes.py --m $m \
    --nk 4096,14336 --configs $cfgs --regimes mlp,alone,interleaved --no-tuning \
    --out "$OUT/regimes_final/regimes_$m.json" > "$OUT/regimes_final/regimes_$m.txt" 2>&1
  echo "regimes $m: exit $? after $SECONDS s"
  tail -n 5 "$OUT/regimes_final/regimes_$m.txt"
done
(cd "$OUT" && tar czf regimes_final.tgz regimes_final && rm -rf regimes_final)
CALL_S=$((${CALL_S:-585} - SECONDS)) bash benchmarks/gpu/session42_h100.sh
