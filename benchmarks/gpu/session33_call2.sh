#!/usr/bin/env bash
# Issue 41, thirty-third session, one call on one H200 (nvidia-h200, CPUs 0-15):
# (1) the whole one-GPU acceptance of this tree (fresh HOME, its own Triton cache; _acceptance_left.sh);
# (2) the README's MoE campaign alone on a busy host: BURNERS (default 8) processes spinning at the rank's priority
#     on CPUs 0-15 beside it (say, a data loader's workers), ARMS (default "new old") in turn: `new` this tree, `old`
#     ARM_OLD (default arms/s32f = `git archive 7287bea triton_dist_tune examples`). There a guess at the lowest
#     priority gets little CPU, and a stage that needs it waited for it (the old library) or raises it (this tree).
# ACC=0: the campaigns alone. Leaves acc.tgz, acc_table.md, busy33.txt (each run's line, then its parts: benchmarks/campaign_parts.py),
# busy33.tgz, summary.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session33_call2.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR EXTRA=--cpu BURNERS=1 bash benchmarks/gpu/session33_call2.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT/busy33"
source "$(dirname "$0")/_acceptance_left.sh"
source "$(dirname "$0")/_campaign.sh"
old=$(cd "${ARM_OLD:-arms/s32f}" && pwd)
pair_defaults
{
  gpu_state
  if [ "${ACC:-1}" = 1 ]; then
    ACC_ARGS="${EXTRA:-}" MIN=110 acceptance_left $((CALL - SECONDS - 230 > 290 ? 290 : CALL - SECONDS - 230))
    echo "acceptance done after $SECONDS s"
  fi
  burners=()
  for _ in $(seq "${BURNERS:-8}"); do
    taskset -c "${cpus[0]}" python3 -c "while True: pass" & burners+=($!)
  done
  k=0
  for arm in ${ARMS:-new old}; do
    k=$((k + 1)); left=$((CALL - SECONDS))
    if [ "$left" -lt 90 ]; then echo "busy run $k $arm skipped: $left s left"; continue; fi
    root=$PWD; [ "$arm" = old ] && root=$old
    mkdir -p "$OUT/busy33/$k-$arm"
    echo "busy run $k $arm $(CAMPAIGN_TIME=$((left - 5 < 150 ? left - 5 : 150)) campaign_alone "$OUT/busy33/$k-$arm" \
      "$root" 0 "${cpus[0]}" $((29880 + k))) after $SECONDS s"
  done
  kill "${burners[@]}" 2>/dev/null; wait "${burners[@]}" 2>/dev/null
  python3 benchmarks/campaign_parts.py "$OUT"/busy33/*-* | tee "$OUT/busy33.txt"
  gpu_state
} 2>&1 | tee "$OUT/summary.txt"
(cd "$OUT" && tar czf busy33.tgz busy33 && rm -rf busy33)
