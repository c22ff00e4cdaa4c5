#!/usr/bin/env bash
# Issue 41, ninth session, one GPU: the first key's compile timeline with the library of this tree and of an older
# tree (ARM_OLD: a folder holding its triton_dist_tune, benchmarks/*.py and examples, with this tree's
# diagnose_compile.py copied in; default none), alternating (new, old, new); then the corpus
# validation of the GEMM (with a first key) and of the MoE on the same GPU, one after the other.
# Usage: OUT=DIR [ARM_OLD=arms/s9old] bash benchmarks/gpu/first_key_and_validate.sh  (leaves first_key_and_validate.tgz alone in OUT)
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 SHAPE=16 VTIME=60 bash benchmarks/gpu/first_key_and_validate.sh
source "$(dirname "$0")/_setup.sh" /tmp/first_key_and_validate
arms=(new); [ -n "${ARM_OLD:-}" ] && arms=(new old new)
k=0
for arm in "${arms[@]}"; do
  k=$((k + 1)); root=.; [ "$arm" = old ] && root=$ARM_OLD
  for family in ${FAMILIES:-gemm_k4096_n4096}; do
    timeout 200 python3 "$root/benchmarks/diagnose_compile.py" --family "$family" --shape "${SHAPE:-256}" \
      "${smoke[@]}" --out "$OUT/fk/$k-$arm-$family.json" > "$OUT/fk_$k-$arm-$family.log" 2>&1
    echo "first key $k $arm $family: exit $? $(python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['summary']; \
print(round(s['seconds'], 2), 's;', s['breakdown'], '; workers first task', s['worker_first_task_s'].get('median'), \
json.load(open(sys.argv[1]))['library'])" \
      "$OUT/fk/$k-$arm-$family.json" 2>&1 | tail -n 1)"
  done
done
for family in ${VFAMILIES:-gemm_k4096_n4096 moe}; do  # VFAMILIES=none: no validation
  [ "$family" = none ] && continue
  first=(); [ "$family" = gemm_k4096_n4096 ] && first=(--first-key "${SHAPE:-256}")
  timeout "${VTIME:-210}" python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --tunings 3 \
    --family "$family" --out "$OUT/validate/$family.json" "${smoke[@]}" "${first[@]}" > "$OUT/vlog_$family.txt" 2>&1
  echo "validate $family: exit $? after $SECONDS s"
  grep -h "tuning [0-9]:\|first key" "$OUT/vlog_$family.txt" | sed 's/search:.*probes:[^;]*;//' | cut -c1-330
done
(cd "$OUT" && tar czf first_key_and_validate.tgz fk validate ./*.log ./*.txt 2>/dev/null)
find "$OUT" -mindepth 1 -maxdepth 1 ! -name first_key_and_validate.tgz -exec rm -rf {} +  # the archive alone comes back
