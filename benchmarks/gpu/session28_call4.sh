#!/usr/bin/env bash
# Issue 41, twenty-eighth session, one call on one H200 (CPUs 0-15):
# (1) a near-tie block of at most 3 leaders (2ae8a11, TIE_LEADERS) against the tree before it (ARM_OLD: b39669d,
#     `git archive b39669d triton_dist_tune examples 'benchmarks/*.py'`, carried): GEMM M = 1024, new old new old
#     new old, 6 fresh tunings each, one shared Triton cache; each row records the race's rounds;
# (2) the one-GPU acceptance of this tree (fresh HOME), with what time is left.
# Leaves validate_ab.tgz, acc.tgz, acc_table.md, summary.txt.
# Usage: OUT=DIR ARM_OLD=arms/s28nocap bash benchmarks/gpu/session28_call4.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/_acceptance_left.sh"
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  OUT=$OUT/ab ARM_OLD=${ARM_OLD:?set ARM_OLD} ARMS="new old new old new old" FAMILY=gemm_k4096_n4096 SHAPES=1024 \
    TUNINGS=6 VTIME=150 SHARED_TRITON_CACHE=$(mktemp -d) taskset -c 0-15 bash benchmarks/gpu/validate_ab.sh
  mv "$OUT/ab/validate_ab.tgz" "$OUT/" && rmdir "$OUT/ab"
  echo "A/B done after $SECONDS s"
  left=$((${CALL_S:-575} - SECONDS - 15))
  MIN=110 acceptance_left "$left"
} 2>&1 | tee "$OUT/summary.txt"
