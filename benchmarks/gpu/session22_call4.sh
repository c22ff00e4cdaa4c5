#!/usr/bin/env bash
# Issue 41, twenty-second session, one call on nvidia-h200 (one GPU, 16 CPUs), this tree: at MoE M = 32, which way
# of timing reads the bistable w8-s3 as the race does (fast) and which as the judge does (slow)? In call 1 the race
# read it fast in 11 of 12 tunings and the judgement right after each read it 1.024-1.079 in all 12, in one process.
# level_choices.py --compare placements --regimes 4 over the same 8 finalists, 10 tunings: after each tuning and its
# judgement, the configs timed under each regime of regime_check.py (graphs of 1 or 20 calls, the output allocated
# per call or not, 1-20 ms settling and windows) and by the tuner's own screening samples, interleaved in time.
# Leaves regimes_32.{txt,json}.
# Usage: OUT=DIR bash benchmarks/gpu/session22_call4.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session22_call4.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cpus=0-15 smoke=() tunings=10 m=32
configs=M16-N64-K64-G1-w4-s3,M16-N64-K64-G16-w4-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s3,M16-N128-K128-G16-w4-s4,M16-N128-K128-G16-w8-s4,M16-N128-K128-G16-w8-s5
if [ -n "${CPU_SMOKE:-}" ]; then
  m=8 smoke=(--cpu-smoke --rounds 2) cpus=0 tunings=2 configs=M16-N32-K16-G1-w4-s2,M16-N32-K32-G1-w4-s2
fi
bench_py "level_choices --regimes M=$m" "$OUT/regimes_$m.txt" "${LTIME:-400}" "$cpus" benchmarks/level_choices.py \
  --family moe --m "$m" --configs "$configs" --tunings "$tunings" --compare placements --regimes 4 \
  --out "$OUT/regimes_$m.json" "${smoke[@]}"
grep -h "long judge\|by the\|regime .*w8-s3\|regime .*w4-s4\|exit" "$OUT/regimes_$m.txt"
