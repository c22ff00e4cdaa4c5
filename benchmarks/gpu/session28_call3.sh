#!/usr/bin/env bash
# Issue 41, twenty-eighth session, one call on one H200: MoE M = 32's four G1 tiles after what runs before a MoE
# layer in a decode step: skinny cuBLAS GEMMs (32 x 4096 by 4096 x 4096, memory-bound; one, 0.1 ms, 1 ms of them),
# beside one short compute-bound GEMM (gemm4k0, call 2's flip) and none; eager windows and graph replays, 16 rounds,
# two processes. Leaves pre3.tgz, summary.txt.  Usage: OUT=DIR bash benchmarks/gpu/session28_call3.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/pre3"
export PYTHONUNBUFFERED=1
m32=M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s4
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  for k in a b; do
    HOME=$(mktemp -d) timeout 200 taskset -c 0-15 python3 benchmarks/judge_regimes.py --family moe --shape 32 \
      --configs "$m32" --rounds 16 --preludes none,skinny0,skinny0.1,skinny1,gemm4k0 \
      --graph-preludes none,skinny1,gemm4k0 --out "$OUT/pre3/m32$k.json" > "$OUT/pre3/m32$k.txt" 2>&1
    echo "m32 $k: exit $? after $SECONDS s"; tail -n 8 "$OUT/pre3/m32$k.txt"
  done
} 2>&1 | tee "$OUT/summary.txt"
cd "$OUT" && tar czf pre3.tgz pre3 && rm -rf pre3
