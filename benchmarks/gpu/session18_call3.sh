#!/usr/bin/env bash
# Issue 41, eighteenth session, one call on nvidia-h200-x2, this tree only: the corpus validation with the final
# library, GEMM (GPU 0, CPUs 0-15; 840 configs, M = GEMM_SHAPES, default 16,256,1024,4096,8192; its first key timed
# with compiles at M = 256) beside the MoE (GPU 1, CPUs 16-31; 1,920 configs, M = MOE_SHAPES, default
# 32,128,512,1024,2048), 3 fresh tunings per shape, each choice judged by the corpus and on its own GPU
# (--judge-here 8); then, on GPU 1, the 48-config bar (bench_fidelity.py's 40-config space, 8 shapes, 3 tunings).
# Leaves gemm.tgz, moe.tgz, fidelity.json, fidelity.txt and summary.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session18_call3.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session18_call3.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
smoke=(); gemm=${GEMM_SHAPES:-16,256,1024,4096,8192}; moe=${MOE_SHAPES:-32,128,512,1024,2048}; first=(--first-key 256)
cpus=(0-15 16-31)
if [ -n "${CPU_SMOKE:-}" ]; then smoke=(--cpu-smoke); gemm=16; moe=8; first=(); cpus=(0 1); fi
validate() {  # family, shapes, GPU, then extra options
  local fam=$1 shapes=$2 gpu=$3 dir=$OUT/$1; shift 3
  mkdir -p "$dir"
  HOME=$(mktemp -d) PYTHONPATH=$PWD CUDA_VISIBLE_DEVICES=$gpu timeout "${VTIME:-330}" taskset -c "${cpus[$gpu]}" \
    python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --family "$fam" --shapes "$shapes" \
    --tunings 3 --judge-here 8 --out "$dir/$fam.json" "${smoke[@]}" "$@" > "$dir/vlog_$fam.txt" 2>&1
  echo "$fam: exit $? | $(python3 benchmarks/corpus_vs_host.py "$dir/$fam.json" 2>&1 | tail -n 2 | tr '\n' ' ')"
  (cd "$OUT" && tar czf "$fam.tgz" "$fam" && rm -rf "$fam")
}
validate gemm_k4096_n4096 "$gemm" 0 "${first[@]}" > "$OUT/gemm.txt" 2>&1 &
(
  validate moe "$moe" 1
  if [ -z "${CPU_SMOKE:-}" ]; then
    HOME=$(mktemp -d) CUDA_VISIBLE_DEVICES=1 timeout "${FTIME:-300}" taskset -c "${cpus[1]}" \
      python3 benchmarks/bench_fidelity.py --out "$OUT/fidelity.json" --phases tune --tunings 3 --variants ours \
      > "$OUT/fidelity.txt" 2>&1
    echo "fidelity: exit $? | $(tail -n 3 "$OUT/fidelity.txt" | tr '\n' ' ')"
  fi
) > "$OUT/moe.txt" 2>&1
wait
cat "$OUT/gemm.txt" "$OUT/moe.txt" | tee "$OUT/summary.txt"
