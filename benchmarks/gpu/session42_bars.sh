#!/usr/bin/env bash
# Issue 41, forty-second session, on one H100 (nvidia-h100-x1, CPUs 0-15): the bars of issue 41 on a machine kind
# none of the defaults was chosen on (held-out). PART=gemm: the GEMM corpus validation (840 configs,
# M = GEMM_SHAPES, default 16,256,1024,4096,8192, 3 fresh tunings each, its first key timed with compiles at
# M = 256), then the 48-config bar (bench_fidelity.py's 40-config space, 8 shapes, 3 tunings). PART=moe: the MoE
# validation (1,920 configs, M = MOE_SHAPES, default 32,128,512,1024,2048, 3 fresh tunings each). Each choice judged
# on this GPU (--judge-here 8); the corpus is the H200's, so its figures are not this machine's.
# PART=judged: the GEMM then the MoE validation alone, each choice judged here against the CORPUS_GPU's (default
# "NVIDIA H200") 8 best configs (--corpus-gpu: the corpus holds no H100 landscape, so PART=gemm and moe judged none).
# Leaves FAMILY.tgz (and fidelity.json, fidelity.txt).
# Usage: OUT=DIR PART=gemm|moe|judged bash benchmarks/gpu/session42_bars.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR PART=gemm bash benchmarks/gpu/session42_bars.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"; PART=${PART:?set PART to gemm or moe}
export PYTHONUNBUFFERED=1
smoke=(); gemm=${GEMM_SHAPES:-16,256,1024,4096,8192}; moe=${MOE_SHAPES:-32,128,512,1024,2048}; first=(--first-key 256)
cpus=0-15
corpus_gpu=()
[ "$PART" = judged ] && corpus_gpu=(--corpus-gpu "${CORPUS_GPU:-NVIDIA H200}")
if [ -n "${CPU_SMOKE:-}" ]; then smoke=(--cpu-smoke); gemm=16; moe=8; first=(); cpus=0-1; fi
validate() {  # family, shapes, then extra options
  local fam=$1 shapes=$2 dir=$OUT/$1; shift 2
  mkdir -p "$dir"
  local t0=$SECONDS
  HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${VTIME:-330}" taskset -c "$cpus" \
    python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --family "$fam" --shapes "$shapes" \
    --tunings 3 --judge-here 8 --out "$dir/$fam.json" "${smoke[@]}" "${corpus_gpu[@]}" "$@" > "$dir/vlog_$fam.txt" 2>&1
  echo "$fam: exit $? after $((SECONDS - t0)) s | $(python3 benchmarks/corpus_vs_host.py "$dir/$fam.json" 2>&1 | tail -n 2 | tr '\n' ' ')"
  (cd "$OUT" && tar czf "$fam.tgz" "$fam" && rm -rf "$fam")
}
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null
if [ "$PART" = gemm ]; then
  validate gemm_k4096_n4096 "$gemm" "${first[@]}"
  if [ -z "${CPU_SMOKE:-}" ]; then
    HOME=$(mktemp -d) timeout "${FTIME:-250}" taskset -c "$cpus" \
      python3 benchmarks/bench_fidelity.py --out "$OUT/fidelity.json" --phases tune --tunings 3 --variants ours \
      > "$OUT/fidelity.txt" 2>&1
    echo "fidelity: exit $? | $(tail -n 4 "$OUT/fidelity.txt" | tr '\n' ' ')"
  fi
elif [ "$PART" = judged ]; then
  VTIME=${VTIME:-280} validate gemm_k4096_n4096 "$gemm" "${first[@]}"
  VTIME=${VTIME:-280} validate moe "$moe"
else
  validate moe "$moe"
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null
