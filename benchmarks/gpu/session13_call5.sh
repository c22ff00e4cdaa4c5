#!/usr/bin/env bash
# Issue 41, thirteenth session, one call on nvidia-h200-x2: a graph's samples sized by its replay's device time
# (this tree) against sized by the eager probe (ARM_OLD, default arms/s12 = `git archive 5cbb1bd triton_dist_tune
# examples`; carry it), side by side, each arm on one GPU and 16 CPUs; each arm: the MoE validation (shapes 16, 64,
# 256, 512, 1024; 256 and 1024 held out of the diagnosis that found the bias), judged on its own GPU as well as by
# the corpus (--judge-here 8), then the README's MoE campaign alone; with FAMILIES=gemm, the GEMM validation
# (256, 1024, 4096) alone. The benchmarks are this tree's in both arms; only the library differs (PYTHONPATH).
# CAMPAIGNS=N runs the campaign N times in a row (DIR/c1 ... DIR/cN).
# Usage: OUT=DIR [FAMILIES=moe|gemm] [MOE_SHAPES=16,64,256,512,1024] [GEMM_SHAPES=256,1024,4096] [CAMPAIGNS=1]
#   bash benchmarks/gpu/session13_call5.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 CPUS_A=0 CPUS_B=1 OUT=DIR bash benchmarks/gpu/session13_call5.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
old=$(cd "${ARM_OLD:-arms/s12}" && pwd)
smoke=(); moe=${MOE_SHAPES:-16,64,256,512,1024}; gemm=${GEMM_SHAPES:-256,1024,4096}; gfam=gemm_k4096_n4096; tiny=()
if [ -n "${CPU_SMOKE:-}" ]; then smoke=(--cpu-smoke); moe=8; gemm=16; tiny=(--tiny); fi
arm() {  # name, library root, GPU, CPUs
  local name=$1 root=$2 gpu=$3 cpus=$4 dir=$OUT/$1
  mkdir -p "$dir"
  local fams=(moe:$moe); [ "${FAMILIES:-moe}" = gemm ] && fams=("$gfam:$gemm")
  for fam in "${fams[@]}"; do
    HOME=$(mktemp -d) PYTHONPATH=$root CUDA_VISIBLE_DEVICES=$gpu timeout 330 taskset -c "$cpus" \
      python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --family "${fam%%:*}" \
      --shapes "${fam#*:}" --tunings 3 --judge-here 8 --out "$dir/${fam%%:*}.json" "${smoke[@]}" \
      > "$dir/vlog_${fam%%:*}.txt" 2>&1
    echo "$name ${fam%%:*}: exit $? | $(python3 benchmarks/corpus_vs_host.py "$dir/${fam%%:*}.json" 2>&1 | tail -n 2 | tr '\n' ' ')"
  done
  if [ "${FAMILIES:-moe}" = moe ]; then
    for k in $(seq 1 "${CAMPAIGNS:-1}"); do  # campaign k in DIR/c<k> (DIR itself when one)
      local cdir=$dir; [ "${CAMPAIGNS:-1}" -gt 1 ] && cdir=$dir/c$k && mkdir -p "$cdir"
      echo "$name $(CAMPAIGN_TIME=110 campaign_alone "$cdir" "$root" "$gpu" "$cpus" $((29800 + gpu)))"
    done
  fi
  (cd "$OUT" && tar czf "$name.tgz" "$name" && rm -rf "$name")
}
arm new "$PWD" 0 "${CPUS_A:-0-15}" > "$OUT/new.txt" 2>&1 &
arm old "$old" 1 "${CPUS_B:-16-31}" > "$OUT/old.txt" 2>&1 &
wait
cat "$OUT/new.txt" "$OUT/old.txt"
