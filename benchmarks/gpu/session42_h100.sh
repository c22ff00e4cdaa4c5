#!/usr/bin/env bash
# Issue 41, forty-second session, the first call on an H100 (nvidia-h100-x1, 16 CPUs; the acceptance had run on
# H200s only): the GPU tests of this tree (tests/test_contextual_cuda.py, tests/test_beats_cuda.py,
# tests/test_graphs_cuda.py; into OUT/gpu_tests.txt), then session36_call1.sh: the whole one-GPU acceptance, the
# command line over its cache, and the README's MoE campaign alone CAMPAIGNS (default 2) times.
# Usage: OUT=DIR bash benchmarks/gpu/session42_h100.sh   (carry arms/fla_site: bash benchmarks/gpu/fla_site.sh arms/fla_site)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name,memory.total,clocks.sm,power.draw,power.limit --format=csv > "$OUT/gpu_tests.txt"
TDT_TEST_FORKSERVER=0 timeout 240 python3 -m pytest -q -p no:cacheprovider -rA tests/test_contextual_cuda.py \
  tests/test_beats_cuda.py tests/test_graphs_cuda.py 2>&1 | tail -n 14 >> "$OUT/gpu_tests.txt"
echo "GPU tests ended after $SECONDS s" >> "$OUT/gpu_tests.txt"
CALL_S=$((${CALL_S:-590} - SECONDS)) bash benchmarks/gpu/session36_call1.sh
