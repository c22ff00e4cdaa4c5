#!/usr/bin/env bash
# Issue 41, twenty-first session, one call on nvidia-h200 (one GPU, 16 CPUs), this tree:
# 1. benchmarks/placement_samples.py at MoE M = 32 over 8 of the campaign's finalists there: which output placement
#    each settled leader read slow at, tuning after tuning (a placement slow every time would be an artefact);
# 2. the README's MoE campaign with one placement (`one`: lockstep.PLACEMENTS = 1, as before) and with four (`new`),
#    alternating: what the placements cost. Each run's rank log says where the rule fired.
# Leaves placement_samples_32.{txt,json}, camp21d.{tgz,txt}.
# Usage: OUT=DIR [ARMS="one new"] bash benchmarks/gpu/session21_call6.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session21_call6.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT/camp21d"
pair_defaults
cpus=0-15 smoke=() m=32 tunings=10
configs=M16-N64-K64-G1-w4-s3,M16-N64-K128-G1-w4-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w8-s4,M16-N128-K128-G16-w8-s4,M16-N128-K128-G16-w4-s4
if [ -n "${CPU_SMOKE:-}" ]; then
  cpus=0 smoke=(--cpu-smoke --rounds 2) m=8 tunings=1 configs=M16-N32-K16-G1-w4-s2,M16-N32-K32-G1-w4-s2
fi
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${PTIME:-120}" taskset -c "$cpus" python3 benchmarks/placement_samples.py \
  --family moe --m "$m" --configs "$configs" --tunings "$tunings" --out "$OUT/placement_samples_$m.json" \
  "${smoke[@]}" > "$OUT/placement_samples_$m.txt" 2>&1
echo "placement_samples: exit $?" >> "$OUT/placement_samples_$m.txt"
grep -h "both samples\|exit" "$OUT/placement_samples_$m.txt"
placement_arms "$OUT/camp21d" 0 "$cpus" 29890 ${ARMS:-one new}
