#!/usr/bin/env bash
# Issue 41, twenty-second session, one call on nvidia-h200-x2 (2 GPUs, 32 CPUs), this tree (the output placements
# with the estimator of 1d96154 and their memory bound, none of which ran on a GPU yet):
# GPU 0, CPUs 0-15: the GPU tests of the captures (4), then every one-GPU README command (acceptance.py);
# GPU 1, CPUs 16-31, meanwhile: does this host show the placement effect (address_check.py at MoE M = 32, 16 output
#   offsets), do the placements choose better there (level_choices.py --compare placements at M = 32, 12 tunings,
#   judged by the long judge and over 16 placements), then the README's MoE campaign alternating one placement and
#   four (`one new one new`: what they cost, beside the acceptance);
# then on both GPUs: ag_gemm, gemm_rs, tp_mlp.
# Leaves call1.tgz (gpu_tests.txt, acc.tgz with acc/ and acc2/, address_32.*, placements_32.*, camp22a.{tgz,txt})
# and call1_all.txt (every .txt of it, one after the other).
# Usage: OUT=DIR bash benchmarks/gpu/session22_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session22_call1.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT/camp22a"
pair_defaults
gpu_tests "$OUT/gpu_tests.txt"
acc=(--budget "${ACC_BUDGET:-280}") smoke=() m=32 tunings=12 offsets=16 multi=ag_gemm,gemm_rs,tp_mlp
configs=M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G16-w8-s4
finalists=M16-N64-K64-G1-w4-s3,M16-N64-K64-G16-w4-s3,M16-N128-K128-G1-w4-s3,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w8-s3,M16-N128-K128-G16-w4-s4,M16-N128-K128-G16-w8-s4,M16-N128-K128-G16-w8-s5
if [ -n "${CPU_SMOKE:-}" ]; then
  acc=(--cpu --only quickstart) smoke=(--cpu-smoke --rounds 2) m=8 tunings=2 offsets=2 multi=quickstart
  configs=M16-N32-K16-G1-w4-s2,M16-N32-K32-G1-w4-s2 finalists=$configs
fi
(CUDA_VISIBLE_DEVICES=0 taskset -c "${cpus[0]}" python3 benchmarks/gpu/acceptance.py --out /tmp/acc "${acc[@]}" \
  > "$OUT/acc.txt" 2>&1; echo "acceptance (one GPU): exit $?" >> "$OUT/acc.txt") &
run1() {  # run1 NAME SECONDS SCRIPT ARGS...: a benchmark on GPU 1 and its CPUs (bench_py), its output in OUT/NAME.txt
  local name=$1 limit=$2; shift 2
  CUDA_VISIBLE_DEVICES=1 bench_py "$name" "$OUT/$name.txt" "$limit" "${cpus[1]}" "$@" --family moe --m "$m" \
    --out "$OUT/$name.json" "${smoke[@]}"
}
run1 address_32 100 benchmarks/address_check.py --configs "$configs" --offsets "$offsets"
grep -h "graphs of\|  M\|exit" "$OUT/address_32.txt"
run1 placements_32 160 benchmarks/level_choices.py --configs "$finalists" --tunings "$tunings" --compare placements
grep -h "long judge\|by the\|exit" "$OUT/placements_32.txt"
placement_arms "$OUT/camp22a" 1 "${cpus[1]}" 29890 ${ARMS:-one new one new}
wait
if [ -z "${CPU_SMOKE:-}" ]; then
  python3 benchmarks/gpu/acceptance.py --out /tmp/acc2 --only "$multi" --budget 150 > "$OUT/acc2.txt" 2>&1
  echo "acceptance (two GPUs): exit $?" >> "$OUT/acc2.txt"
fi
(cd /tmp && tar czf "$OUT/acc.tgz" acc $( [ -d acc2 ] && echo acc2 ))
tail -n 3 "$OUT/acc.txt" "$OUT"/acc2.txt 2>/dev/null
# at most 8 files come back: everything in one archive, the call's text beside it
(cd "$OUT" && cat ./*.txt > /tmp/call1_all.txt && tar czf /tmp/call1.tgz . && rm -rf ./* \
  && mv /tmp/call1.tgz /tmp/call1_all.txt .)
