#!/usr/bin/env bash
# Issue 41, twenty-seventh session, one call on one H200 (CPUs 0-15), this tree: (1) the one-GPU acceptance again
# (the campaign's command wall time a second time with the one-rank launch); (2) the MoE validation with both judges
# at M = 32, 128, 512, 1024, 2048 (3 fresh tunings each): the spike rule's reach on a family it was not designed on
# (it was chosen on GEMM M = 1024). Leaves acc.tgz, acc_table.md, moe.tgz, summary_acc.txt, summary_moe.txt, summary.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session27_heldout.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  HOME=$(mktemp -d) timeout 200 taskset -c 0-15 python3 benchmarks/gpu/acceptance.py --out "$OUT/acc" --budget 180 \
    --only quickstart,moe_alone,moe_campaign > "$OUT/acc_stdout.txt" 2>&1
  echo "acceptance: exit $? after $SECONDS s"; grep '^|' "$OUT/acc/acceptance.md" | cut -c1-300
  cp "$OUT/acc/acceptance.md" "$OUT/acc_table.md"
  (cd "$OUT" && tar czf acc.tgz acc acc_stdout.txt && rm -rf acc acc_stdout.txt)
} 2>&1 | tee "$OUT/summary_acc.txt"
OUT=$OUT VTIME=${VTIME:-260} STEPS=moe MOE_SHAPES=32,128,512,1024,2048 bash benchmarks/gpu/session24_probes.sh \
  > "$OUT/summary_moe.txt" 2>&1
tail -n 3 "$OUT/summary_moe.txt"; rm -f "$OUT/gpu.txt"
