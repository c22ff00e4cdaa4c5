#!/usr/bin/env bash
# Issue 41, twenty-third session, one call on nvidia-h200-x2 (2 GPUs, 32 CPUs): the twenty-second session's two owed
# scripts side by side.
# GPU 1, CPUs 16-31: predecessors_m32.sh (the M = 32 bistable tiles after a model's kernels), then fill_ab.sh with
#   ARMS_B (default "f256 f128 f256");
# GPU 0, CPUs 0-15, meanwhile: fill_ab.sh with ARMS_A (default "f128 f256 f128 f256 f128"): the README's MoE campaign
#   with the next-key fill of 128 and 256 by turns.
# Leaves call1.tgz (pred/, filla/, fillb/) and call1_all.txt (every .txt of it).
# Usage: OUT=DIR bash benchmarks/gpu/session23_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR ARMS_A="f128" ARMS_B="f256" bash benchmarks/gpu/session23_call1.sh
set -u
here=$(dirname "$0")
OUT=${OUT:?set OUT}; mkdir -p "$OUT/pred" "$OUT/filla" "$OUT/fillb"
(CUDA_VISIBLE_DEVICES=1 CPUS=16-31 OUT=$OUT/pred bash "$here/predecessors_m32.sh" > "$OUT/pred.txt" 2>&1
 GPU=1 ARMS=${ARMS_B:-f256 f128 f256} OUT=$OUT/fillb bash "$here/fill_ab.sh" > "$OUT/fillb.txt" 2>&1) &
GPU=0 ARMS=${ARMS_A:-f128 f256 f128 f256 f128} OUT=$OUT/filla bash "$here/fill_ab.sh" > "$OUT/filla.txt" 2>&1
wait
cat "$OUT/pred.txt" "$OUT/filla.txt" "$OUT/fillb.txt"
(cd "$OUT" && cat ./*.txt ./*/*.txt > /tmp/call1_all.txt 2>/dev/null; tar czf /tmp/call1.tgz . && rm -rf ./* \
  && mv /tmp/call1.tgz /tmp/call1_all.txt .)
