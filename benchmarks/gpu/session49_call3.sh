#!/usr/bin/env bash
# Issue 41, forty-ninth session, call 3 on one H200: heavy settled samples spanning 5 ms (the defaults, 52f8d29)
# beside 10 ms (bench_fidelity's ours_span10, as before) on two more GEMM families (N = 4096, K = 14336 at M = 16384,
# the down projection, cut short in call 1; N = 5120, K = 13824 at M = 8192, held out of every rule), then the
# 840-config GEMM's corpus validation at M = 8192 (heavy calls) by the tree before (ARM_OLD, an export of 73913eb)
# and this one, each run its own process with a fresh HOME.
# Usage: OUT=DIR ARM_OLD=arms/s48 bash benchmarks/gpu/session49_call3.sh   (carry ARM_OLD)
set -u
OUT=${OUT:?set OUT}
for spec in "4096,14336 16384 120" "5120,13824 8192 110"; do
  read -r nk m secs <<< "$spec"
  OUT=$OUT/fid_${nk/,/x} VARIANTS=ours,ours_span10 NK=$nk SHAPES=$m FTIME=$secs ACCEPTANCE=0 \
    bash benchmarks/gpu/session47_final.sh
done
OUT=$OUT/validate FAMILY=gemm_k4096_n4096 SHAPES=${VSHAPES:-8192} MIRROR=0 STIME=${STIME:-150} \
  ARMS="old=${ARM_OLD:?set ARM_OLD} new=." bash benchmarks/gpu/side_by_side_trees.sh
cat "$OUT/validate/summary.md"
(cd "$OUT" && tar czf validate.tgz validate && rm -rf validate)
echo "call ended after $SECONDS s"
