#!/usr/bin/env bash
# Issue 41, fifteenth session, one call on nvidia-h200-x2: guesses compiled on speculative threads in workers of the
# lowest priority (this tree, B) against the fourteenth session's final library (ARM_OLD, default arms/s14f =
# `git archive 24baba7 triton_dist_tune examples`, A) and against B with the next key's guess filled with 128 more
# configs (ARM_FILL, default arms/s15c, C); carry both. GPU 0 (CPUs 0-15): every one-GPU README command with this tree
# (acceptance.py), then the README's MoE campaign alone C, A, B; GPU 1 (CPUs 16-31): the campaign alone B, A, C, B,
# A, C; then the multi-GPU commands (ag_gemm, gemm_rs, tp_mlp) on both GPUs. Leaves acc.tgz, camp.tgz, camp.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session15_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session15_call1.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
declare -A root=([B]=$PWD [A]=$(cd "${ARM_OLD:-arms/s14f}" && pwd) [C]=$(cd "${ARM_FILL:-arms/s15c}" && pwd))
tiny=(); acc=(--budget "${ACC_BUDGET:-300}"); cpus=(0-15 16-31); multi=ag_gemm,gemm_rs,tp_mlp
if [ -n "${CPU_SMOKE:-}" ]; then tiny=(--tiny); acc=(--cpu --only quickstart); cpus=(0 1); multi=quickstart; fi
campaigns() {  # GPU, then the arms in order
  local gpu=$1 k=0 arm; shift
  for arm in "$@"; do
    k=$((k + 1)); mkdir -p "$OUT/camp/g$gpu-$k-$arm"
    echo "gpu $gpu run $k arm $arm $(CAMPAIGN_TIME=110 campaign_alone "$OUT/camp/g$gpu-$k-$arm" "${root[$arm]}" "$gpu" \
      "${cpus[$gpu]}" $((29840 + gpu)))"
  done
}
(CUDA_VISIBLE_DEVICES=0 taskset -c "${cpus[0]}" python3 benchmarks/gpu/acceptance.py --out /tmp/acc "${acc[@]}" \
  > "$OUT/acc.txt" 2>&1; echo "acceptance (one GPU): exit $?" >> "$OUT/acc.txt"
 campaigns 0 C A B > "$OUT/camp0.txt" 2>&1) &
campaigns 1 B A C B A C > "$OUT/camp1.txt" 2>&1
wait
if [ -z "${CPU_SMOKE:-}" ]; then
  python3 benchmarks/gpu/acceptance.py --out /tmp/acc2 --only "$multi" --budget 120 > "$OUT/acc2.txt" 2>&1
  echo "acceptance (two GPUs): exit $?" >> "$OUT/acc2.txt"
fi
(cd /tmp && tar czf "$OUT/acc.tgz" acc $( [ -d acc2 ] && echo acc2 ))
cat "$OUT/camp1.txt" "$OUT/camp0.txt" > "$OUT/camp.txt"
(cd "$OUT" && tar czf camp.tgz camp && rm -rf camp)
cat "$OUT/camp.txt"; tail -n 3 "$OUT/acc.txt" "$OUT"/acc2.txt 2>/dev/null
