#!/usr/bin/env bash
# Issue 41, twenty-eighth session, one call on one H200 (nvidia-h200, CPUs 0-15), calls 1 and 4:
# (1) a change to the race's near-tie blocks on the GPU: GEMM M = 1024 validation, this tree against ARM_OLD (the
#     tree before the change, `git archive COMMIT triton_dist_tune examples 'benchmarks/*.py'`, carried: call 1
#     ddbb797 against c894525, call 4 b39669d against 2ae8a11), alternating new old new old new old, 6 fresh tunings
#     each, one shared Triton cache (only the first run compiles; ARM_OLD's validate_search.py must read
#     TDT_BENCH_SHARED_TRITON_CACHE); each row records the race's rounds (run_*.json);
# (2) then the one-GPU acceptance (fresh HOME, its own Triton cache), if the A/B left the time (CALL_S: the call's).
# Leaves validate_ab.tgz, acc.tgz, acc_table.md, summary.txt.
# Usage: OUT=DIR ARM_OLD=arms/s28nocap [CALL_S=575] bash benchmarks/gpu/session28_call1.sh
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
  left=$((${CALL_S:-575} - SECONDS - 15))
  acceptance_left "$left"
} 2>&1 | tee "$OUT/summary.txt"
