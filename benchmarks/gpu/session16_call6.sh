#!/usr/bin/env bash
# Issue 41, sixteenth session, one call on nvidia-h200 (one GPU, 16 CPUs): the GPU tests of the captures and
# benchmarks/gpu/failed_capture_rng.py (torch.randn after a failed capture), then the README's MoE campaign alone with
# this tree twice (fresh HOME each). Leaves call6.txt and camp6.tgz.
# Usage: OUT=DIR bash benchmarks/gpu/session16_call6.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session16_call6.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT/camp6"
export PYTHONUNBUFFERED=1
tiny=(); cpus=0-15
if [ -n "${CPU_SMOKE:-}" ]; then tiny=(--tiny); cpus=0-1; else
  (PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_graphs_cuda.py 2>&1 | tail -n 3
   PYTHONPATH=$PWD timeout 120 python3 benchmarks/gpu/failed_capture_rng.py 2>&1) > "$OUT/call6.txt"
fi
for k in 1 2; do
  mkdir -p "$OUT/camp6/$k"
  echo "$k $(CAMPAIGN_TIME=110 campaign_alone "$OUT/camp6/$k" "$PWD" 0 "$cpus" 29860)" >> "$OUT/call6.txt"
done
(cd "$OUT" && tar czf camp6.tgz camp6 && rm -rf camp6)
cat "$OUT/call6.txt"
