#!/usr/bin/env bash
# Issue 41, twenty-second session, one call on nvidia-h200 (one GPU): benchmarks/block_position.py at MoE M = 32
# with two other subjects, 5 ms samples: w4-s3 (the other bistable tile) and w4-s4 (the judges' best), each against
# w8-s3, w4-s3 or w4-s4, G16-w8-s4 and N64-K64-G1-w4-s3. Leaves block_<subject>.{txt,json}.
# (Run as one command line in the session; kept here as the script it was.)
# Usage: OUT=DIR bash benchmarks/gpu/session22_call6.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
home=/tmp/bph  # as run (a fixed folder; a fresh machine has none)
for s in M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G16-w8-s4,M16-N64-K64-G1-w4-s3 \
         M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G16-w8-s4,M16-N64-K64-G1-w4-s3; do
  n=${s%%,*}
  HOME=$home PYTHONPATH=$PWD timeout 100 taskset -c 0-15 python3 benchmarks/block_position.py --family moe --m 32 \
    --configs "$s" --sample-ms 5 --out "$OUT/block_$n.json" > "$OUT/block_$n.txt" 2>&1
  grep repeat "$OUT/block_$n.txt" | sed 's/us; .*/us/' | sed 's/^.*\] //'
done
