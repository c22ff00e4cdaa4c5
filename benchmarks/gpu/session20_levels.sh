#!/usr/bin/env bash
# Issue 41, owed by the twentieth session, one call on one GPU: are the race's two-level rule's choices better than
# the medians'? benchmarks/level_choices.py at MoE M = 48 and then 32, over the 10 finalists of the twentieth
# session's campaign at 48 tokens (call 1; the rule fired there on configs 225 and 229): 12 fresh tunings each,
# alternating the rule on and off, a judgement after each, averaged into the long judge.
# Leaves levels_48.{txt,json}, levels_32.{txt,json}.
# Usage: OUT=DIR bash benchmarks/gpu/session20_levels.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session20_levels.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
shapes="48 32" smoke=() cpus=0-15 tunings=12
configs=M16-N64-K64-G1-w4-s3,M16-N64-K64-G16-w4-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s3,M16-N128-K128-G16-w4-s4,M16-N128-K128-G16-w8-s4,M16-N128-K128-G16-w8-s5,M32-N128-K128-G1-w4-s3,M32-N128-K128-G1-w8-s3
if [ -n "${CPU_SMOKE:-}" ]; then
  shapes=8 smoke=(--cpu-smoke --rounds 2) cpus=0 tunings=2 configs=M16-N32-K16-G1-w4-s2,M16-N32-K32-G1-w4-s2
fi
for m in $shapes; do
  bench_py "level_choices M=$m" "$OUT/levels_$m.txt" "${LTIME:-240}" "$cpus" benchmarks/level_choices.py \
    --family moe --m "$m" --configs "$configs" --tunings "$tunings" --out "$OUT/levels_$m.json" "${smoke[@]}"
  grep -h "long judge\|levels:\|medians:\|exit" "$OUT/levels_$m.txt"
done
