#!/usr/bin/env bash
# Issue 41, twenty-second session, one call on nvidia-h200 (one GPU, 16 CPUs): is M = 32's w8-s3 fast only after the
# device has been busy a while, or only after certain configs? benchmarks/block_position.py over the 8 finalists of
# session22_call4.sh (w8-s3 the subject): blocks after 100 ms idle, the subject alone, after each other config by
# turns, and all 8 in a cycle; 5 ms samples, then 2 ms samples (the screening's span). Leaves block_{5,2}ms.{txt,json}.
# Usage: OUT=DIR bash benchmarks/gpu/session22_call5.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session22_call5.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cpus=0-15 smoke=() m=32 home=$(mktemp -d)
configs=M16-N128-K128-G1-w8-s3,M16-N64-K64-G1-w4-s3,M16-N64-K64-G16-w4-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G16-w4-s4,M16-N128-K128-G16-w8-s4,M16-N128-K128-G16-w8-s5
if [ -n "${CPU_SMOKE:-}" ]; then
  m=8 smoke=(--cpu-smoke --samples 6 --head 2 --repeats 1) cpus=0 configs=M16-N32-K16-G1-w4-s2,M16-N32-K32-G1-w4-s2
fi
for ms in 5 2; do
  BENCH_HOME=$home bench_py "block_position ${ms} ms" "$OUT/block_${ms}ms.txt" "${BTIME:-120}" "$cpus" \
    benchmarks/block_position.py --family moe --m "$m" --configs "$configs" --sample-ms "$ms" \
    --out "$OUT/block_${ms}ms.json" "${smoke[@]}"
  grep -h "repeat\|exit" "$OUT/block_${ms}ms.txt" | sed 's/us; .*/us/'
done
