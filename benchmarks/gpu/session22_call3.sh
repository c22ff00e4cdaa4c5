#!/usr/bin/env bash
# Issue 41, twenty-second session, one call on nvidia-h200 (one GPU, 16 CPUs), this tree (the library that calls 1-2
# ran, which is final but for a test and a doc line):
# 1. the README's MoE campaign three times with the host's CPU speed read every 0.5 s (session21_call1.sh,
#    NAME=camp22b): the 60 s bar on a one-GPU host with the fixed placement estimator;
# 2. the 48-config bar's shape that missed in call 2 (bench_fidelity.py, M = 2048: 1.0215 in one of 3 tunings by an
#    8-round oracle), 3 tunings, the oracle 24 rounds.
# Leaves camp22b.{tgz,txt}, fidelity.{txt,json}.
# Usage: OUT=DIR bash benchmarks/gpu/session22_call3.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR RUNS=1 bash benchmarks/gpu/session22_call3.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
here=$(dirname "$0")
NAME=camp22b RUNS=${RUNS:-3} bash "$here/session21_call1.sh"
[ -n "${CPU_SMOKE:-}" ] && exit 0
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${FTIME:-200}" taskset -c 0-15 python3 benchmarks/bench_fidelity.py \
  --out "$OUT/fidelity.json" --phases tune --tunings 3 --variants ours --shapes 2048 --oracle-rounds 24 \
  > "$OUT/fidelity.txt" 2>&1
echo "fidelity: exit $?" >> "$OUT/fidelity.txt"
grep -v "^triton_dist_tune:\|^\[" "$OUT/fidelity.txt" | tail -n 8
