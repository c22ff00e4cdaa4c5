#!/usr/bin/env bash
# One H200 call of the 2026-11-29 third session (issue 41): the first key with compiles (M = 256, a fresh Triton
# cache each) with compiles in worker processes and in threads only (TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=0),
# side by side, in the order workers, threads, threads, workers; then the acceptance script (the README's GPU
# commands, the MoE campaign among them) under a budget.
# Usage: OUT=DIR bash benchmarks/gpu/session_first_key_ab.sh     (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/session_first_key_ab}; mkdir -p "$OUT/ab"
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
k=0
for procs in "" 0 0 ""; do
  k=$((k + 1)); name="ab$k-${procs:-workers}"; mkdir -p "$OUT/ab/$name"
  TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=$procs timeout "${ABTIME:-60}" python3 benchmarks/bench_breakdown.py \
    --out "$OUT/ab/$name" --shapes "${AB_SHAPES:-256}" --passes 1 "${smoke[@]}" > "$OUT/ab/$name/log.txt" 2>&1
  echo "$name exit $? after $SECONDS s: $(grep '^| p0' "$OUT/ab/$name/breakdown.md" | head -n 1)"
done
(cd "$OUT" && tar czf ab.tgz ab)
rm -rf "$OUT/ab"
cpu=(); [ -n "${CPU_SMOKE:-}" ] && cpu=(--cpu)
timeout "${ACCTIME:-420}" python3 benchmarks/gpu/acceptance.py --out "$OUT/acc" --budget "${ACCBUDGET:-380}" "${cpu[@]}" \
  > "$OUT/acceptance_log.txt" 2>&1
echo "acceptance exit $? after $SECONDS s"; cat "$OUT/acc/acceptance.md" 2>/dev/null | head -n 20
(cd "$OUT" && tar czf acc.tgz acc)
