#!/usr/bin/env bash
# Owed by the twenty-second session (issue 41), one call on nvidia-h200 (one GPU): at MoE M = 32, which level do the
# bistable tiles read after the kernels a model runs before its MoE layer? benchmarks/block_position.py with
# --predecessors gemm,norm,copy for the subjects w8-s3, w4-s3 and w4-s4 (the judges' best), each against the other
# two and G16-w8-s4; 5 ms samples. Leaves pred_<subject>.{txt,json}. About 2 minutes.
# Usage: OUT=DIR [CPUS=0-15] bash benchmarks/gpu/predecessors_m32.sh (the GPU: CUDA_VISIBLE_DEVICES)
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/predecessors_m32.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
home=$(mktemp -d) cpus=${CPUS:-0-15} smoke=() m=32
a=M16-N128-K128-G1-w8-s3 b=M16-N128-K128-G1-w4-s3 c=M16-N128-K128-G1-w4-s4 d=M16-N128-K128-G16-w8-s4
if [ -n "${CPU_SMOKE:-}" ]; then
  m=8 smoke=(--cpu-smoke --samples 6 --head 2 --repeats 1) cpus=0
  a=M16-N32-K16-G1-w4-s2 b=M16-N32-K32-G1-w4-s2 c=M16-N32-K16-G1-w4-s2 d=M16-N32-K32-G1-w4-s2
fi
for configs in "$a,$b,$c,$d" "$b,$a,$c,$d" "$c,$a,$b,$d"; do
  n=${configs%%,*}
  BENCH_HOME=$home bench_py "block_position $n" "$OUT/pred_$n.txt" "${BTIME:-120}" "$cpus" \
    benchmarks/block_position.py --family moe --m "$m" --configs "$configs" --sample-ms 5 \
    --predecessors gemm,norm,copy --out "$OUT/pred_$n.json" "${smoke[@]}"
  grep -h "repeat\|exit" "$OUT/pred_$n.txt" | sed 's/us; .*/us/' | sed 's/^.*\] //'
done
