#!/usr/bin/env bash
# Issue 41, fifty-sixth session, one GPU: call 1 timed the MoE's first key with compiles at 27-32 s when it ran after
# the GEMM's in one process (bench_search.py's compile phase, spaces gemm,moe), where the MoE example alone tunes it
# in 10 s. Here: the compile phase with spaces moe alone, gemm then moe, and moe then gemm, each a fresh process,
# HOME and Triton cache, keeping each run's rank logs (compile workers, breakdowns). Outputs under OUT, OUT/all.tgz.
# Usage: OUT=DIR bash benchmarks/gpu/session56_call2.sh   (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 ...)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
for spaces in ${ARMS:-moe gemm,moe moe,gemm}; do
  name=${spaces/,/_then_}
  rm -rf /tmp/tdt_bench_search_*
  HOME=$(mktemp -d) timeout 150 python3 benchmarks/bench_search.py --out "$OUT/$name" --phases compile \
    --spaces "$spaces" --compile-shape 256 "${smoke[@]}" > "$OUT/$name.log" 2>&1
  echo "== $name: exit $? after $SECONDS s"; grep "first key with compiles" "$OUT/$name.log"
  mkdir -p "$OUT/$name/logs" && cp -r /tmp/tdt_bench_search_*/logs/. "$OUT/$name/logs/" 2>/dev/null
  find "$OUT/$name/logs" -name "*.log" -exec grep -h "compile workers\|\] time: \|left to the compile" {} + | cut -c1-500
done
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz ./*.log moe* gemm* 2>/dev/null); ls -la "$OUT"
