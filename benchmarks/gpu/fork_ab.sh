#!/usr/bin/env bash
# Issue 41, tenth session, one GPU: the first key's compile timeline with the compile workers forked from the rank
# (the default) and spawned as new interpreters (TRITON_DIST_AUTOTUNE_COMPILE_START=spawn, the ninth session's way),
# alternating (fork, spawn, fork, spawn) for each family of FAMILIES; then, unless CAMPAIGN=0, the README's MoE
# campaign with --export-vllm (acceptance.py --only moe_campaign; its rank logs hold each key's breakdown).
# Usage: OUT=DIR bash benchmarks/gpu/fork_ab.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 SHAPE=16 CAMPAIGN=0 bash benchmarks/gpu/fork_ab.sh
source "$(dirname "$0")/_setup.sh" /tmp/fork_ab
k=0
for how in ${ARMS:-fork spawn fork spawn}; do
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
  timeout 300 python3 benchmarks/gpu/acceptance.py --out "$OUT/acc" --only moe_campaign > "$OUT/acc.log" 2>&1
  echo "campaign: exit $?"; tail -n 3 "$OUT/acc/acceptance.md"
fi
(cd "$OUT" && tar czf fork_ab.tgz fk ./*.log acc 2>/dev/null)
