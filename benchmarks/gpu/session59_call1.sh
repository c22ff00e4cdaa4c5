#!/usr/bin/env bash
# Issue 41, fifty-ninth session, one GPU: the new GPU test of configs that cannot be captured on the tree before its
# fix (arms/s59_old: `git archive` of the commit before it, with this session's test copied in), then
# session56_call1.sh with every GPU test (the new capture and clock tests too), the one-GPU acceptance and the first
# keys. Usage: OUT=DIR REPEATS=1 bash benchmarks/gpu/session59_call1.sh   (carry arms/fla_site and arms/s59_old)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
if [ -d arms/s59_old ]; then
  cp tests/test_capture_cuda.py arms/s59_old/tests/
  (cd arms/s59_old && TDT_TEST_FORKSERVER=0 timeout 150 python3 -m pytest -q -p no:cacheprovider -rA \
    tests/test_capture_cuda.py 2>&1 | tail -n 30) > "$OUT/capture_before_fix.txt"
  echo "the capture test before the fix ended after $SECONDS s: $(tail -n 1 "$OUT/capture_before_fix.txt")"
fi
GPU_TESTS="tests/test_capture_cuda.py tests/test_graphs_cuda.py tests/test_contextual_cuda.py tests/test_beats_cuda.py tests/test_replicas_cuda.py" \
  GPU_TESTS_S=240 bash benchmarks/gpu/session56_call1.sh
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz ./*.txt ./*.log first_keys_* acc 2>/dev/null); ls -la "$OUT"
