#!/usr/bin/env bash
# Issue 39 item 4 and issue 41, one call on nvidia-h200-x2 (about 9 minutes):
# 1. two more recordings of the group oracle (corpus_collective.py, 3 screening passes), one after another, so that
#    the oracle's own repeatability is measured (each in its own state folder: a fresh recording, not a resume);
# 2. then, one GPU each, side by side: the one-GPU corpus validation of GEMM (GPU 0, then bench_fidelity's tune
#    phase: the 48-config bar) and of the MoE (GPU 1), with the library's final timing protocol.
# Usage: OUT=DIR bash benchmarks/gpu/session_oracle_repeat.sh
set -u
OUT=${OUT:-/tmp/oracle_repeat}; mkdir -p "$OUT"
for run in a b; do
  mkdir -p "$OUT/$run"
  STATE=/tmp/oracle_$run OUT="$OUT/$run" LIMIT=${RLIMIT:-150} TIMEOUT=$(( ${RLIMIT:-150} + 25 )) \
    bash benchmarks/gpu/record_collective.sh 2>&1 | grep -v "screened [0-9]*/" | tail -n 5
done
(CUDA_VISIBLE_DEVICES=0 OUT="$OUT/gemm" VTIME=${VTIME:-200} bash benchmarks/gpu/validate_one.sh gemm_k4096_n4096 \
   > "$OUT/gemm_summary.txt" 2>&1
 mkdir -p "$OUT/fidelity"
 CUDA_VISIBLE_DEVICES=0 HOME=$(mktemp -d) timeout "${FTIME:-150}" python3 benchmarks/bench_fidelity.py \
   --out "$OUT/fidelity" --phases tune --tunings 3 --variants ours > "$OUT/fidelity/log.txt" 2>&1
 echo "fidelity exit $?" >> "$OUT/fidelity/log.txt") &
CUDA_VISIBLE_DEVICES=1 OUT="$OUT/moe" VTIME=${VTIME:-200} bash benchmarks/gpu/validate_one.sh moe > "$OUT/moe_summary.txt" 2>&1
wait
tail -n 4 "$OUT/gemm_summary.txt" "$OUT/moe_summary.txt"; tail -n 12 "$OUT/fidelity/log.txt"
