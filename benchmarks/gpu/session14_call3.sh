#!/usr/bin/env bash
# Issue 41, fourteenth session, one call on nvidia-h200-x2: (GPU 0, CPUs 0-15) every one-GPU README command with this
# tree (acceptance.py), beside (GPU 1, CPUs 16-31) the README's MoE campaign alone, this tree against ARM_OLD
# (default arms/s13 = `git archive c15b7f1 triton_dist_tune examples`; carry it), alternating new, old, new, old;
# then the multi-GPU commands (ag_gemm, gemm_rs, tp_mlp) on both GPUs. Leaves acc.tgz, acc2.tgz, camp.tgz, camp.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session14_call3.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session14_call3.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
old=$(cd "${ARM_OLD:-arms/s13}" && pwd)
tiny=(); acc=(--budget "${ACC_BUDGET:-330}"); cpus_a=0-15; cpus_b=16-31; multi=ag_gemm,gemm_rs,tp_mlp
if [ -n "${CPU_SMOKE:-}" ]; then tiny=(--tiny); acc=(--cpu --only quickstart); cpus_a=0; cpus_b=1; multi=quickstart; fi
(CUDA_VISIBLE_DEVICES=0 taskset -c "$cpus_a" python3 benchmarks/gpu/acceptance.py --out /tmp/acc "${acc[@]}" \
  > "$OUT/acc.txt" 2>&1; echo "acceptance (one GPU): exit $?" >> "$OUT/acc.txt") &
for k in 1 2 3 4; do
  if [ $((k % 2)) = 1 ]; then name=new root=$PWD; else name=old root=$old; fi
  mkdir -p "$OUT/camp/$k-$name"
  echo "$k $name $(CAMPAIGN_TIME=110 campaign_alone "$OUT/camp/$k-$name" "$root" 1 "$cpus_b" 29821)"
done > "$OUT/camp.txt" 2>&1
wait
if [ -z "${CPU_SMOKE:-}" ]; then
  python3 benchmarks/gpu/acceptance.py --out /tmp/acc2 --only "$multi" --budget 150 > "$OUT/acc2.txt" 2>&1
  echo "acceptance (two GPUs): exit $?" >> "$OUT/acc2.txt"
fi
(cd /tmp && tar czf "$OUT/acc.tgz" acc $( [ -d acc2 ] && echo acc2 ))
(cd "$OUT" && tar czf camp.tgz camp && rm -rf camp)
cat "$OUT/camp.txt"; tail -n 3 "$OUT/acc.txt" "$OUT"/acc2.txt 2>/dev/null
