#!/usr/bin/env bash
# Issue 41, owed by the thirteenth session: can a graph's samples be shorter without costing choices? Two arms side by
# side on nvidia-h200-x2, each on one GPU and 16 CPUs: ARM_A and ARM_B, each "SCREEN_SETTLE/GRAPH_SPAN/SETTLED_SPAN"
# in ms (the library's: 5/2/10). Each arm: the MoE validation on held-out shapes (MOE_SHAPES, default 32,128,256,
# 1024,2048), judged on its own GPU as well as by the corpus (--judge-here 8), then the README's MoE campaign alone
# with the same constants (set in the example's process before it imports the tuner's timing).
# Usage: OUT=DIR ARM_A=5/2/10 ARM_B=5/2/5 bash benchmarks/gpu/sample_length_ab.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 CPUS_A=0 CPUS_B=1 OUT=DIR bash benchmarks/gpu/sample_length_ab.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
smoke=(); moe=${MOE_SHAPES:-32,128,256,1024,2048}; tiny=()
if [ -n "${CPU_SMOKE:-}" ]; then smoke=(--cpu-smoke); moe=8; tiny=(--tiny); fi
arm() {  # name, "settle/span/settled", GPU, CPUs
  local name=$1 gpu=$3 cpus=$4 dir=$OUT/$1
  local settle span settled
  IFS=/ read -r settle span settled <<< "$2"
  mkdir -p "$dir"
  HOME=$(mktemp -d) PYTHONPATH=$PWD CUDA_VISIBLE_DEVICES=$gpu timeout 330 taskset -c "$cpus" \
    python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --family moe --shapes "$moe" \
    --tunings 3 --judge-here 8 --screen-settle-ms "$settle" --graph-screen-span-ms "$span" \
    --settled-span-ms "$settled" --out "$dir/moe.json" "${smoke[@]}" > "$dir/vlog_moe.txt" 2>&1
  echo "$name ($2) moe: exit $? | $(python3 benchmarks/corpus_vs_host.py "$dir/moe.json" 2>&1 | tail -n 2 | tr '\n' ' ')"
  echo "$name ($2) $(campaign_alone "$dir" "$PWD" "$gpu" "$cpus" $((29810 + gpu)) \
    "from triton_dist_tune.measure import timing
timing.SCREEN_SETTLE_MS, timing.GRAPH_SCREEN_SPAN_MS, timing.SETTLED_SPAN_MS = $settle, $span, $settled")"
  (cd "$OUT" && tar czf "$name.tgz" "$name" && rm -rf "$name")
}
arm a "${ARM_A:-5/2/10}" 0 "${CPUS_A:-0-15}" > "$OUT/a.txt" 2>&1 &
arm b "${ARM_B:-5/2/5}" 1 "${CPUS_B:-16-31}" > "$OUT/b.txt" 2>&1 &
wait
cat "$OUT/a.txt" "$OUT/b.txt"
