#!/usr/bin/env bash
# Issue 41, fifty-eighth session, one GPU: the first keys with compiles (GEMM then MoE at M = 256, bench_search.py's
# compile phase) with the compile workers' garbage collector on (arms/s58_gcon: the library as committed) and off
# (arms/s58_gcoff: the same with the collector left off in forked workers, as before this session), alternating,
# ROUNDS times (default 2), each in a fresh process, HOME and Triton cache; then session58_call1.sh's GPU tests and
# acceptance (REPEATS=0: no first keys there). Outputs under OUT.
# Usage: OUT=DIR ROUNDS=2 bash benchmarks/gpu/session58_call2.sh  (carry arms/fla_site, arms/s58_gcon, arms/s58_gcoff)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
for i in $(seq 1 "${ROUNDS:-2}"); do
  arms=(gcon gcoff); [ $((i % 2)) -eq 0 ] && arms=(gcoff gcon)
  for arm in "${arms[@]}"; do
    (cd "arms/s58_$arm" && HOME=$(mktemp -d) timeout 150 python3 benchmarks/bench_search.py --out "$OUT/${arm}_$i" \
      --phases compile --spaces gemm,moe --compile-shape 256 "${smoke[@]}" > "$OUT/${arm}_$i.log" 2>&1)
    echo "$arm round $i: exit $? after $SECONDS s: $(grep -h 'first key with compiles' "$OUT/${arm}_$i.log" | tr '\n' ' ')"
  done
done | tee "$OUT/ab.txt"
python3 - "$OUT" <<'PY' | tee "$OUT/ab_breakdown.txt"
import json, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("gc*_*/*.json")):
    for name, row in json.loads(path.read_text()).get("compile", {}).items():
        d = row.get("ours_decision") or {}
        print(f"{path.parent.name} {name}: {row['ours_s']:.2f} s; {d.get('breakdown', '')}")
PY
[ -z "${CPU_SMOKE:-}" ] && OUT="$OUT/final" REPEATS=0 bash benchmarks/gpu/session58_call1.sh
