#!/usr/bin/env bash
# Issue 41, twenty-first session, one call on nvidia-h200 (one GPU, 16 CPUs), this tree: the race's settled leaders
# timed at 4 output placements (measure/graphs.py, race.py "Placements"):
# 1. the GPU tests of the captures (tests/test_graphs_cuda.py: each placement's outputs elsewhere);
# 2. level_choices.py --compare placements at MoE M = 32 and 48 over the finalists of session20_levels.sh that each
#    keeps: 12 fresh tunings alternating 4 placements and one, judged by the long judge (one output) and over 16
#    output placements;
# 3. the README's MoE campaign twice (what the placements cost), with the host's speed read (session21_call1.sh).
# Leaves gpu_tests.txt, placements_{32,48}.{txt,json}, camp21c.{tgz,txt}.
# Usage: OUT=DIR bash benchmarks/gpu/session21_call5.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session21_call5.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
here=$(dirname "$0")
source "$here/_campaign.sh"
gpu_tests "$OUT/gpu_tests.txt"
cpus=0-15 smoke=() tunings=12 shapes="32 48"
m16=M16-N64-K64-G1-w4-s3,M16-N64-K64-G16-w4-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s3,M16-N128-K128-G16-w4-s4,M16-N128-K128-G16-w8-s4,M16-N128-K128-G16-w8-s5
if [ -n "${CPU_SMOKE:-}" ]; then
  shapes=8 smoke=(--cpu-smoke --rounds 2) cpus=0 tunings=2 m16=M16-N32-K16-G1-w4-s2,M16-N32-K32-G1-w4-s2
fi
for m in $shapes; do
  configs=$m16; [ "$m" = 48 ] && configs=$m16,M32-N128-K128-G1-w4-s3,M32-N128-K128-G1-w8-s3
  HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${LTIME:-150}" taskset -c "$cpus" python3 benchmarks/level_choices.py \
    --family moe --m "$m" --configs "$configs" --tunings "$tunings" --compare placements \
    --out "$OUT/placements_$m.json" "${smoke[@]}" > "$OUT/placements_$m.txt" 2>&1
  echo "level_choices --compare placements M=$m: exit $?" >> "$OUT/placements_$m.txt"
  grep -h "long judge\|by the\|exit" "$OUT/placements_$m.txt"
done
NAME=camp21c RUNS=${RUNS:-2} bash "$here/session21_call1.sh"
