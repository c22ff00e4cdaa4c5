#!/usr/bin/env bash
# Issue 41, twenty-eighth session, one call on one H200: the five configs that call 4's GEMM M = 1024 tunings chose
# (both arms), judged on this GPU in three regimes (graph20, eager, among heavy layers), 16 rounds, in three
# processes: are they a near tie here, and does their order change from process to process?
# Leaves judge.tgz, summary.txt.  Usage: OUT=DIR bash benchmarks/gpu/session28_call5.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/judge"
export PYTHONUNBUFFERED=1
chosen=128x256x32-g1-w8-s4,128x256x32-g1-w8-s5,128x256x32-g8-w8-s4,128x256x32-g8-w8-s5,64x256x32-g8-w4-s4
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  for k in a b c; do
    HOME=$(mktemp -d) timeout 150 taskset -c 0-15 python3 benchmarks/judge_regimes.py --family gemm_k4096_n4096 \
      --shape 1024 --configs "$chosen" --rounds 16 --out "$OUT/judge/m1024$k.json" > "$OUT/judge/m1024$k.txt" 2>&1
    echo "m1024 $k: exit $? after $SECONDS s"; tail -n 8 "$OUT/judge/m1024$k.txt"
  done
} 2>&1 | tee "$OUT/summary.txt"
cd "$OUT" && tar czf judge.tgz judge && rm -rf judge
