#!/usr/bin/env bash
# Issue 41, forty-first session, one call on one H200: the GPU tests (tests/test_contextual_cuda.py: a rank killed
# while compiling ahead in contextual tuning; tests/test_graphs_cuda.py: the captures) with this tree, then the new
# contextual test with the library of ARM_PRE (default arms/pre = `git archive 42675f8 triton_dist_tune`, the
# fortieth session's final library, whose contextual board did not beat): it should fail there.
# Leaves OUT/gpu_tests.txt and OUT/gpu_tests_pre.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session41_call1.sh   (carry arms/pre)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export TDT_TEST_FORKSERVER=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name,clocks.sm,power.draw --format=csv | tail -n 1 > "$OUT/gpu_tests.txt"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_contextual_cuda.py tests/test_graphs_cuda.py \
  >> "$OUT/gpu_tests.txt" 2>&1
echo "exit $? after $SECONDS s" >> "$OUT/gpu_tests.txt"
pre=$(cd "${ARM_PRE:-arms/pre}" && pwd); old=$(mktemp -d)
cp -r tests pyproject.toml "$old/" && cp -r "$pre/triton_dist_tune" "$old/"
(cd "$old" && timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_contextual_cuda.py) \
  > "$OUT/gpu_tests_pre.txt" 2>&1
echo "exit $? after $SECONDS s" >> "$OUT/gpu_tests_pre.txt"
tail -n 5 "$OUT/gpu_tests.txt" "$OUT/gpu_tests_pre.txt"
