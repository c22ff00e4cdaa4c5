#!/usr/bin/env bash
# The README's MoE campaign alone (16 keys, every kernel compiled, a fresh HOME, one process: campaign_alone in
# _campaign.sh) CAMPAIGNS (default 3) times on one GPU, while RUN_S (default 100) seconds of the call (CALL_S,
# default 575) are left; each run's line, its parts and its choices by the H200 corpus in camp.txt, the runs in
# camp.tgz. The fiftieth session's call 5: CALL_S=280 CAMPAIGNS=3 RUN_S=80.
# Usage: OUT=DIR bash benchmarks/gpu/campaigns_only.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR CAMPAIGNS=1 bash benchmarks/gpu/campaigns_only.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT/camp"
source "$(dirname "$0")/_acceptance_left.sh"
source "$(dirname "$0")/_campaign.sh"
pair_defaults
{
  gpu_state
  campaigns_alone "$OUT/camp" "${CAMPAIGNS:-3}" 29960
  python3 benchmarks/campaign_parts.py "$OUT"/camp/*-*
  python3 benchmarks/campaign_vs_corpus.py "$OUT"/camp/*-*/campaign.txt
  gpu_state
} 2>&1 | tee "$OUT/camp.txt"
(cd "$OUT" && tar czf camp.tgz camp && rm -rf camp)
