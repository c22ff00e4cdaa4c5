#!/usr/bin/env bash
# Issue 41, twenty-first session, one call on nvidia-h200 (one GPU, 16 CPUs): the committed output placements
# (4279dd6, after calls 5-6 ran its draft): the GPU tests of the captures, then the README's MoE campaign once with
# the host's speed read (session21_call1.sh, NAME=camp21e), and how many races ranked a leader by its mean.
# Leaves gpu_tests.txt, camp21e.{tgz,txt}.
# Usage: OUT=DIR bash benchmarks/gpu/session21_call7.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session21_call7.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
here=$(dirname "$0")
source "$here/_campaign.sh"
gpu_tests "$OUT/gpu_tests.txt"
NAME=camp21e RUNS=${RUNS:-1} bash "$here/session21_call1.sh"
mkdir -p /tmp/camp21e && tar -xzf "$OUT/camp21e.tgz" -C /tmp/camp21e
zcat /tmp/camp21e/camp21e/*/campaign_rank.log.gz | grep "or placement too" | sed 's/^.*key=(\([0-9]*\),.*too: /tokens \1: /' \
  | tee -a "$OUT/camp21e.txt"
