#!/usr/bin/env bash
# Issue 41, twenty-fourth session, one call on one GPU (pinned to CPUs 0-15): the screening rounds' regime margin
# (race.REGIME_MARGIN) side by side in one process, 0.05 (this tree) and 0.01 (the margin before it), each fresh
# tuning of a shape once per margin in an order that alternates by tuning; every choice judged on this GPU by
# --judge-here 8 (graphs of 20 launches, 10 shuffled rounds, settled windows: the sustained regime) and by the corpus.
# STEPS (default "gemm fidelity"): gemm = the 840-config GEMM at GEMM_SHAPES (default 1024,4096,8192); moe = the
# MoE at MOE_SHAPES (default 32,1024,2048); fidelity = the 48-config bar (bench_fidelity.py, this tree only).
# Leaves STEP.tgz and STEP.txt per step, and summary.txt.
# Usage: OUT=DIR [STEPS="gemm fidelity"] bash benchmarks/gpu/session24_regime_margin.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR STEPS="gemm moe" bash benchmarks/gpu/session24_regime_margin.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
smoke=(); gemm=${GEMM_SHAPES:-1024,4096,8192}; moe=${MOE_SHAPES:-32,1024,2048}; cpus=0-15
if [ -n "${CPU_SMOKE:-}" ]; then smoke=(--cpu-smoke); gemm=16; moe=8; cpus=0-1; fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
validate() {  # step name, family, shapes
  local step=$1 fam=$2 shapes=$3 dir=$OUT/$1
  mkdir -p "$dir"
  HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${VTIME:-280}" taskset -c "$cpus" \
    python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --family "$fam" --shapes "$shapes" \
    --tunings "${TUNINGS:-3}" --judge-here 8 --regime-margins 0.05,0.01 --out "$dir/$fam.json" "${smoke[@]}" \
    > "$dir/vlog_$fam.txt" 2>&1
  echo "$step: exit $? after $SECONDS s"
  python3 benchmarks/margin_report.py "$dir/$fam.json" 2>&1
  (cd "$OUT" && tar czf "$step.tgz" "$step" && rm -rf "$step")
}
for step in ${STEPS:-gemm fidelity}; do
  case $step in
    gemm) validate gemm gemm_k4096_n4096 "$gemm" ;;
    moe) validate moe moe "$moe" ;;
    fidelity)
      if [ -z "${CPU_SMOKE:-}" ]; then
        HOME=$(mktemp -d) timeout "${FTIME:-200}" taskset -c "$cpus" python3 benchmarks/bench_fidelity.py \
          --out "$OUT/fidelity.json" --phases tune --tunings 3 --variants ours > "$OUT/fidelity_log.txt" 2>&1
        echo "fidelity: exit $? after $SECONDS s | $(tail -n 3 "$OUT/fidelity_log.txt" | tr '\n' ' ')"
      fi ;;
  esac > "$OUT/$step.txt" 2>&1
  cat "$OUT/$step.txt"
done | tee "$OUT/summary.txt"
