#!/usr/bin/env bash
# Issue 41, twenty-first session, one call on nvidia-h200 (one GPU, 16 CPUs), this tree only:
# 1. the README's MoE campaign twice with the host's CPU speed read every 0.5 s (session21_call1.sh, NAME=camp21b);
# 2. the two-level rule's choices at MoE M = 32 (level_choices.py over the 8 finalists of session20_levels.sh that
#    M = 32 keeps: its M32 tiles are pruned there), 12 fresh tunings alternating the rule on and off;
# 3. the 48-config bar's two worst shapes again (bench_fidelity.py, M = 2048 and 8192; session 20: 1.0109 and 1.0083,
#    3 of 3 the same choice), 3 tunings, each oracle 24 rounds instead of 8.
# Leaves camp21b.{tgz,txt}, levels_32.{txt,json}, fidelity.{txt,json}.
# Usage: OUT=DIR bash benchmarks/gpu/session21_call3.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session21_call3.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
here=$(dirname "$0")
NAME=camp21b RUNS=${RUNS:-2} bash "$here/session21_call1.sh"
cpus=0-15 smoke=() tunings=12 shapes=2048,8192 rounds=24
configs=M16-N64-K64-G1-w4-s3,M16-N64-K64-G16-w4-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s3,M16-N128-K128-G16-w4-s4,M16-N128-K128-G16-w8-s4,M16-N128-K128-G16-w8-s5
m=32
if [ -n "${CPU_SMOKE:-}" ]; then
  m=8 smoke=(--cpu-smoke --rounds 2) cpus=0 tunings=2 configs=M16-N32-K16-G1-w4-s2,M16-N32-K32-G1-w4-s2
fi
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${LTIME:-150}" taskset -c "$cpus" python3 benchmarks/level_choices.py \
  --family moe --m "$m" --configs "$configs" --tunings "$tunings" --out "$OUT/levels_$m.json" "${smoke[@]}" \
  > "$OUT/levels_$m.txt" 2>&1
echo "level_choices M=$m: exit $?" >> "$OUT/levels_$m.txt"
grep -h "long judge\|levels:\|medians:\|exit" "$OUT/levels_$m.txt"
[ -n "${CPU_SMOKE:-}" ] && exit 0
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${FTIME:-300}" taskset -c "$cpus" python3 benchmarks/bench_fidelity.py \
  --out "$OUT/fidelity.json" --phases tune --tunings 3 --variants ours --shapes "$shapes" --oracle-rounds "$rounds" \
  > "$OUT/fidelity.txt" 2>&1
echo "fidelity: exit $?" >> "$OUT/fidelity.txt"
grep -v "^triton_dist_tune:\|^\[" "$OUT/fidelity.txt" | tail -n 8
