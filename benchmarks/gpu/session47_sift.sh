#!/usr/bin/env bash
# Issue 41, forty-seventh session, one H200: the sift under its final rules (a sifted race judges its noise on the
# settled leaders' drift-free ratios; under noise a settled leader's time is the least of its settled samples)
# side by side with the variant of 2 sift rounds and 7 settled rounds (bench_fidelity.py's ours_sift27: it beat the
# default in every case of the CPU noise replay, benchmarks/sift_noise.py) and the race before the sift
# (ours_nosift), in one process per GEMM family, fresh tunings, sustained oracle (8 rounds) and among heavy layers:
# N = 4096, K = 14336 (down projection: training), N = 14336, K = 4096 (up projection: held out), N = 8192,
# K = 4096 at M = 16384 (the 48-config bar's shape, held out: seconds per key). Leaves fid.tgz (rank logs, decisions).
# Usage: OUT=DIR bash benchmarks/gpu/session47_sift.sh   (T1, T2, T3: tunings per variant and shape)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/fid"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader > "$OUT/fid/env.txt" 2>&1
fid() {  # N,K  the Ms  tunings  seconds at most
  mkdir -p "$OUT/fid/decisions_$1"
  HOME=$(mktemp -d) TRITON_DIST_AUTOTUNE_LOG_DIR="$OUT/fid/logs_$1" FID_DECISIONS="$OUT/fid/decisions_$1" \
    PYTHONPATH=$PWD timeout "$4" taskset -c 0-15 \
      python3 benchmarks/bench_fidelity.py --out "$OUT/fid/fid_$1.json" --phases tune --tunings "$3" \
    --variants ours,ours_sift27,ours_nosift --oracle-rounds 8 --nk "$1" --shapes "$2" > "$OUT/fid/fid_$1.txt" 2>&1
  echo "fidelity $1 at M = $2: exit $? after $SECONDS s" | tee -a "$OUT/fid/env.txt"
  grep -v "changed its argument" "$OUT/fid/fid_$1.txt" | tail -n 10
}
fid 4096,14336 8192,16384 "${T1:-6}" 240
fid 14336,4096 8192,16384 "${T2:-4}" 190
fid 8192,4096 16384 "${T3:-3}" 110
(cd "$OUT" && tar czf fid.tgz fid && rm -rf fid)
