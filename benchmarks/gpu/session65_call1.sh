#!/usr/bin/env bash
# Issue 41, sixty-fifth session, one GPU: the stock-kernel watch's cost per stock launch (stock_watch_cost.py), then
# issue 41's per-key bars and the corpus validation judged here (session42_bars.sh PART=judged).
# Usage: OUT=DIR bash benchmarks/gpu/session65_call1.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
git log -1 --format='tree at %h %s' 2>/dev/null | cut -c1-100
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout 120 taskset -c 0-15 python3 benchmarks/gpu/stock_watch_cost.py \
  --out "$OUT/stock_watch_cost.json" > "$OUT/stock_watch_cost.txt" 2>&1
echo "stock watch: exit $?"; cat "$OUT/stock_watch_cost.txt"
OUT=$OUT PART=judged VTIME=${VTIME:-270} bash benchmarks/gpu/session42_bars.sh
ls "$OUT"
