#!/usr/bin/env bash
# Issue 41, twenty-eighth session, one call on one H200 (nvidia-h200, CPUs 0-15):
# (1) the near-tie block change (c894525) on the GPU: GEMM M = 1024 validation, this tree against ARM_OLD (the tree
#     before it: `git archive ddbb797 triton_dist_tune examples 'benchmarks/*.py'`, with its validate_search.py reading
#     TDT_BENCH_SHARED_TRITON_CACHE; carried), alternating new old new old new old, 6 fresh tunings each, one shared
#     Triton cache (only the first run compiles); each row records the race's rounds (run_*.json);
# (2) then the one-GPU acceptance (fresh HOME, its own Triton cache), if the A/B left the time.
# Leaves validate_ab.tgz, acc.tgz, acc_table.md, summary.txt.
# Usage: OUT=DIR ARM_OLD=arms/s27race bash benchmarks/gpu/session28_call1.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/_acceptance_left.sh"
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  OUT=$OUT/ab ARM_OLD=${ARM_OLD:?set ARM_OLD} ARMS="new old new old new old" FAMILY=gemm_k4096_n4096 SHAPES=1024 \
    TUNINGS=6 VTIME=${VTIME:-150} SHARED_TRITON_CACHE=$(mktemp -d) taskset -c 0-15 bash benchmarks/gpu/validate_ab.sh
  mv "$OUT/ab/validate_ab.tgz" "$OUT/" && rmdir "$OUT/ab"
  echo "A/B done after $SECONDS s"
  left=$((${CALL_S:-560} - SECONDS - 20))
  MIN=120 acceptance_left "$left"
} 2>&1 | tee "$OUT/summary.txt"
