#!/usr/bin/env bash
# Issue 41, fourteenth session, one call on nvidia-h200-x2: the 48-config bar (bench_fidelity.py's 40-config GEMM
# space, 8 shapes, 3 fresh tunings each, judged by the oracles the same run records on its GPU) with this tree
# (GPU 0, CPUs 0-15) beside ARM_OLD (GPU 1, CPUs 16-31; default arms/s13, which must hold the old library and a copy
# of this tree's benchmarks/*.py: bench_fidelity.py imports the library of the folder it lies in).
# Usage: OUT=DIR bash benchmarks/gpu/session14_call4.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
old=$(cd "${ARM_OLD:-arms/s13}" && pwd)
arm() {  # name, root, GPU, CPUs
  HOME=$(mktemp -d) CUDA_VISIBLE_DEVICES=$3 timeout "${FTIME:-420}" taskset -c "$4" \
    python3 "$2/benchmarks/bench_fidelity.py" --out "$OUT/fidelity_$1.json" --phases tune --tunings 3 \
    --variants ours > "$OUT/fidelity_$1.txt" 2>&1
  echo "$1: exit $? | $(tail -n 2 "$OUT/fidelity_$1.txt" | tr '\n' ' ')"
}
arm new "$PWD" 0 0-15 &
arm old "$old" 1 16-31 &
wait
