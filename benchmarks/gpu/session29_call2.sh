#!/usr/bin/env bash
# Issue 41, twenty-ninth session, one call on one H200 (nvidia-h200, CPUs 0-15):
# (1) the MoE example alone and the README campaign, twice, each time with a fresh HOME and Triton cache (the
#     acceptance's steps moe_alone and moe_campaign): the command's time outside its keys, now that guesses are
#     dropped at exit and the weights are drawn on the GPU (call 1, the tree before: start 0.5, imports 4.0,
#     setup 1.5, checks 0.3, exit 1.7 s);
# (2) the 1,600-config MoE validation at M = 32, 128, 512, 1024, 2048 with this tree, fresh tunings, judged on this
#     host too (JUDGE), with what time is left.
# Leaves acc1.tgz, acc2.tgz, acc{1,2}_table.md, moe.tgz, summary.txt.
# Usage: OUT=DIR [CALL_S=575] bash benchmarks/gpu/session29_call2.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
source "$(dirname "$0")/_acceptance_left.sh"
{
  gpu_state
  for k in 1 2; do
    ACC_ARGS="--only moe_alone,moe_campaign" MIN=100 acceptance_left 150
    mv "$OUT/acc.tgz" "$OUT/acc$k.tgz"; mv "$OUT/acc_table.md" "$OUT/acc${k}_table.md"
    echo "acceptance $k done after $SECONDS s"
  done
  OUT=$OUT/m ARMS="new" FAMILY=moe SHAPES=32,128,512,1024,2048 TUNINGS=2 JUDGE=6 \
    VTIME=$((CALL - SECONDS - 15)) SHARED_TRITON_CACHE=$(mktemp -d) taskset -c 0-15 bash benchmarks/gpu/validate_ab.sh
  mv "$OUT/m/validate_ab.tgz" "$OUT/moe.tgz" && rmdir "$OUT/m"
  echo "MoE validation done after $SECONDS s"
} 2>&1 | tee "$OUT/summary.txt"
