#!/usr/bin/env bash
# Issue 41, forty-sixth session, one H200, the last minutes of device time: more held-out tunings of the sift (this
# tree) against the race before it (ours_nosift) at N = 14336, K = 4096, M = 8192 (the up projection, where the race
# before chose configs 1.08-1.12x the best in 4 of 6 tunings over calls 1 and 2). Leaves fid_held.tgz.
# Usage: OUT=DIR T=5 bash benchmarks/gpu/session46_heldout.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/fid/decisions"
HOME=$(mktemp -d) TRITON_DIST_AUTOTUNE_LOG_DIR="$OUT/fid/logs" FID_DECISIONS="$OUT/fid/decisions" \
  PYTHONPATH=$PWD PYTHONUNBUFFERED=1 timeout "${FTIME:-150}" taskset -c 0-15 \
    python3 benchmarks/bench_fidelity.py --out "$OUT/fid/fid.json" --phases tune --tunings "${T:-5}" \
    --variants ours,ours_nosift --oracle-rounds 8 --nk 14336,4096 --shapes 8192 > "$OUT/fid/fid.txt" 2>&1
echo "fidelity: exit $? after $SECONDS s"
grep -v "changed its argument" "$OUT/fid/fid.txt" | tail -n 6
(cd "$OUT" && tar czf fid_held.tgz fid && rm -rf fid)
