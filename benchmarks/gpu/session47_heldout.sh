#!/usr/bin/env bash
# Issue 41, forty-seventh session, the last device minutes on one H200: two more heavy GEMM families no rule was
# chosen on, T (default 3) fresh tunings each by this tree (ours) beside the race before the sift (ours_nosift),
# sustained oracle (8 rounds) and among heavy layers: N = 5120, K = 13824 at M = 16384 (3.2 ms per call) and
# N = 28672, K = 4096 at M = 8192 (2.8 ms). Leaves fid_held2.tgz.
# Usage: OUT=DIR bash benchmarks/gpu/session47_heldout.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/fid"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader > "$OUT/fid/env.txt" 2>&1
fid() {  # N,K  M  seconds at most
  mkdir -p "$OUT/fid/decisions_$1"
  HOME=$(mktemp -d) TRITON_DIST_AUTOTUNE_LOG_DIR="$OUT/fid/logs_$1" FID_DECISIONS="$OUT/fid/decisions_$1" \
    PYTHONPATH=$PWD PYTHONUNBUFFERED=1 timeout "$3" taskset -c 0-15 \
      python3 benchmarks/bench_fidelity.py --out "$OUT/fid/fid_$1.json" --phases tune --tunings "${T:-3}" \
      --variants ours,ours_nosift --oracle-rounds 8 --nk "$1" --shapes "$2" > "$OUT/fid/fid_$1.txt" 2>&1
  echo "fidelity $1 at M = $2: exit $? after $SECONDS s" | tee -a "$OUT/fid/env.txt"
  grep -v "changed its argument" "$OUT/fid/fid_$1.txt" | tail -n 6
}
fid 5120,13824 16384 100
fid 28672,4096 8192 100
(cd "$OUT" && tar czf fid_held2.tgz fid && rm -rf fid)
