#!/usr/bin/env bash
# Issue 41, fifty-eighth session, one GPU: the new GPU test (one-rank replicas time alike) on the tree before its fix
# (arms/s58_old: `git archive 5efa9ef`, the library before the replicas' change, with this session's test copied in),
# then session56_call1.sh with every GPU test (the new one too), the one-GPU acceptance and the first keys.
# Usage: OUT=DIR REPEATS=1 bash benchmarks/gpu/session58_call1.sh   (carry arms/fla_site and arms/s58_old)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
if [ -d arms/s58_old ]; then
  cp tests/test_replicas_cuda.py arms/s58_old/tests/ && cp tests/scenarios/replicas_cuda_cases.py arms/s58_old/tests/scenarios/
  (cd arms/s58_old && TDT_TEST_FORKSERVER=0 timeout 150 python3 -m pytest -q -p no:cacheprovider -rA \
    tests/test_replicas_cuda.py 2>&1 | tail -n 30) > "$OUT/replicas_before_fix.txt"
  echo "the replicas test before the fix ended after $SECONDS s: $(tail -n 1 "$OUT/replicas_before_fix.txt")"
fi
GPU_TESTS="tests/test_contextual_cuda.py tests/test_beats_cuda.py tests/test_graphs_cuda.py tests/test_replicas_cuda.py" \
  GPU_TESTS_S=200 bash benchmarks/gpu/session56_call1.sh
