#!/usr/bin/env bash
# Issue 41, thirteenth session, one GPU: why the MoE validation's tunings rank configs otherwise than the same host's
# judge (call 1: at M = 512 the tunings read M64-N128-K64-G32-w4-s3 9% slower than their choice
# M128-N128-K64-G16-w8-s5, the judge 4% faster). benchmarks/regime_check.py times the judged configs against each
# other under each timing regime (calls per graph, output allocated or not, settling and window), then tunes them
# alone; at M = 512 and M = 64. Usage: OUT=DIR bash benchmarks/gpu/session13_call2.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session13_call2.sh
source "$(dirname "$0")/_setup.sh" /tmp/session13_call2
if [ -n "${CPU_SMOKE:-}" ]; then
  jobs=("8 M16-N32-K16-G1-w4-s2,M16-N32-K16-G16-w4-s2")
else
  jobs=("512 M64-N128-K64-G32-w4-s3,M128-N128-K64-G16-w8-s5,M128-N128-K64-G1-w8-s5,M64-N128-K64-G16-w4-s3,M128-N128-K64-G16-w8-s4,M64-N128-K64-G16-w8-s3,M64-N128-K64-G32-w8-s4"
        "64 M32-N128-K128-G1-w8-s3,M16-N64-K64-G16-w4-s3,M32-N64-K128-G16-w4-s3,M32-N128-K128-G16-w8-s3"
        "16 M16-N128-K128-G1-w4-s4,M16-N64-K64-G1-w4-s5,M16-N64-K64-G1-w4-s3,M16-N128-K64-G1-w8-s5")
[ -n "${JOBS:-}" ] && IFS=';' read -r -a jobs <<< "$JOBS"
fi
for job in "${jobs[@]}"; do
  set -- $job
  timeout 250 python3 benchmarks/regime_check.py --family moe --m "$1" --configs "$2" --out "$OUT/regime_$1.json" \
    --rounds "${ROUNDS:-10}" --variants "${VARIANTS:-probe,device_5_5,device_2_2,device_2_5,device_5_2,device_1_1}" --tune "${TUNE:-1}" "${smoke[@]}" 2>&1 | grep -v "^triton_dist_tune: \[" | tee "$OUT/regime_$1.txt"
done
