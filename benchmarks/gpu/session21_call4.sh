#!/usr/bin/env bash
# Issue 41, twenty-first session, one call on nvidia-h200 (one GPU): does the bistable MoE config's time depend on
# where its output lies? benchmarks/address_check.py at M = 32 (two processes) and M = 48 (one), over the
# K128-M16-N128-G1 tiles (w8-s3, w4-s3, w4-s4) and a stable one (G16-w8-s4).
# Leaves address_{32a,32b,48}.{txt,json}.
# Usage: OUT=DIR bash benchmarks/gpu/session21_call4.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session21_call4.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
runs="32:a 32:b 48:c" smoke=() cpus=0-15 offsets=16
configs=M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G16-w8-s4
if [ -n "${CPU_SMOKE:-}" ]; then
  runs="8:a" smoke=(--cpu-smoke --rounds 2) cpus=0 offsets=2 configs=M16-N32-K16-G1-w4-s2,M16-N32-K32-G1-w4-s2
fi
for run in $runs; do
  m=${run%%:*} tag=$m${run##*:}
  bench_py "address_check M=$m ($tag)" "$OUT/address_$tag.txt" "${ATIME:-180}" "$cpus" benchmarks/address_check.py \
    --family moe --m "$m" --configs "$configs" --offsets "$offsets" --out "$OUT/address_$tag.json" "${smoke[@]}"
  grep -h "graphs of\|  M\|exit" "$OUT/address_$tag.txt"
done
