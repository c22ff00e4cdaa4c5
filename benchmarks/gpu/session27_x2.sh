#!/usr/bin/env bash
# Issue 41, twenty-seventh session, one call on a 2-GPU host (nvidia-h200-x2), this tree:
# 1. the README's multi-GPU commands on both GPUs (acceptance.py --only ag_gemm,gemm_rs,tp_mlp: 2 ranks each);
# 2. side by side: GPU 0 (CPUs 0-15) the one-GPU acceptance (every one-GPU step; launch.sh now starts one rank without
#    torchrun's agent), GPU 1 (CPUs 16-31) MoE M = 32's four G1 tiles timed in three regimes in three processes
#    (judge_regimes.py, 32 rounds, fresh HOME each: which of the two speed levels a layer among heavy layers gets).
# Leaves acc2.tgz, acc1.tgz, m32.tgz, summary.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session27_x2.sh;  CPU plumbing: CPU_SMOKE=1 OUT=DIR bash ... (same steps, CPU forms)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cpu=(); smoke=(); g0=(env CUDA_VISIBLE_DEVICES=0 taskset -c 0-15); g1=(env CUDA_VISIBLE_DEVICES=1 taskset -c 16-31)
tiles=M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s4; shape=32
if [ -n "${CPU_SMOKE:-}" ]; then
  cpu=(--cpu); smoke=(--cpu-smoke); g0=(env); g1=(env); shape=8
  tiles=$(PYTHONPATH=benchmarks python3 -c "import corpus; s, _ = corpus.family('moe', True)
print(','.join(s.text(c) for c in s.kept(8)[:3]))")
fi
{
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  python3 -c 'import torch; print("torch sees", torch.cuda.device_count(), "GPUs")'
  HOME=$(mktemp -d) timeout 240 python3 benchmarks/gpu/acceptance.py "${cpu[@]}" --out "$OUT/acc2" \
    --only ag_gemm,gemm_rs,tp_mlp --budget 220 > "$OUT/acc2_stdout.txt" 2>&1
  echo "acc2: exit $? after $SECONDS s"; grep '^|' "$OUT/acc2/acceptance.md" | cut -c1-400
  ( HOME=$(mktemp -d) timeout 300 "${g0[@]}" python3 benchmarks/gpu/acceptance.py "${cpu[@]}" --out "$OUT/acc1" \
      --budget 280 > "$OUT/acc1_stdout.txt" 2>&1; echo "acc1: exit $? after $SECONDS s" ) &
  mkdir -p "$OUT/m32"
  for i in 1 2 3; do
    HOME=$(mktemp -d) timeout 150 "${g1[@]}" python3 benchmarks/judge_regimes.py --family moe --shape "$shape" \
      --configs "$tiles" --rounds 32 --out "$OUT/m32/run$i.json" "${smoke[@]}" > "$OUT/m32/run$i.txt" 2>&1
    echo "m32 run $i: exit $? after $SECONDS s"; tail -n 12 "$OUT/m32/run$i.txt"
  done
  wait
  grep '^|' "$OUT/acc1/acceptance.md" | cut -c1-400
} 2>&1 | tee "$OUT/summary.txt"
cd "$OUT" && tar czf acc2.tgz acc2 acc2_stdout.txt && tar czf acc1.tgz acc1 acc1_stdout.txt && tar czf m32.tgz m32 \
  && rm -rf acc2 acc1 m32 acc2_stdout.txt acc1_stdout.txt
ls "$OUT"
