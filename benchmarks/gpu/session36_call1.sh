#!/usr/bin/env bash
# Issue 41, thirty-sixth session, one call on one H200 (nvidia-h200, CPUs 0-15):
# (1) the whole one-GPU acceptance of this tree (fresh HOME, its own Triton cache; _acceptance_left.sh), its work
#     folder kept for (2): the first acceptance since the versions record was renamed (.versions-<fp>, no suffix) and
#     its errors handled;
# (2) the command line over the acceptance's decision cache: `list` and `show NAME` with the record the acceptance
#     left, then `list` with the records deleted (read exactly, recorded again), once more (read from the record);
# (3) the README's MoE campaign alone (16 keys, every kernel compiled, fresh HOME, one process; campaign_alone in
#     _campaign.sh), CAMPAIGNS (default 2) times, while RUN_S (default 100) seconds of the call (CALL_S, default
#     560) are left.
# Leaves acc.tgz, acc_table.md, cli36.txt, camp36.txt (each run's line, its parts, its graces, its choices by the
# H200 corpus), camp36.tgz, summary.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session36_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR ACC_ARGS="--cpu --only quickstart" CAMPAIGNS=1 bash benchmarks/gpu/session36_call1.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT/camp36"
CALL_S=${CALL_S:-560}
source "$(dirname "$0")/_acceptance_left.sh"
source "$(dirname "$0")/_campaign.sh"
pair_defaults
work=$(mktemp -d)/work
root=$PWD

# one_cli WHAT ARGS...: this tree's command line, timed; one line
one_cli() {
  local what=$1 t0 t1 rc
  shift
  t0=$(date +%s.%N)
  (cd /tmp && HOME=$work/home PYTHONPATH=$root taskset -c "${cpus[0]}" python3 -P -m triton_dist_tune "$@" \
    > "$OUT/cli_out.txt" 2>&1)
  rc=$?; t1=$(date +%s.%N)
  echo "cli $what: exit $rc, $(python3 -c "print(f'{$t1 - $t0:.2f}')") s; $(grep -c STALE "$OUT/cli_out.txt") STALE; $(head -c 160 "$OUT/cli_out.txt" | head -n 1)"
}

{
  gpu_state
  ACC_ARGS="${ACC_ARGS:-} --work $work" MIN=110 acceptance_left $((CALL - SECONDS - 170 > 300 ? 300 : CALL - SECONDS - 170))
  echo "acceptance done after $SECONDS s"
  cache=$work/home/.triton_dist/autotune
  name=$(cd "$cache" 2>/dev/null && ls -t */*.json 2>/dev/null | head -n 1)
  echo "cache: $(ls "$cache" 2>/dev/null | wc -l) function folder(s), $(cd "$cache" 2>/dev/null && ls */*.json 2>/dev/null | wc -l) decision(s), records: $(ls -a "$cache" 2>/dev/null | grep -c '^\.versions-'); show $name"
  one_cli list list
  one_cli show show "$name"
  rm -f "$cache"/.versions-*
  echo "records deleted: $(ls -a "$cache" 2>/dev/null | grep -c '^\.versions-') left"
  one_cli list-unrecorded list
  echo "records after it: $(ls -a "$cache" 2>/dev/null | grep -c '^\.versions-')"
  one_cli list-recorded list
  one_cli show-recorded show "$name"
} 2>&1 | tee "$OUT/cli36.txt"

{
  campaigns_alone "$OUT/camp36" "${CAMPAIGNS:-2}" 29960
  python3 benchmarks/campaign_parts.py "$OUT"/camp36/*-*
  python3 benchmarks/grace_events.py "$OUT"/camp36/*-*/campaign_rank.log.gz
  python3 benchmarks/campaign_vs_corpus.py "$OUT"/camp36/*-*/campaign.txt
  gpu_state
} 2>&1 | tee "$OUT/camp36.txt"
(cd "$OUT" && tar czf camp36.tgz camp36 && rm -rf camp36)
cat "$OUT/cli36.txt" "$OUT/camp36.txt" > "$OUT/summary.txt"
rm -rf "$(dirname "$work")" "$OUT/cli_out.txt"
