#!/usr/bin/env bash
# Issue 41, twenty-fourth session, one call on one GPU (CPUs 0-15): why a warm-up probe reads a near-best config
# slow. benchmarks/probe_check.py on the 840-config GEMM at M = 4096, 8192 and 1024 (each probe variant read against
# the config's sustained device time), then the GEMM validation at M = 4096 with every probe and the host's gaps
# between warm-ups recorded (validate_search.py --record-probes). Leaves check_M.json, check.txt, gemm.tgz,
# summary.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session24_probe_check.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session24_probe_check.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
smoke=(); shapes="4096 8192 1024"; vshape=4096; cpus=0-15
if [ -n "${CPU_SMOKE:-}" ]; then smoke=(--cpu-smoke); shapes=16; vshape=16; cpus=0-1; fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
for m in $shapes; do
  echo "== M=$m"
  HOME=$(mktemp -d) PYTHONPATH=$PWD timeout 120 taskset -c "$cpus" python3 benchmarks/probe_check.py \
    --m "$m" --out "$OUT/check_$m.json" "${smoke[@]}" 2>&1 | grep -v "changed its argument"
done 2>&1 | tee "$OUT/check.txt"
mkdir -p "$OUT/gemm"
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout 150 taskset -c "$cpus" python3 benchmarks/validate_search.py \
  --corpus benchmarks/results/corpus --family gemm_k4096_n4096 --shapes "$vshape" --tunings 3 --record-probes \
  --out "$OUT/gemm/gemm.json" "${smoke[@]}" > "$OUT/gemm/vlog.txt" 2>&1
echo "validation: exit $?" | tee -a "$OUT/check.txt"
python3 benchmarks/probe_report.py --corpus benchmarks/results/corpus "$OUT/gemm/gemm.json" 2>&1 | tee -a "$OUT/check.txt"
(cd "$OUT" && tar czf gemm.tgz gemm && rm -rf gemm)
cp "$OUT/check.txt" "$OUT/summary.txt"
