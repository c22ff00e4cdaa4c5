#!/usr/bin/env bash
# Issue 41, thirty-third session, one call on one H200 (nvidia-h200, CPUs 0-15): the README's MoE campaign alone
# (16 keys, every kernel compiled, fresh HOME, one process; campaign_alone in _campaign.sh), alternating ARMS (default
# "new old nocap new old nocap"): `new` this tree (a guess a stage needs while its worker compiles it is raised to the
# needed compiles' priority), `old` ARM_OLD (default arms/s32f = `git archive 7287bea triton_dist_tune examples`, the
# thirty-second session's final library), `nocap` this tree without CAP_SYS_NICE (benchmarks/gpu/no_sys_nice.py:
# such a guess compiles again among the needed compiles). A run starts only while RUN_S (default 100) seconds of the
# call (CALL_S, default 570) are left. Leaves camp33.txt (every run's line, then each run's parts by
# benchmarks/campaign_parts.py) and camp33.tgz (the runs' folders).
# Usage: OUT=DIR bash benchmarks/gpu/session33_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR ARMS="new nocap" bash benchmarks/gpu/session33_call1.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT/camp33"
old=$(cd "${ARM_OLD:-arms/s32f}" && pwd)
pair_defaults
CALL=${CALL_S:-570}
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,temperature.gpu --format=csv 2>&1 | tail -n 1
  k=0
  for arm in ${ARMS:-new old nocap new old nocap}; do
    k=$((k + 1))
    left=$((CALL - SECONDS))
    if [ "$left" -lt "${RUN_S:-100}" ]; then echo "run $k $arm skipped: $left s left"; continue; fi
    root=$PWD; prefix=
    [ "$arm" = old ] && root=$old
    [ "$arm" = nocap ] && prefix="python3 $PWD/benchmarks/gpu/no_sys_nice.py"
    mkdir -p "$OUT/camp33/$k-$arm"
    echo "run $k $arm $(CAMPAIGN_PREFIX=$prefix CAMPAIGN_TIME=$((left - 5 < 110 ? left - 5 : 110)) \
      campaign_alone "$OUT/camp33/$k-$arm" "$root" 0 "${cpus[0]}" $((29860 + k))) after $SECONDS s"
  done
  python3 benchmarks/campaign_parts.py "$OUT"/camp33/*-*
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,temperature.gpu --format=csv 2>&1 | tail -n 1
} 2>&1 | tee "$OUT/camp33.txt"
(cd "$OUT" && tar czf camp33.tgz camp33 && rm -rf camp33)
