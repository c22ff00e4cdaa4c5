#!/usr/bin/env bash
# The first keys with compiles (bench_search.py's compile phase: GEMM and MoE at M = 256) of this tree against an
# older package, on one GPU, alternating (new, base, new, base), each in a fresh process, HOME and Triton cache: to
# tell a slower host from slower code. The base tree is this one with triton_dist_tune/ replaced by BASE_PKG's.
# Make BASE_PKG here first (it travels as an untracked file; keep the tree under the device's 64 MiB):
#   git archive <rev> triton_dist_tune --format=tar.gz -o base_pkg.tgz
# Usage: OUT=DIR BASE_PKG=base_pkg.tgz bash benchmarks/gpu/ab_first_keys.sh   (OUT/ab.txt: one line per run)
set -u
OUT=${OUT:?set OUT}; BASE_PKG=${BASE_PKG:?set BASE_PKG}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
base=$(mktemp -d)
cp -a . "$base/" && rm -rf "$base/triton_dist_tune" && tar xzf "$BASE_PKG" -C "$base" || exit 1
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader > "$OUT/clock.txt" 2>&1
for round in 1 2; do
  for tree in new base; do
    dir=$PWD; [ "$tree" = base ] && dir=$base
    (cd "$dir" && HOME=$(mktemp -d) PYTHONPATH="$dir" timeout 100 python3 benchmarks/bench_search.py \
      --out "$OUT/fk_${tree}_$round" --phases compile --spaces gemm,moe --compile-shape 256 \
      ${CPU_SMOKE:+--cpu-smoke} > "$OUT/fk_${tree}_$round.log" 2>&1)
    echo "$tree round $round: exit $? after $SECONDS s"
  done
done
python3 - "$OUT" <<'PY' | tee "$OUT/ab.txt"
import json, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("fk_*/*.json")):
    for name, row in json.loads(path.read_text()).get("compile", {}).items():
        d = row.get("ours_decision") or {}
        print(f"{path.parent.name} {name}: {row['ours_s']:.2f} s, {row['kept']} kept -> {row['ours']}; {d.get('breakdown', '')}")
PY
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> "$OUT/clock.txt" 2>&1
