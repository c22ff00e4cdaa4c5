#!/usr/bin/env bash
# Issue 41, forty-eighth session, one H200: the 48-config bar's space (bench_fidelity.py's 40-config GEMM,
# N = 8192, K = 4096) at the shapes timed from CUDA graph replays, where an output copied back before every run was
# part of every replayed sample: the defaults (an output written whole is left as written) side by side with
# ours_copyback (the copy before every run, as before), T (default 3) fresh tunings each, judged by the sustained
# oracle (8 rounds) and among heavy layers; seconds per key from the rank logs' breakdown.
# Usage: OUT=DIR bash benchmarks/gpu/session48_bar.sh   (SHAPES: the Ms, default 128,512,2048,8192; FTIME seconds)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/bar/decisions"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader > "$OUT/bar/env.txt" 2>&1
HOME=$(mktemp -d) TRITON_DIST_AUTOTUNE_LOG_DIR="$OUT/bar/logs" FID_DECISIONS="$OUT/bar/decisions" \
  PYTHONPATH=$PWD PYTHONUNBUFFERED=1 timeout "${FTIME:-400}" taskset -c 0-15 \
    python3 benchmarks/bench_fidelity.py --out "$OUT/bar/fid.json" --phases tune --tunings "${T:-3}" \
    --variants "${VARIANTS:-ours,ours_copyback}" --oracle-rounds 8 --shapes "${SHAPES:-128,512,2048,8192}" \
    > "$OUT/bar/fid.txt" 2>&1
echo "fidelity: exit $? after $SECONDS s" | tee -a "$OUT/bar/env.txt"
grep -v "changed its argument" "$OUT/bar/fid.txt" | tail -n 14
grep -h " time: " "$OUT"/bar/logs/*.log | sed 's/.*\[fid_\([a-z_]*[0-9]*_[0-9]\) key.* time: \([0-9.]*\) s.*restore \([0-9.]*\).*/\1 \2 s restore \3/' \
  > "$OUT/bar/seconds.txt"
(cd "$OUT" && tar czf bar.tgz bar && rm -rf bar)
