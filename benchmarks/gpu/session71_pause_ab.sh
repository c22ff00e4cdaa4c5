#!/usr/bin/env bash
# Issue 41, seventy-first session, one GPU: the README's MoE campaign alone (campaign_alone in _campaign.sh: one
# process, a fresh HOME and Triton cache each) with this tree (`new`: deadlines and waits that do not count a
# paused process's seconds, the early look at the beats) and with ARM_OLD (default arms/old: `git archive c6d06b38
# triton_dist_tune examples`, the seventieth session's final library), alternated ROUNDS (default 2) times on the
# same warm GPU, so that the host's speed is shared; each run's line and the parts of every run
# (benchmarks/campaign_parts.py). Usage: OUT=DIR bash benchmarks/gpu/session71_pause_ab.sh   (carry arms/old)
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR ROUNDS=1 bash benchmarks/gpu/session71_pause_ab.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/ab"
source "$(dirname "$0")/_campaign.sh"
pair_defaults
OLD=${ARM_OLD:-$PWD/arms/old}
{
  for k in $(seq "${ROUNDS:-2}"); do
    mkdir -p "$OUT/ab/$k-new" "$OUT/ab/$k-old"
    echo "round $k new: $(campaign_alone "$OUT/ab/$k-new" "$PWD" 0 "${cpus[0]}" $((29970 + k)))"
    echo "round $k old: $(campaign_alone "$OUT/ab/$k-old" "$OLD" 0 "${cpus[0]}" $((29980 + k)))"
  done
  python3 benchmarks/campaign_parts.py "$OUT"/ab/*-*
} 2>&1 | tee "$OUT/ab.txt"
(cd "$OUT" && tar czf ab.tgz ab && rm -rf ab)
