#!/usr/bin/env bash
# Issue 41, twenty-seventh session, one call on one H200 (nvidia-h200, CPUs 0-15): (1) the one-GPU acceptance with
# launch.sh starting one rank without torchrun's agent (the campaign's command wall time on the bar's host);
# (2) the GEMM validation at M = 1024, 4096, 8192, this tree against ARM_OLD (the tree before the reach of the
# spike rule: `git archive 026e993 triton_dist_tune examples 'benchmarks/*.py'`, carried), alternating
# new old new old (validate_ab.sh), 3 fresh tunings per shape each.
# Leaves acc.tgz, acc_table.md, validate_ab.tgz, summary.txt.  Usage: OUT=DIR ARM_OLD=arms/s27old bash benchmarks/gpu/session27_final.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  HOME=$(mktemp -d) timeout 260 taskset -c 0-15 python3 benchmarks/gpu/acceptance.py --out "$OUT/acc" --budget 240 \
    > "$OUT/acc_stdout.txt" 2>&1
  echo "acceptance: exit $? after $SECONDS s"; grep '^|' "$OUT/acc/acceptance.md" | cut -c1-300
  cp "$OUT/acc/acceptance.md" "$OUT/acc_table.md"
  (cd "$OUT" && tar czf acc.tgz acc acc_stdout.txt && rm -rf acc acc_stdout.txt)
  OUT=$OUT/ab ARM_OLD=${ARM_OLD:?set ARM_OLD} FAMILY=gemm_k4096_n4096 SHAPES=1024,4096,8192 VTIME=75 \
    taskset -c 0-15 bash benchmarks/gpu/validate_ab.sh
  mv "$OUT/ab/validate_ab.tgz" "$OUT/" && rmdir "$OUT/ab"
} 2>&1 | tee "$OUT/summary.txt"
