#!/usr/bin/env bash
# Issue 41, ninth session, one GPU: the GEMM validation at SHAPES (default 8192), TUNINGS fresh tunings per arm, with
# device-bound calls' screening settling at 2 ms (the default) and at 5 ms (as before), alternating (2, 5, 2, 5).
# Usage: OUT=DIR bash benchmarks/gpu/long_call_settle_ab.sh   (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 SHAPES=16)
source "$(dirname "$0")/_setup.sh" /tmp/long_call_settle_ab
k=0
for ms in 2 5 2 5; do
  k=$((k + 1))
  timeout 120 python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --tunings "${TUNINGS:-3}" \
    --family gemm_k4096_n4096 --shapes "${SHAPES:-8192}" --long-call-settle-ms "$ms" "${smoke[@]}" \
    --out "$OUT/settle$k-$ms.json" > "$OUT/settle$k-$ms.log" 2>&1
  echo "arm $k ($ms ms): exit $?"
  grep -h "tuning [0-9]:" "$OUT/settle$k-$ms.log" | sed 's/search:.*probes:[^;]*;//' | sed 's/.*M=/M=/' | cut -c1-140
done
(cd "$OUT" && tar czf long_call_settle_ab.tgz ./*.json ./*.log)
