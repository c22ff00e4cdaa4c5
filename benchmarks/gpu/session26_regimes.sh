#!/usr/bin/env bash
# Issue 41, twenty-sixth session, one call on one GPU (CPUs 0-15): the configs a validation's judge and the tuner read
# differently, timed in three regimes side by side (benchmarks/judge_regimes.py): GEMM M = 16's -s4 / -s5 tiles and
# MoE M = 32's w8-s3 tile beside its near-best neighbours (the MoE twice, in two processes). Leaves *.json, *.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session26_regimes.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
run() {  # name family shape configs
  HOME=$(mktemp -d) timeout 170 taskset -c 0-15 python3 benchmarks/judge_regimes.py --family "$2" --shape "$3" \
    --configs "$4" --rounds 16 --out "$OUT/$1.json" > "$OUT/$1.txt" 2>&1
  echo "$1: exit $? after $SECONDS s"; tail -n 8 "$OUT/$1.txt"
}
run gemm16 gemm_k4096_n4096 16 16x32x128-g1-w4-s5,16x32x128-g8-w4-s5,16x32x128-g1-w4-s4,16x32x128-g8-w4-s4,16x32x128-g1-w4-s3
moe=M16-N128-K128-G1-w8-s4,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s3,M16-N64-K128-G16-w4-s5,M16-N64-K128-G1-w4-s5
run moe32a moe 32 "$moe"
run moe32b moe 32 "$moe"
