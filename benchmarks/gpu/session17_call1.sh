#!/usr/bin/env bash
# Issue 41, seventeenth session, one call on nvidia-h200-x2: the GPU tests (tests/test_graphs_cuda.py), then the
# README's MoE campaign alone, this tree (`new`: a stage screens what it warmed up while the rest compiles) beside
# ARM_OLD (`old`, default arms/s16f = `git archive 5c1f368 triton_dist_tune examples`; carry it), side by side then
# the GPUs swapped (GPU 0 on CPUs 0-15, GPU 1 on CPUs 16-31), ROUNDS times (default 2: four runs of each arm).
# Leaves NAME.tgz and NAME.txt (NAME default camp17a).
# Usage: OUT=DIR [NAME=camp17a] [ROUNDS=2] bash benchmarks/gpu/session17_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session17_call1.sh
set -u
source "$(dirname "$0")/_campaign.sh"
pair_setup camp17a arms/s16f
swapped_rounds "${ROUNDS:-2}"
