#!/usr/bin/env bash
# Issue 41, seventeenth session, one call on nvidia-h200 (one GPU, 16 CPUs): the README's MoE campaign alone, this
# tree (`new`) and ARM_OLD (`old`, default arms/s16f = `git archive 5c1f368 triton_dist_tune examples`; carry it)
# alternating: ARMS (default "new old new"). Leaves NAME.tgz and NAME.txt (NAME default camp17e).
# Usage: OUT=DIR [ARMS="new old new"] bash benchmarks/gpu/session17_call5.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session17_call5.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; NAME=${NAME:-camp17e}; mkdir -p "$OUT/$NAME"
old=$(cd "${ARM_OLD:-arms/s16f}" && pwd)
pair_defaults
cpus=0-15; [ -n "${CPU_SMOKE:-}" ] && cpus=0
k=0
for arm in ${ARMS:-new old new}; do
  k=$((k + 1)); root=$PWD; [ "$arm" = old ] && root=$old
  mkdir -p "$OUT/$NAME/$k-$arm"
  echo "$k $arm $(CAMPAIGN_TIME=100 campaign_alone "$OUT/$NAME/$k-$arm" "$root" 0 "$cpus" 29860)" | tee -a "$OUT/$NAME.txt"
done
(cd "$OUT" && tar czf $NAME.tgz $NAME && rm -rf $NAME)
