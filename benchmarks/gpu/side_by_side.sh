#!/usr/bin/env bash
# Issue 39, one GPU: the MoE validation with one screening sample per config (the search before issue 39) and with
# the defaults, one after the other on the same machine in one call, on the shapes where the defaults missed.
# Usage: OUT=DIR bash benchmarks/gpu/side_by_side.sh
set -u
export PYTHONUNBUFFERED=1 HOME=$(mktemp -d)
OUT=${OUT:-/tmp/side}; mkdir -p "$OUT"
for round in 1 2; do
  for variant in one default; do
    flag=(); [ "$variant" = one ] && flag=(--one-sample)
    timeout 140 python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --family moe --tunings 3 \
      --shapes 16,32,128,1024 --out "$OUT/moe_${variant}_$round.json" "${flag[@]}" > "$OUT/log_${variant}_$round.txt" 2>&1
    echo "$variant round $round: exit $?"
    grep -o "M=[0-9]* tuning [0-9]: [^ ]* ratio [0-9.]*" "$OUT/log_${variant}_$round.txt"
  done
done
