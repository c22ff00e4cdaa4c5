#!/usr/bin/env bash
# Thirty-second session, one call on one H200 (nvidia-h200, CPUs 0-15), after ref_prog's check stopped calling
# torch.testing.assert_close (5a4819f):
# (1) what the check costs a process, old and new, each in fresh interpreters, alternating (bf16 4096x4096 on the GPU);
# (2) the AG-GEMM and GEMM-RS examples on one rank (their tunings check every config against ref_prog on the GPU),
#     each with a fresh HOME;
# (3) the whole one-GPU acceptance of the library (fresh HOME).
# CPU=1: a dry run on CPU ranks (the plumbing). Leaves ref_check_cost.json, ag_gemm.txt, gemm_rs.txt, acc.tgz,
# acc_table.md, summary.txt.   Usage: OUT=DIR [CALL_S=540] [CPU=1] bash benchmarks/gpu/session32_call1.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
source "$(dirname "$0")/_acceptance_left.sh"
if [ -n "${CPU:-}" ]; then device=cpu; cpu=(--cpu); ACC_ARGS="--cpu"; else device=cuda; cpu=(); ACC_ARGS=""; fi
{
  gpu_state
  timeout 150 python3 benchmarks/ref_check_cost.py --out "$OUT" --device "$device" --repeats 3 --shape 4096x4096
  echo "ref_check_cost: exit $? after $SECONDS s"
  for example in ag_gemm gemm_rs; do
    began=$SECONDS
    HOME=$(mktemp -d) timeout 150 taskset -c 0-15 bash launch.sh "${cpu[@]}" --nproc 1 "examples/$example.py" \
      > "$OUT/$example.txt" 2>&1
    echo "$example (one rank): exit $? in $((SECONDS - began)) s"; tail -n 2 "$OUT/$example.txt" | cut -c1-300
  done
  ACC_ARGS="$ACC_ARGS" MIN=110 acceptance_left $((CALL - SECONDS - 20 > 330 ? 330 : CALL - SECONDS - 20))
  gpu_state
} 2>&1 | tee "$OUT/summary.txt"
