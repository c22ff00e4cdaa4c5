#!/usr/bin/env bash
# Issue 41, tenth session, one GPU: the first key's compile timeline with the compile workers forked from the rank
# (the default) and spawned as new interpreters (TRITON_DIST_AUTOTUNE_COMPILE_START=spawn, the ninth session's way),
# alternating (fork, spawn, fork, spawn) for each family of FAMILIES; then, unless CAMPAIGN=0, the README's MoE
# campaign with --export-vllm once per arm of CAMPAIGN_ARMS (default: fork) (acceptance.py --only moe_campaign; its
# rank logs hold each key's breakdown). Only fork_ab.tgz is left in OUT.
# Usage: OUT=DIR bash benchmarks/gpu/fork_ab.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 SHAPE=16 CAMPAIGN=0 bash benchmarks/gpu/fork_ab.sh
source "$(dirname "$0")/_setup.sh" /tmp/fork_ab
k=0
for how in ${ARMS:-fork spawn fork spawn}; do  # ARMS=none: no first keys
  [ "$how" = none ] && continue
  for family in ${FAMILIES:-gemm_k4096_n4096 moe}; do
    k=$((k + 1))
    TRITON_DIST_AUTOTUNE_COMPILE_START=$how timeout 200 python3 benchmarks/diagnose_compile.py --family "$family" \
      --shape "${SHAPE:-256}" "${smoke[@]}" --out "$OUT/fk/$k-$how-$family.json" > "$OUT/fk_$k-$how-$family.log" 2>&1
    echo "first key $k $how $family: exit $? $(python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['summary']; \
print(round(s['seconds'], 2), 's;', s['breakdown'], '; workers', s['workers_started'], 'first task', \
s['worker_first_task_s'].get('median'), 'stages', [round(x['end'], 1) for x in s['stages']][:4])" \
      "$OUT/fk/$k-$how-$family.json" 2>&1 | tail -n 1)"
  done
done
if [ "${CAMPAIGN:-1}" = 1 ]; then
  for how in ${CAMPAIGN_ARMS:-fork}; do
    timeout 300 python3 benchmarks/gpu/acceptance.py --out "$OUT/acc-$how" --only moe_campaign \
      --env "TRITON_DIST_AUTOTUNE_COMPILE_START=$how" > "$OUT/acc-$how.log" 2>&1
    echo "campaign $how: exit $? $(grep moe_campaign "$OUT/acc-$how/acceptance.md" | cut -d'|' -f5,8)"
  done
fi
(cd "$OUT" && tar czf fork_ab.tgz fk ./*.log acc-* 2>/dev/null)
find "$OUT" -mindepth 1 -maxdepth 1 ! -name fork_ab.tgz -exec rm -rf {} +  # what comes back: the archive alone
