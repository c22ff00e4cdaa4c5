#!/usr/bin/env bash
# Issue 41, thirty-fifth session, one short call on one H200 (CPUs 0-15): the 840-config GEMM (bench_breakdown.py,
# N = K = 4096, one pass over SHAPES, default 16,1024,4096,8192: the first key compiles what it screens, the later
# keys what they add), fresh HOME and folders (bench_breakdown makes them under TMPDIR), its rank log kept: the compile lines beside how each config read
# (benchmarks/compile_seconds.py: do the configs that compile longest ever read near a key's choice, in a GEMM space
# where 256 x 256 tiles can win at large M?) and the graces (benchmarks/grace_events.py). Leaves gemm35.txt and
# gemm35_rank.log.gz.
# Usage: OUT=DIR bash benchmarks/gpu/session35_gemm_compiles.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session35_gemm_compiles.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
home=$(mktemp -d)
smoke=(); cpus=0-15
if [ -n "${CPU_SMOKE:-}" ]; then smoke=(--cpu-smoke); cpus=0-1; fi
{
  HOME=$home TMPDIR=$home timeout "${RUN_S:-200}" taskset -c "$cpus" \
    python3 benchmarks/bench_breakdown.py --out "$OUT/gemm" --shapes "${SHAPES:-16,1024,4096,8192}" --passes 1 \
    "${smoke[@]}" 2>&1 | tail -n 30
  echo "bench_breakdown: exit ${PIPESTATUS[0]} after $SECONDS s"
  log=$(find "$home" -name 'rank-*.log' | head -n 1)
  [ -n "$log" ] && gzip -c "$log" > "$OUT/gemm35_rank.log.gz"
  python3 benchmarks/compile_seconds.py "$OUT/gemm35_rank.log.gz"
  python3 benchmarks/grace_events.py "$OUT/gemm35_rank.log.gz"
} 2>&1 | tee "$OUT/gemm35.txt"
rm -rf "$home" "$OUT/gemm"
