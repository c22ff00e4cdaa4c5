#!/usr/bin/env bash
# Issue 41, twenty-seventh session, one call on a 2-GPU host: what makes "among heavy layers" read MoE M = 32's tiles
# in another order than graph replays do: the cache (a 512 MB flush before each window) or the power limiter (1, 5,
# 20 ms of the heavy GEMM), with the SM clock read (judge_regimes.py --preludes). GPU 0 (CPUs 0-15): MoE M = 32's
# four G1 tiles, twice; GPU 1 (CPUs 16-31): GEMM M = 16's -s4/-s5 tiles, then MoE M = 1024's M64-N256 tiles and the
# corpus's best. Fresh HOME each. Leaves pre.tgz, summary.txt.  Usage: OUT=DIR bash benchmarks/gpu/session27_preludes.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/pre"
export PYTHONUNBUFFERED=1
run() {  # gpu cpus name family shape configs
  HOME=$(mktemp -d) CUDA_VISIBLE_DEVICES=$1 timeout 200 taskset -c "$2" python3 benchmarks/judge_regimes.py \
    --family "$4" --shape "$5" --configs "$6" --rounds 24 --preludes flush,heavy1,heavy5,heavy20 \
    --out "$OUT/pre/$3.json" > "$OUT/pre/$3.txt" 2>&1
  echo "$3: exit $? after $SECONDS s"; tail -n 12 "$OUT/pre/$3.txt"
}
m32=M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s4
g16=16x32x128-g1-w4-s4,16x32x128-g1-w4-s5,16x32x128-g8-w4-s4,16x32x128-g8-w4-s5
m1024=M128-N256-K64-G16-w8-s3,M64-N256-K64-G32-w8-s5,M64-N256-K64-G64-w8-s4,M64-N256-K64-G64-w8-s5
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  ( run 0 0-15 moe32a moe 32 "$m32"; run 0 0-15 moe32b moe 32 "$m32" ) > "$OUT/gpu0.txt" 2>&1 &
  run 1 16-31 gemm16 gemm_k4096_n4096 16 "$g16"
  run 1 16-31 moe1024 moe 1024 "$m1024"
  wait
  cat "$OUT/gpu0.txt"
} 2>&1 | tee "$OUT/summary.txt"
cd "$OUT" && tar czf pre.tgz pre gpu0.txt && rm -rf pre gpu0.txt
