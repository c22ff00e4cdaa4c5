#!/usr/bin/env bash
# Issue 41, forty-second session, the final call on one H100 (nvidia-h100-x1): this session's final code (one
# contextual function's calls counted under a lock, and the helpers' thread fixes) through the GPU tests
# (tests/test_contextual_cuda.py, tests/test_beats_cuda.py, tests/test_graphs_cuda.py), then the acceptance's quick
# start, fla (contextual_autotune around flash-linear-attention) and the README's MoE campaign with --export-vllm.
# Leaves gpu_tests.txt, acc_table.md, acc.tgz.
# Usage: OUT=DIR bash benchmarks/gpu/session42_final.sh   (carry arms/fla_site: bash benchmarks/gpu/fla_site.sh arms/fla_site)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name,memory.total,clocks.sm,power.draw --format=csv > "$OUT/gpu_tests.txt"
TDT_TEST_FORKSERVER=0 timeout 150 python3 -m pytest -q -p no:cacheprovider -rA tests/test_contextual_cuda.py \
  tests/test_beats_cuda.py tests/test_graphs_cuda.py 2>&1 | tail -n 14 >> "$OUT/gpu_tests.txt"
echo "GPU tests ended after $SECONDS s" >> "$OUT/gpu_tests.txt"
HOME=$(mktemp -d) PYTHONPATH=$PWD/arms/fla_site taskset -c 0-15 timeout $((${CALL_S:-420} - SECONDS)) \
  python3 benchmarks/gpu/acceptance.py --out "$OUT/acc" --budget $((${CALL_S:-420} - SECONDS - 20)) \
  --only quickstart,fla,moe_campaign > "$OUT/acc_log.txt" 2>&1
echo "acceptance: exit $? after $SECONDS s"
cp "$OUT/acc/acceptance.md" "$OUT/acc_table.md" 2>/dev/null
(cd "$OUT" && tar czf acc.tgz acc acc_log.txt && rm -rf acc acc_log.txt)
cat "$OUT/gpu_tests.txt" "$OUT/acc_table.md"
