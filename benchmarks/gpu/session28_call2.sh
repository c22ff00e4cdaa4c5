#!/usr/bin/env bash
# Issue 41, twenty-eighth session, one call on one H200 (nvidia-h200, CPUs 0-15):
# (1) the near-tie block change again, now with one Triton cache that every run shares (call 1's runs each compiled
#     the space): GEMM M = 1024 and 4096, this tree against ARM_OLD (ddbb797, the tree before c894525, carried),
#     new old new old new old, 4 fresh tunings per shape each;
# (2) MoE M = 32's four G1 tiles after a short compute-bound GEMM (one or 1 ms of 4096^3), after 1 and 5 ms of
#     memory-bound copies, and after one 8192^3 GEMM, 16 rounds (judge_regimes.py --preludes);
# (3) the one-GPU acceptance (fresh HOME), with what time is left.
# Leaves validate_ab.tgz, pre.tgz, acc.tgz, acc_table.md, summary.txt.
# Usage: OUT=DIR ARM_OLD=arms/s27race bash benchmarks/gpu/session28_call2.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/pre"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/_acceptance_left.sh"
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  OUT=$OUT/ab ARM_OLD=${ARM_OLD:?set ARM_OLD} ARMS="new old new old new old" FAMILY=gemm_k4096_n4096 \
    SHAPES=1024,4096 TUNINGS=4 VTIME=150 SHARED_TRITON_CACHE=$(mktemp -d) taskset -c 0-15 \
    bash benchmarks/gpu/validate_ab.sh
  mv "$OUT/ab/validate_ab.tgz" "$OUT/" && rmdir "$OUT/ab"
  echo "A/B done after $SECONDS s"
  m32=M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s4
  HOME=$(mktemp -d) timeout 150 taskset -c 0-15 python3 benchmarks/judge_regimes.py --family moe --shape 32 \
    --configs "$m32" --rounds 16 --preludes none,gemm4k0,gemm4k1,copy1,copy5,heavy0 \
    --out "$OUT/pre/m32.json" > "$OUT/pre/m32.txt" 2>&1
  echo "m32 preludes: exit $? after $SECONDS s"; tail -n 16 "$OUT/pre/m32.txt"
  (cd "$OUT" && tar czf pre.tgz pre && rm -rf pre)
  left=$((${CALL_S:-570} - SECONDS - 15))
  MIN=110 acceptance_left "$left"
} 2>&1 | tee "$OUT/summary.txt"
