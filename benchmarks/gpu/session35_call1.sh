#!/usr/bin/env bash
# Issue 41, thirty-fifth session, one call on one H200 (nvidia-h200, CPUs 0-15):
# (1) the whole one-GPU acceptance of this tree (fresh HOME, its own Triton cache; _acceptance_left.sh), its work
#     folder kept for (2);
# (2) the command line over the acceptance's decision cache, this tree (`new`: the versions from the cache folder's
#     record) against ARM_OLD (`old`, default arms/s34 = `git archive a90861f triton_dist_tune examples`: versions
#     read by importing torch), alternating ROUNDS (default 3) times: `list`, `show NAME`, `plot NAME`, each timed;
#     then `new` with the records deleted (read exactly, recorded) and once more (read from the record); and
#     `import torch` alone, twice;
# (3) the README's MoE campaign alone (16 keys, every kernel compiled, fresh HOME, one process; campaign_alone in
#     _campaign.sh), CAMPAIGNS (default 2) times with this tree, while RUN_S (default 100) seconds of the call
#     (CALL_S, default 560) are left: their rank logs carry the grace lines (benchmarks/grace_events.py).
# Leaves acc.tgz, acc_table.md, cli35.txt, camp35.txt (each run's line, its parts and its graces), camp35.tgz,
# summary.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session35_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR ACC_ARGS=--cpu CAMPAIGNS=1 bash benchmarks/gpu/session35_call1.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT/camp35"
CALL_S=${CALL_S:-560}
source "$(dirname "$0")/_acceptance_left.sh"
source "$(dirname "$0")/_campaign.sh"
old=$(cd "${ARM_OLD:-arms/s34}" && pwd)
pair_defaults
work=$(mktemp -d)/work

# one_cli ARM ROOT WHAT ARGS...: the command line of ROOT's library, timed; one line
one_cli() {
  local arm=$1 root=$2 what=$3 t0 t1 rc
  shift 3
  t0=$(date +%s.%N)
  (cd /tmp && HOME=$work/home PYTHONPATH=$root taskset -c "${cpus[0]}" python3 -P -m triton_dist_tune "$@" \
    > "$OUT/cli_out.txt" 2>&1)
  rc=$?; t1=$(date +%s.%N)
  echo "cli $arm $what: exit $rc, $(python3 -c "print(f'{$t1 - $t0:.2f}')") s; $(head -c 120 "$OUT/cli_out.txt" | head -n 1)"
}

{
  gpu_state
  ACC_ARGS="${ACC_ARGS:-} --work $work" MIN=110 acceptance_left $((CALL - SECONDS - 170 > 300 ? 300 : CALL - SECONDS - 170))
  echo "acceptance done after $SECONDS s"
  cache=$work/home/.triton_dist/autotune
  name=$(cd "$cache" 2>/dev/null && ls -t */*.json 2>/dev/null | head -n 1)
  echo "cache $cache: $(ls "$cache" 2>/dev/null | wc -l) function folder(s), records: $(ls -a "$cache" 2>/dev/null | grep -c '^\.versions-'); show/plot $name"
  for arm in new old; do
    root=$PWD; [ "$arm" = old ] && root=$old
    echo "library $arm: $(cd /tmp && PYTHONPATH=$root python3 -P -c 'import triton_dist_tune; print(triton_dist_tune.__file__)')"
  done
  for round in $(seq "${ROUNDS:-3}"); do
    for arm in new old; do
      root=$PWD; [ "$arm" = old ] && root=$old
      one_cli "$arm" "$root" list list
      one_cli "$arm" "$root" show show "$name"
      one_cli "$arm" "$root" plot plot "$name" -o "/tmp/plot35.png"
    done
  done
  rm -f "$cache"/.versions-*.json
  one_cli new-unrecorded "$PWD" list list
  echo "records after it: $(ls -a "$cache" 2>/dev/null | grep -c '^\.versions-')"
  one_cli new-recorded "$PWD" list list
  for i in 1 2; do
    t0=$(date +%s.%N); (cd /tmp && python3 -c "import torch; torch.cuda.nccl.version()"); t1=$(date +%s.%N)
    echo "import torch and read NCCL's version: $(python3 -c "print(f'{$t1 - $t0:.2f}')") s"
  done
} 2>&1 | tee "$OUT/cli35.txt"

{
  campaigns_alone "$OUT/camp35" "${CAMPAIGNS:-2}" 29960
  python3 benchmarks/campaign_parts.py "$OUT"/camp35/*-*
  python3 benchmarks/grace_events.py "$OUT"/camp35/*-*/campaign_rank.log.gz
  gpu_state
} 2>&1 | tee "$OUT/camp35.txt"
(cd "$OUT" && tar czf camp35.tgz camp35 && rm -rf camp35)
cat "$OUT/cli35.txt" "$OUT/camp35.txt" > "$OUT/summary.txt"
rm -rf "$(dirname "$work")" "$OUT/cli_out.txt"
