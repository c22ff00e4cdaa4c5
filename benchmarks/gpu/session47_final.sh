#!/usr/bin/env bash
# Issue 41, forty-seventh session, the last call on one H200, at the final code:
# (1) a held-out GEMM family no rule was chosen on (N = 5120, K = 13824, M = 8192: 1.6 ms per call, heavy), T
#     (default 3) fresh tunings by this tree (ours: the sift, its leaders ranked drift-free under noise too) beside
#     the race before the sift (ours_nosift), judged by the sustained oracle (8 rounds) and among heavy layers;
#     leaves fid_held.tgz (rank logs, decision files);
# (2) session42_h100.sh: the GPU tests, the one-GPU acceptance, the command line, the README's MoE campaign alone,
#     in the seconds left of CALL_S (default 575).
# Usage: OUT=DIR bash benchmarks/gpu/session47_final.sh   (carry arms/fla_site; VARIANTS, NK, SHAPES: the held-out
# tunings' variants, family and Ms; ACCEPTANCE=0: the tunings alone; the rank logs' seconds per key go to
# seconds.txt. The forty-eighth session's call 2: VARIANTS=ours,ours_keep3 SHAPES=16384; its call 3 (as
# session48_bar.sh): NK=8192,4096 SHAPES=128,512,2048,8192 VARIANTS=ours,ours_copyback FTIME=400 ACCEPTANCE=0)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/fid/decisions"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader > "$OUT/fid/env.txt" 2>&1
HOME=$(mktemp -d) TRITON_DIST_AUTOTUNE_LOG_DIR="$OUT/fid/logs" FID_DECISIONS="$OUT/fid/decisions" \
  PYTHONPATH=$PWD PYTHONUNBUFFERED=1 timeout "${FTIME:-150}" taskset -c 0-15 \
    python3 benchmarks/bench_fidelity.py --out "$OUT/fid/fid.json" --phases tune --tunings "${T:-3}" \
    --variants "${VARIANTS:-ours,ours_nosift}" --oracle-rounds 8 --nk "${NK:-5120,13824}" --shapes "${SHAPES:-8192}" \
    > "$OUT/fid/fid.txt" 2>&1
echo "fidelity: exit $? after $SECONDS s" | tee -a "$OUT/fid/env.txt"
grep -v "changed its argument" "$OUT/fid/fid.txt" | tail -n 14
grep -h " time: " "$OUT"/fid/logs/*.log | sed 's/.*\[fid_\([a-z_]*[0-9]*_[0-9]\) key.* time: \([0-9.]*\) s.*restore \([0-9.]*\).*/\1 \2 s restore \3/' \
  > "$OUT/fid/seconds.txt"
(cd "$OUT" && tar czf fid_held.tgz fid && rm -rf fid)
[ "${ACCEPTANCE:-1}" = 0 ] || CALL_S=$((${CALL_S:-575} - SECONDS)) OUT=$OUT bash benchmarks/gpu/session42_h100.sh
echo "call ended after $SECONDS s"
