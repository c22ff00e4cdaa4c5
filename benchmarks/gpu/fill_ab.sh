#!/usr/bin/env bash
# Owed by the twenty-second session (issue 41), one call on nvidia-h200 (one GPU, 16 CPUs): does a larger next-key
# fill cut the campaign's compile waits? The README's MoE campaign alone, alternating the library's fill of 128
# (`f128`) and 256 (`f256`: measure/ahead.py's likely_for_next_key wrapped, its default being bound when defined),
# ARMS times (default "f128 f256 f128 f256", about 4.5 minutes); each run's parts (campaign_parts.py: compile waits,
# kernels needed and guessed). A quick replay put the fill's cover of the later keys' new configs at 90% against 86%
# (benchmarks/results/cpu/next_key_fill_256.txt). Leaves fill.{tgz,txt}.
# Usage: OUT=DIR [ARMS="f128 f256 ..."] [GPU=0 or 1: the GPU, its CPUs 0-15 or 16-31] bash benchmarks/gpu/fill_ab.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR ARMS="f128 f256" bash benchmarks/gpu/fill_ab.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT/fill"
pair_defaults
k=0 gpu=${GPU:-0}
for arm in ${ARMS:-f128 f256 f128 f256}; do
  k=$((k + 1)); prelude=""
  [ "$arm" = f256 ] && prelude="import functools, triton_dist_tune.measure.ahead as _a; _a.likely_for_next_key = functools.partial(_a.likely_for_next_key, fill=256)"
  mkdir -p "$OUT/fill/$k-$arm"
  echo "$k $arm $(CAMPAIGN_TIME=100 campaign_alone "$OUT/fill/$k-$arm" "$PWD" "$gpu" "${cpus[$gpu]}" $((29895 + gpu)) "$prelude")" \
    | tee -a "$OUT/fill.txt"
done
python3 benchmarks/campaign_parts.py "$OUT"/fill/*-* | tee -a "$OUT/fill.txt"
(cd "$OUT" && tar czf fill.tgz fill && rm -rf fill)
