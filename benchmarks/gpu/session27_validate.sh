#!/usr/bin/env bash
# Issue 41, twenty-seventh session, one call on a 2-GPU host: (1) MoE M = 32's four G1 tiles once on each GPU, in
# stream windows after no prelude, 1 / 5 ms of a sleep kernel and 1 ms of the heavy GEMM, and in windows of graph
# replays after none, 1 ms of sleep and 1 ms of heavy GEMM (judge_regimes.py: the host ahead of the device, or the
# heavy kernel's trace, or graph replay against stream launches?); (2) the corpus validation with both judges at
# every shape, GEMM on GPU 0 (CPUs 0-15) beside the MoE on GPU 1 (CPUs 16-31) (session24_probes.sh).
# Leaves pre2.tgz, g/gemm.tgz, m/moe.tgz, summary files.  Usage: OUT=DIR [VTIME=420] bash benchmarks/gpu/session27_validate.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/pre2"
export PYTHONUNBUFFERED=1
m32=M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s4
pre() {  # gpu cpus name
  HOME=$(mktemp -d) CUDA_VISIBLE_DEVICES=$1 timeout 150 taskset -c "$2" python3 benchmarks/judge_regimes.py \
    --family moe --shape 32 --configs "$m32" --rounds 24 --preludes none,sleep1,sleep5,heavy1 \
    --graph-preludes none,sleep1,heavy1 --out "$OUT/pre2/$3.json" > "$OUT/pre2/$3.txt" 2>&1
  echo "$3: exit $? after $SECONDS s"; tail -n 8 "$OUT/pre2/$3.txt"
}
{
  pre 0 0-15 moe32_gpu0 > "$OUT/pre2/gpu0.txt" 2>&1 &
  pre 1 16-31 moe32_gpu1
  wait
  cat "$OUT/pre2/gpu0.txt"
} 2>&1 | tee "$OUT/summary_pre.txt"
(cd "$OUT" && tar czf pre2.tgz pre2 && rm -rf pre2)
VT=${VTIME:-420}
CUDA_VISIBLE_DEVICES=0 CPUS=0-15 OUT=$OUT/g VTIME=$VT STEPS=gemm GEMM_SHAPES=16,256,1024,4096,8192 \
  bash benchmarks/gpu/session24_probes.sh > "$OUT/summary_gemm.txt" 2>&1 &
CUDA_VISIBLE_DEVICES=1 CPUS=16-31 OUT=$OUT/m VTIME=$VT STEPS=moe MOE_SHAPES=32,128,512,1024,2048 \
  bash benchmarks/gpu/session24_probes.sh > "$OUT/summary_moe.txt" 2>&1
wait
tail -n 40 "$OUT/summary_gemm.txt" "$OUT/summary_moe.txt"
rm -f "$OUT/g/gpu.txt" "$OUT/m/gpu.txt" "$OUT/g/summary.txt" "$OUT/m/summary.txt"  # the device tool returns 8 files
