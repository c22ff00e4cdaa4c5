#!/usr/bin/env bash
# Issue 41, fourteenth session, one call on nvidia-h200-x2: does capturing each config's graph under the tuning's
# deadline cost the README's MoE campaign anything? This tree against ARM_OLD (default arms/s14a = `git archive
# 115a611 triton_dist_tune examples`: the same library before the capture was guarded), side by side, then the GPUs
# swapped (GPU 0 on CPUs 0-15, GPU 1 on CPUs 16-31); the campaign alone each time. Leaves camp7.tgz and camp7.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session14_call7.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session14_call7.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT/camp7"
old=$(cd "${ARM_OLD:-arms/s14a}" && pwd)
pair_defaults
one() {  # pass, arm (new: this tree; old: ARM_OLD), GPU
  local root=$PWD; [ "$2" = old ] && root=$old
  mkdir -p "$OUT/camp7/$1-$2"
  echo "$1 $2 gpu $3 $(CAMPAIGN_TIME=110 campaign_alone "$OUT/camp7/$1-$2" "$root" "$3" "${cpus[$3]}" $((29830 + $3)))"
}
swapped_pairs "$OUT/camp7" new old
cat "$OUT"/camp7/*.txt > "$OUT/camp7.txt"
(cd "$OUT" && tar czf camp7.tgz camp7 && rm -rf camp7)
cat "$OUT/camp7.txt"
