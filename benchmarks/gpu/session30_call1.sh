#!/usr/bin/env bash
# Issue 41, thirtieth session, one call on one H200 (nvidia-h200, CPUs 0-15), the final tree of the twenty-ninth
# session (df4f2c5 and after: spawned compile workers end by os._exit; the exit's drain ends the shared workers):
# (1) the whole one-GPU acceptance (fresh HOME, its own Triton cache), owed since call 4 of that session ran 181867d;
# (2) the MoE example alone and the README campaign (the acceptance's steps moe_alone, moe_campaign), as many times
#     as the call leaves (at most 2 more), each with a fresh HOME and Triton cache: the command's wall beside its
#     keys on this machine.
# EXTRA: more acceptance arguments for every step (a CPU dry run: EXTRA=--cpu).
# Leaves acc1.tgz (the whole acceptance), acc{2,3}.tgz (the MoE steps), acc{1,2,3}_table.md, summary.txt.
# Usage: OUT=DIR [CALL_S=575] bash benchmarks/gpu/session30_call1.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
source "$(dirname "$0")/_acceptance_left.sh"
{
  gpu_state
  ACC_ARGS="${EXTRA:-}" MIN=110 acceptance_left $((CALL - SECONDS - 20 > 300 ? 300 : CALL - SECONDS - 20))
  mv "$OUT/acc.tgz" "$OUT/acc1.tgz"; mv "$OUT/acc_table.md" "$OUT/acc1_table.md"
  echo "acceptance done after $SECONDS s"
  for k in 2 3; do
    [ $((CALL - SECONDS)) -lt 120 ] && { echo "run $k skipped: $((CALL - SECONDS)) s left"; break; }
    ACC_ARGS="--only moe_alone,moe_campaign ${EXTRA:-}" MIN=100 acceptance_left $((CALL - SECONDS - 15 > 160 ? 160 : CALL - SECONDS - 15))
    mv "$OUT/acc.tgz" "$OUT/acc$k.tgz"; mv "$OUT/acc_table.md" "$OUT/acc${k}_table.md"
    echo "MoE run $k done after $SECONDS s"
  done
  gpu_state
} 2>&1 | tee "$OUT/summary.txt"
