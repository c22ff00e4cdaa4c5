#!/usr/bin/env bash
# Issue 41, nineteenth session, one call on one GPU: does the validations' judge repeat itself at MoE M = 32?
# benchmarks/judge_repeat.py judges the 10 configs the validation judged there (call 2) at each step of what the
# validation does before judging, in one process; then benchmarks/regime_check.py times the same 10 in a fresh
# process (its six regimes and the tuner's current samples). Leaves judge_32.{txt,json}, regime_32.{txt,json}.
# Usage: OUT=DIR bash benchmarks/gpu/session19_call5.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session19_call5.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
m=32 smoke=() cpus=0-15
configs=M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w8-s4,M16-N128-K128-G16-w8-s4,M16-N128-K128-G16-w8-s5,M16-N64-K128-G1-w4-s5,M16-N64-K128-G16-w4-s5,M16-N64-K256-G16-w4-s3,M16-N64-K64-G1-w4-s3,M16-N64-K64-G16-w4-s3
if [ -n "${CPU_SMOKE:-}" ]; then
  m=8 smoke=(--cpu-smoke --rounds 2) cpus=0 configs=M16-N32-K16-G1-w4-s2,M16-N32-K32-G1-w4-s2
fi
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout 200 taskset -c "$cpus" python3 benchmarks/judge_repeat.py --family moe \
  --m "$m" --configs "$configs" --out "$OUT/judge_$m.json" "${smoke[@]}" > "$OUT/judge_$m.txt" 2>&1
echo "judge_repeat: exit $?" >> "$OUT/judge_$m.txt"
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout 150 taskset -c "$cpus" python3 benchmarks/regime_check.py --family moe \
  --m "$m" --configs "$configs" --tune 0 --variants device_3_2 --out "$OUT/regime_$m.json" "${smoke[@]}" \
  > "$OUT/regime_$m.txt" 2>&1
echo "regime_check: exit $?" >> "$OUT/regime_$m.txt"
grep -h "bench_search.*: \|exit" "$OUT/judge_$m.txt"; cat "$OUT/regime_$m.txt"
