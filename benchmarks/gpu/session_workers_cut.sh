#!/usr/bin/env bash
# One H200 call of the 2026-11-29 third session (issue 41): the breakdown per key at five shapes with compiles in
# worker processes and far-behind configs screened by their probe (bench_breakdown.py, passes p0 = first key with
# compiles, p1 = compiled), beside the same first keys with compiles in threads (COMPILE_PROCESSES=0), then the
# one-GPU corpus validation (choices within 1.02, seconds per key) of the GEMM and MoE families.
# Usage: OUT=DIR bash benchmarks/gpu/session_workers_cut.sh     (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/session_workers_cut}; mkdir -p "$OUT/bd" "$OUT/bd_threads" "$OUT/tmp_bd" "$OUT/tmp_threads"
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
nproc
TMPDIR="$OUT/tmp_bd" timeout "${BDTIME:-150}" python3 benchmarks/bench_breakdown.py --out "$OUT/bd" \
  --shapes "${SHAPES:-16,256,1024,4096,8192}" --passes 2 "${smoke[@]}" > "$OUT/bd/log.txt" 2>&1
echo "breakdown exit $? after $SECONDS s"; tail -n 16 "$OUT/bd/log.txt"
TMPDIR="$OUT/tmp_threads" TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=0 timeout "${ABTIME:-80}" \
  python3 benchmarks/bench_breakdown.py --out "$OUT/bd_threads" --shapes "${AB_SHAPES:-256,4096}" --passes 1 \
  "${smoke[@]}" > "$OUT/bd_threads/log.txt" 2>&1
echo "threads-only breakdown exit $? after $SECONDS s"; tail -n 6 "$OUT/bd_threads/log.txt"
grep -h "compile workers" "$OUT"/tmp_bd/*/logs/*.log 2>/dev/null | tail -n 3
(cd "$OUT" && tar czf bd.tgz bd bd_threads tmp_bd/*/logs tmp_threads/*/logs 2>/dev/null)
rm -rf "$OUT/tmp_bd" "$OUT/tmp_threads"
VTIME=${VTIME:-170} OUT="$OUT" bash benchmarks/gpu/validate_one.sh ${FAMILIES:-gemm_k4096_n4096 moe}
