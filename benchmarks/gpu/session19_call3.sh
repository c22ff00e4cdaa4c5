#!/usr/bin/env bash
# Issue 41, nineteenth session, one call on nvidia-h200-x2. GPU 0 (CPUs 0-15): benchmarks/regime_check.py at the MoE
# validation's M = 32 and 1024, where the tuner's screening and the judge disagree (M = 32: the tuner reads
# G1-w8-s3 level with G1-w8-s4, the judge and the corpus 6-9% slower), each regime and the tuner's own samples, then
# 3 tunings of those configs alone; pynvml reads GPU 0's clock, so the regimes run there. Beside it, GPU 1 (CPUs
# 16-31): the README's MoE campaign alone, this tree against ARM_OLD (default arms/s17f = `git archive db906cb
# triton_dist_tune examples`; carry it), alternating new, old, new, old.
# Leaves regime_32.{txt,json}, regime_1024.{txt,json}, camp.txt, camp.tgz.
# Usage: OUT=DIR bash benchmarks/gpu/session19_call3.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session19_call3.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
pair_defaults
old=$(cd "${ARM_OLD:-arms/s17f}" && pwd)
smoke=(); shapes=(32 1024)
m32=M16-N128-K128-G1-w8-s3,M16-N128-K128-G1-w8-s4,M16-N128-K128-G1-w4-s4,M16-N128-K128-G1-w4-s3,M16-N64-K128-G16-w4-s5,M16-N128-K64-G1-w8-s5
m1024=M64-N256-K64-G64-w8-s4,M64-N256-K64-G64-w8-s5,M128-N256-K64-G16-w8-s3,M128-N256-K64-G1-w8-s3,M64-N128-K64-G1-w4-s4
configs=("$m32" "$m1024")
if [ -n "${CPU_SMOKE:-}" ]; then
  smoke=(--cpu-smoke --rounds 2); shapes=(8); configs=(M16-N32-K16-G1-w4-s2,M16-N32-K32-G1-w4-s2)
fi
(for k in "${!shapes[@]}"; do
  m=${shapes[$k]}
  HOME=$(mktemp -d) CUDA_VISIBLE_DEVICES=0 timeout 240 taskset -c "${cpus[0]}" python3 benchmarks/regime_check.py \
    --family moe --m "$m" --configs "${configs[$k]}" --tune 3 --out "$OUT/regime_$m.json" "${smoke[@]}" \
    > "$OUT/regime_$m.txt" 2>&1
  echo "regime_check M = $m: exit $?" >> "$OUT/regime_$m.txt"
done) &
for k in 1 2 3 4; do
  if [ $((k % 2)) = 1 ]; then name=new root=$PWD; else name=old root=$old; fi
  mkdir -p "$OUT/camp/$k-$name"
  echo "$k $name $(CAMPAIGN_TIME=110 campaign_alone "$OUT/camp/$k-$name" "$root" 1 "${cpus[1]}" 29871)"
done > "$OUT/camp.txt" 2>&1
wait
(cd "$OUT" && tar czf camp.tgz camp && rm -rf camp)
cat "$OUT/camp.txt"; tail -n 12 "$OUT"/regime_*.txt
