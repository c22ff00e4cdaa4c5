#!/usr/bin/env bash
# One H200 call of the 2026-11-29 second session: issue 41's breakdown with the budget pass and a cProfile of the
# compiled passes (bench_breakdown.py --profile), then issue 39's single-GPU check that the race's lower quartile
# under heavy noise leaves the one-GPU GEMM choices as they were (validate_one.sh, one family).
# Usage: OUT=DIR bash benchmarks/gpu/session_noise_budget.sh      (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/session_noise_budget}; mkdir -p "$OUT/bd"
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
timeout "${BDTIME:-240}" python3 benchmarks/bench_breakdown.py --out "$OUT/bd" --shapes "${SHAPES:-256,1024,4096}" \
  --passes 2 --budget 0.1 --profile "${smoke[@]}" > "$OUT/bd/log.txt" 2>&1
echo "breakdown exit $? after $SECONDS s"; tail -n 25 "$OUT/bd/log.txt"
(cd "$OUT" && tar czf bd.tgz bd)
VTIME=${VTIME:-250} OUT="$OUT" bash benchmarks/gpu/validate_one.sh ${FAMILIES:-gemm_k4096_n4096}
