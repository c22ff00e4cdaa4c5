#!/usr/bin/env bash
# Issue 41, twenty-fifth session, one GPU (CPUs 0-15), this tree: is the 48-config bar's miss (M = 4096: the tuner
# chose 128x256x64-g8-w8-s3 in 2 of 3 tunings, the sustained oracle's best -s4 read 1.023 apart, its halves 2.0%
# apart) a bias of the tuner's regime or noise? bench_fidelity at SHAPES (default 2048,4096) with TUNINGS fresh
# tunings (default 8) against oracles of ROUNDS rounds (default 16), and every tuning's decision record kept
# (decisions.tgz: read each with `triton-dist-tune show`, TRITON_DIST_AUTOTUNE_CACHE_DIR=<dir>).
# Usage: OUT=DIR bash benchmarks/gpu/session25_fidelity_bias.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
tmp=$(mktemp -d)
HOME=$(mktemp -d) TMPDIR=$tmp timeout "${FTIME:-500}" taskset -c 0-15 python3 benchmarks/bench_fidelity.py \
  --out "$OUT/fidelity.json" --phases tune --tunings "${TUNINGS:-8}" --oracle-rounds "${ROUNDS:-16}" \
  --shapes "${SHAPES:-2048,4096}" --variants ours > "$OUT/fidelity_log.txt" 2>&1
echo "fidelity: exit $? after $SECONDS s" | tee "$OUT/summary.txt"
grep -v "changed its argument" "$OUT/fidelity_log.txt" | tail -n 12 | tee -a "$OUT/summary.txt"
(cd "$tmp" && tar czf "$OUT/decisions.tgz" tdt_fid_decisions_* 2>/dev/null)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv >> "$OUT/gpu.txt" 2>&1
