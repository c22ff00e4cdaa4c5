#!/usr/bin/env bash
# Issue 41, twenty-fourth session, one call on one GPU (CPUS, default 0-15), this tree, STEPS in turn (default "gemm moe"):
# gemm / moe = the corpus validation with every warm-up probe recorded (validate_search.py --record-probes): the
# 840-config GEMM at GEMM_SHAPES (default 1024,4096,8192), the MoE at MOE_SHAPES (default 512,2048), 3 fresh tunings
# per shape, judged by the corpus and on this GPU (--judge-here 8), read with benchmarks/probe_report.py;
# campaign = the README's MoE campaign alone CAMPAIGNS times (default 1; fill_ab.sh, the library's own fill);
# fidelity = the 48-config bar (bench_fidelity.py, 3 tunings). Leaves gemm.tgz, moe.tgz, fill.{tgz,txt},
# fidelity{.json,.txt,_log.txt}, summary.txt.
# Usage: OUT=DIR [STEPS="gemm moe campaign fidelity"] bash benchmarks/gpu/session24_probes.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session24_probes.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
smoke=(); gemm=${GEMM_SHAPES:-1024,4096,8192}; moe=${MOE_SHAPES:-512,2048}; cpus=${CPUS:-0-15}
if [ -n "${CPU_SMOKE:-}" ]; then smoke=(--cpu-smoke); gemm=16; moe=8; cpus=0-1; fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
validate() {  # step, family, shapes
  local step=$1 fam=$2 dir=$OUT/$1
  mkdir -p "$dir"
  HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${VTIME:-240}" taskset -c "$cpus" \
    python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --family "$fam" --shapes "$3" \
    --tunings 3 --judge-here 8 --record-probes --out "$dir/$fam.json" "${smoke[@]}" > "$dir/vlog_$fam.txt" 2>&1
  echo "$step: exit $? after $SECONDS s | $(python3 benchmarks/corpus_vs_host.py "$dir/$fam.json" 2>&1 | tail -n 2 | tr '\n' ' ')"
  python3 benchmarks/probe_report.py --corpus benchmarks/results/corpus "$dir/$fam.json" 2>&1 | tail -n 30
  (cd "$OUT" && tar czf "$step.tgz" "$step" && rm -rf "$step")
}
for step in ${STEPS:-gemm moe}; do
  case $step in
    gemm) validate gemm gemm_k4096_n4096 "$gemm" ;;
    moe) validate moe moe "$moe" ;;
    campaign) ARMS=$(printf 'f128 %.0s' $(seq "${CAMPAIGNS:-1}")) OUT=$OUT bash "$(dirname "$0")/fill_ab.sh" | tail -n 4 ;;
    fidelity)
      [ -n "${CPU_SMOKE:-}" ] && continue
      HOME=$(mktemp -d) timeout "${FTIME:-260}" taskset -c "$cpus" python3 benchmarks/bench_fidelity.py \
        --out "$OUT/fidelity.json" --phases tune --tunings 3 --variants ours > "$OUT/fidelity_log.txt" 2>&1
      echo "fidelity: exit $? after $SECONDS s | $(tail -n 3 "$OUT/fidelity_log.txt" | tr '\n' ' ')" ;;
  esac
done 2>&1 | tee "$OUT/summary.txt"
