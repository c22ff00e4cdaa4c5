#!/usr/bin/env bash
# Issue 41, thirty-fifth session, one call on one H200 (nvidia-h200, CPUs 0-15): the README's MoE campaign alone
# (16 keys, every kernel compiled, fresh HOME, one process; campaign_alone in _campaign.sh), alternating ARMS (default
# "b a b a b a b"): `a` this tree, `b` ARM_B (default arms/g10 = this tree's library with STRAGGLER_GRACE_S = 0.10
# instead of 0.25). A run starts only while RUN_S (default 90) seconds of the call (CALL_S, default 560) are left.
# Leaves ab35.txt (every run's line, then each run's parts: benchmarks/campaign_parts.py; its graces:
# benchmarks/grace_events.py; its choices by the H200 corpus: benchmarks/campaign_vs_corpus.py) and ab35.tgz (the
# runs' folders).
# Usage: OUT=DIR bash benchmarks/gpu/session35_ab.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR ARMS="a b" bash benchmarks/gpu/session35_ab.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT/ab35"
arm_b=$(cd "${ARM_B:-arms/g10}" && pwd)
pair_defaults
CALL=${CALL_S:-560}
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,temperature.gpu --format=csv 2>&1 | tail -n 1
  k=0
  for arm in ${ARMS:-b a b a b a b}; do
    k=$((k + 1)); left=$((CALL - SECONDS))
    if [ "$left" -lt "${RUN_S:-90}" ]; then echo "run $k $arm skipped: $left s left"; continue; fi
    root=$PWD; [ "$arm" = b ] && root=$arm_b
    mkdir -p "$OUT/ab35/$k-$arm"
    echo "run $k $arm $(CAMPAIGN_TIME=$((left - 5 < 100 ? left - 5 : 100)) campaign_alone "$OUT/ab35/$k-$arm" \
      "$root" 0 "${cpus[0]}" $((29900 + k))) after $SECONDS s"
  done
  python3 benchmarks/campaign_parts.py "$OUT"/ab35/*-*
  python3 benchmarks/grace_events.py --graces 0.1,0.25 "$OUT"/ab35/*-*/campaign_rank.log.gz
  python3 benchmarks/campaign_vs_corpus.py "$OUT"/ab35/*-*/campaign.txt
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,temperature.gpu --format=csv 2>&1 | tail -n 1
} 2>&1 | tee "$OUT/ab35.txt"
(cd "$OUT" && tar czf ab35.tgz ab35 && rm -rf ab35)
