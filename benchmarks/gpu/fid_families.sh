#!/usr/bin/env bash
# bench_fidelity.py's 40-config GEMM on one GPU, one process per family (N,K), each its variants' fresh tunings side by
# side, judged by the sustained oracle (8 rounds) and among heavy layers; the rank logs and the decision files (every
# config's samples by round) come back in fid.tgz, as session46_sift.sh's.
# Usage: OUT=DIR FAMILIES="N,K@Ms@tunings@seconds[@variants] ..." VARIANTS=ours,ours_after2 bash benchmarks/gpu/fid_families.sh
# (Ms: comma-separated; seconds: that family's process at most; variants: that family's, VARIANTS's when left out).
# The fiftieth session's call 1:
# FAMILIES="8192,4096@16384@5@130 8192,28672@8192@3@150 28672,4096@16384@3@170" VARIANTS=ours,ours_after2
set -u
OUT=${OUT:?set OUT}; FAMILIES=${FAMILIES:?set FAMILIES}; VARIANTS=${VARIANTS:?set VARIANTS}
mkdir -p "$OUT/fid"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader > "$OUT/fid/env.txt" 2>&1
for family in $FAMILIES; do
  IFS=@ read -r nk ms tunings seconds variants <<< "$family"
  mkdir -p "$OUT/fid/decisions_$nk"
  HOME=$(mktemp -d) TRITON_DIST_AUTOTUNE_LOG_DIR="$OUT/fid/logs_$nk" FID_DECISIONS="$OUT/fid/decisions_$nk" \
    PYTHONPATH=$PWD timeout "$seconds" python3 benchmarks/bench_fidelity.py --out "$OUT/fid/fid_$nk.json" \
      --phases tune --tunings "$tunings" --variants "${variants:-$VARIANTS}" --oracle-rounds 8 --nk "$nk" --shapes "$ms" \
      > "$OUT/fid/fid_$nk.txt" 2>&1
  echo "fidelity $nk at M = $ms: exit $? after $SECONDS s" | tee -a "$OUT/fid/env.txt"
  grep -v "changed its argument" "$OUT/fid/fid_$nk.txt" | tail -n 12
done
(cd "$OUT" && tar czf fid.tgz fid && rm -rf fid)
