#!/usr/bin/env bash
# Issue 41, fifty-ninth session, one GPU, the final library: what a run from the tuner's NaN fill does on CUDA
# (benchmarks/gpu/nan_fill_cuda.py), then session56_call1.sh with every GPU test, the one-GPU acceptance and the first
# keys (REPEATS). Usage: OUT=DIR REPEATS=0 bash benchmarks/gpu/session59_call2.sh   (carry arms/fla_site)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
HOME=$(mktemp -d) timeout 300 python3 benchmarks/gpu/nan_fill_cuda.py > "$OUT/nan_fill_cuda.txt" 2>&1
echo "nan fill on CUDA: exit $? after $SECONDS s"; cat "$OUT/nan_fill_cuda.txt"
GPU_TESTS="tests/test_capture_cuda.py tests/test_graphs_cuda.py tests/test_contextual_cuda.py tests/test_beats_cuda.py tests/test_replicas_cuda.py" \
  GPU_TESTS_S=240 bash benchmarks/gpu/session56_call1.sh
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz ./*.txt ./*.log acc 2>/dev/null); ls "$OUT"
