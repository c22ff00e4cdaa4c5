#!/usr/bin/env bash
# Issue 41, twentieth session, one call on nvidia-h200 (one GPU, 16 CPUs), this tree only: the README's MoE
# campaign alone twice (its rank logs now say where the race's two-level rule changed a choice: "by their medians
# config N would have won"), then benchmarks/regime_check.py on the GEMM at M = 256, over the 8 configs the
# validation's judge judged there in call 2 (the judge read the tuner's choice, s4, 1.022 times s3; the corpus, the
# other way round): do s3 and s4 swap between the tuner's short windows and the judge's long ones?
# Leaves camp20c.tgz, camp20c.txt, regime_gemm_256.{txt,json}.
# Usage: OUT=DIR bash benchmarks/gpu/session20_call6.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session20_call6.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT/camp20c"
pair_defaults
cpus=0-15 m=256 smoke=()
configs=128x64x64-g8-w4-s4,128x64x64-g8-w4-s5,64x128x128-g8-w4-s3,64x128x128-g8-w4-s4,64x128x64-g8-w4-s4,64x128x64-g8-w4-s5,64x128x64-g8-w8-s4,64x128x64-g8-w8-s5
if [ -n "${CPU_SMOKE:-}" ]; then
  cpus=0 m=16 smoke=(--cpu-smoke --rounds 2) configs=16x32x16-g1-w4-s2,32x32x16-g1-w4-s2
fi
for k in 1 2; do
  mkdir -p "$OUT/camp20c/$k-new"
  echo "$k new $(CAMPAIGN_TIME=100 campaign_alone "$OUT/camp20c/$k-new" "$PWD" 0 "$cpus" 29870)" | tee -a "$OUT/camp20c.txt"
done
(cd "$OUT" && tar czf camp20c.tgz camp20c && rm -rf camp20c)
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${RTIME:-120}" taskset -c "$cpus" python3 benchmarks/regime_check.py \
  --family gemm_k4096_n4096 --m "$m" --configs "$configs" --tune 0 --out "$OUT/regime_gemm_$m.json" "${smoke[@]}" \
  > "$OUT/regime_gemm_$m.txt" 2>&1
echo "regime_check: exit $?" >> "$OUT/regime_gemm_$m.txt"
cat "$OUT/regime_gemm_$m.txt"
