#!/usr/bin/env bash
# Issue 41, twenty-third session, one call on nvidia-h200 (one GPU, 16 CPUs), this tree (a straggler's grace spent
# once, ad588dd): every one-GPU README command (acceptance.py), then the README's MoE campaign alone twice
# (fill_ab.sh with the library's own fill, `f128`). Leaves acc.tgz, acc.txt, fill.{tgz,txt}.
# Usage: OUT=DIR bash benchmarks/gpu/session23_call4.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session23_call4.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
acc=(--budget "${ACC_BUDGET:-280}") cpus=0-15
[ -n "${CPU_SMOKE:-}" ] && acc=(--cpu --only quickstart) cpus=0
taskset -c "$cpus" python3 benchmarks/gpu/acceptance.py --out /tmp/acc "${acc[@]}" > "$OUT/acc.txt" 2>&1
echo "acceptance (one GPU): exit $?" >> "$OUT/acc.txt"
(cd /tmp && tar czf "$OUT/acc.tgz" acc)
tail -n 16 "$OUT/acc.txt"
ARMS=${ARMS:-f128 f128} OUT=$OUT bash "$(dirname "$0")/fill_ab.sh"
