#!/usr/bin/env bash
# Issue 41, one GPU (fourth session of 2026-11-29): the MoE campaign of the README with --export-vllm, its rank logs
# kept (each key's time breakdown: where the campaign's seconds go), then the one-GPU corpus validation of the GEMM
# and MoE families with the library's defaults (3 fresh tunings per shape, each with its breakdown).
# Usage: OUT=DIR bash benchmarks/gpu/session_validate_campaign.sh
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/session_validate_campaign}; mkdir -p "$OUT/acc"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
timeout "${ATIME:-200}" python3 benchmarks/gpu/acceptance.py --out "$OUT/acc" --only moe_campaign --budget 190 \
  > "$OUT/acc/log.txt" 2>&1
echo "campaign exit $? after $SECONDS s"; grep moe_campaign "$OUT/acc/acceptance.md" | cut -c1-400
grep -h "tuned in\|breakdown\| s: compile" "$OUT"/acc/logs/moe_campaign.ranks/*.log 2>/dev/null | tail -n 20 | cut -c1-300
(cd "$OUT" && tar czf acc.tgz acc && rm -rf acc)
VTIME=${VTIME:-170} OUT="$OUT" bash benchmarks/gpu/validate_one.sh gemm_k4096_n4096 moe
