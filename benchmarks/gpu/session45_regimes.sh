#!/usr/bin/env bash
# Issue 41, forty-fifth session, one H200: why the held-out 48-config shapes (N = 4096, K = 14336) chose configs
# 1.11-1.15x the sustained oracle's best at M = 8192 and 16384 but 1.00-1.04 among heavy layers: the candidates
# timed alone (their own power limit), after idle, interleaved as the tuner's settled block, and among heavy layers,
# with SM clock and power (benchmarks/power_regimes.py), and one tuning each with its logs kept. Then a second
# held-out family, N = 14336, K = 4096 (an MLP's up projection), at 3 shapes (bench_fidelity.py, 3 tunings, 16-round
# oracle). Leaves regimes.tgz, fidelity_up.json, fidelity_up.txt, env.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session45_regimes.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/regimes"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader > "$OUT/env.txt" 2>&1
export HOME=$(mktemp -d)
c8=128x256x64-g8-w8-s4,128x256x64-g8-w8-s3,256x128x64-g8-w8-s3,64x256x64-g8-w4-s4,64x256x64-g8-w8-s4,128x128x64-g8-w4-s5,64x256x64-g8-w8-s5
c16=128x256x64-g8-w8-s4,128x256x64-g8-w8-s3,64x256x64-g8-w4-s4,64x256x64-g8-w4-s5,64x256x64-g8-w8-s4,64x256x64-g8-w8-s5
for m in 8192 16384; do
  cfgs=$c8; [ $m = 16384 ] && cfgs=$c16
  PYTHONPATH=$PWD timeout 150 taskset -c 0-15 python3 benchmarks/power_regimes.py --m $m --nk 4096,14336 \
    --configs $cfgs --out "$OUT/regimes/regimes_$m.json" > "$OUT/regimes/regimes_$m.txt" 2>&1
  echo "regimes $m: exit $? after $SECONDS s" >> "$OUT/env.txt"
  grep -v "changed its argument" "$OUT/regimes/regimes_$m.txt" | tail -n 8
done
(cd "$OUT" && tar czf regimes.tgz regimes && rm -rf regimes)
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${FTIME:-330}" taskset -c 0-15 \
  python3 benchmarks/bench_fidelity.py --out "$OUT/fidelity_up.json" --phases tune --tunings 3 --variants ours \
  --oracle-rounds 16 --nk 14336,4096 --shapes "${SHAPES:-512,4096,16384}" > "$OUT/fidelity_up.txt" 2>&1
echo "fidelity N=14336 K=4096: exit $? after $SECONDS s" >> "$OUT/env.txt"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"; grep -v "changed its argument" "$OUT/fidelity_up.txt" | tail -n 8
