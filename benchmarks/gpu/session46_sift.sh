#!/usr/bin/env bash
# Issue 41, forty-sixth session, one H200: the sift (a heavy call's settled block: after 2 screening rounds up to 12
# leaders for its first round, then the 3 best of them for 5 more) side by side with the race before it
# (bench_fidelity.py's ours_nosift: 3 leaders after 3 rounds), one process per GEMM family, fresh tunings each, judged by the sustained oracle (8 rounds) and among heavy layers:
# N = 4096, K = 14336 (the down projection: the sift was chosen on its logs, training), N = 14336, K = 4096 (the up
# projection: held out) and N = 8192, K = 4096 at M = 16384 (the 48-config bar's own shape, held out: seconds per
# key). The rank logs (which leaders were sifted) and the decision files (every config's samples) come back in
# fid.tgz.
# Usage: OUT=DIR bash benchmarks/gpu/session46_sift.sh   (T1, T2, T3: tunings per variant and shape; F1, F2, F3:
# seconds each family may take; VARIANTS: bench_fidelity's, default ours,ours_nosift. The forty-seventh session's
# call 1: VARIANTS=ours,ours_sift27,ours_nosift T1=5 T2=3 T3=3 F1=240 F2=190 F3=110; the A/B owed next:
# VARIANTS=ours,ours_keep4,ours_sift27 (ours_keep4 was a variant until 4b421de made keeping 4 the default: now
# ours,ours_keep3); V1, V2, V3: one family's variants, VARIANTS's when unset. The forty-eighth
# session's call 1: VARIANTS=ours,ours_keep4 V3=ours,ours_copyback,ours_keep4 T1=5 T2=3 T3=3 F1=200 F2=150 F3=110;
# its call 4: VARIANTS=ours,ours_nofar T1=3 T2=3 T3=3 F1=120 F2=120 F3=90. The forty-ninth session's call 1:
# VARIANTS=ours,ours_span10 T1=3 T2=3 T3=3 F1=120 F2=120 F3=90 FAMILY4=28672,4096 M4=8192 F4=150)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/fid"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader > "$OUT/fid/env.txt" 2>&1
fid() {  # N,K  the Ms  tunings  seconds at most  [variants]
  mkdir -p "$OUT/fid/decisions_$1"
  HOME=$(mktemp -d) TRITON_DIST_AUTOTUNE_LOG_DIR="$OUT/fid/logs_$1" FID_DECISIONS="$OUT/fid/decisions_$1" \
    PYTHONPATH=$PWD timeout "$4" taskset -c 0-15 \
      python3 benchmarks/bench_fidelity.py --out "$OUT/fid/fid_$1.json" --phases tune --tunings "$3" \
    --variants "${5:-${VARIANTS:-ours,ours_nosift}}" --oracle-rounds 8 --nk "$1" --shapes "$2" > "$OUT/fid/fid_$1.txt" 2>&1
  echo "fidelity $1 at M = $2: exit $? after $SECONDS s" | tee -a "$OUT/fid/env.txt"
  grep -v "changed its argument" "$OUT/fid/fid_$1.txt" | tail -n 10
}
fid 4096,14336 8192,16384 "${T1:-6}" "${F1:-220}" "${V1:-}"
fid 14336,4096 8192,16384 "${T2:-3}" "${F2:-150}" "${V2:-}"
fid 8192,4096 16384 "${T3:-3}" "${F3:-100}" "${V3:-}"
# a fourth family when asked (held out: FAMILY4=N,K M4=the Ms T4 F4)
[ -z "${FAMILY4:-}" ] || fid "$FAMILY4" "${M4:-8192}" "${T4:-3}" "${F4:-150}" "${V4:-}"
(cd "$OUT" && tar czf fid.tgz fid && rm -rf fid)
