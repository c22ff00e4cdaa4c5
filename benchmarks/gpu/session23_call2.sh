#!/usr/bin/env bash
# Issue 41, twenty-third session, one call on nvidia-h200-x2: the GPU tests (tests/test_graphs_cuda.py), then the
# README's MoE campaign alone, this tree (`new`: a straggler's grace spent once (ad588dd)) beside
# ARM_OLD (`old`, default arms/s23 = `git archive 8e783d0 triton_dist_tune examples`; carry it), side by side then
# the GPUs swapped (GPU 0 on CPUs 0-15, GPU 1 on CPUs 16-31), ROUNDS times (default 2: four runs of each arm).
# Leaves NAME.tgz and NAME.txt (NAME default camp23a).
# Usage: OUT=DIR [NAME=camp23a] [ROUNDS=2] bash benchmarks/gpu/session23_call2.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session23_call2.sh
set -u
source "$(dirname "$0")/_campaign.sh"
pair_setup camp23a arms/s23
swapped_rounds "${ROUNDS:-2}"
for arm in new old; do
  echo "$arm:"; mkdir -p /tmp/parts23 && tar xzf "$OUT/$NAME.tgz" -C /tmp/parts23
  python3 benchmarks/campaign_parts.py /tmp/parts23/$NAME/r*-*-$arm | tee -a "$OUT/$NAME.txt"
done
