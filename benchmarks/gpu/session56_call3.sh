#!/usr/bin/env bash
# Issue 41, fifty-sixth session, one GPU: why the second first key with compiles of a process is 2-3 times as slow
# (call 2): benchmarks/first_keys_in_one_process.py with spaces gemm,gemm; gemm,moe (vmstat beside it); and gemm,moe
# with gc.freeze() after the first tuning. Each a fresh process, HOME and Triton cache. Outputs under OUT.
# Usage: OUT=DIR bash benchmarks/gpu/session56_call3.sh   (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 ...)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
for arm in ${ARMS:-gemm,gemm: gemm,moe: gemm,moe:--gc-freeze}; do
  spaces=${arm%%:*}; extra=${arm#*:}; name=${spaces/,/_}${extra:+_freeze}
  vmstat 1 > "$OUT/$name.vmstat" 2>&1 & vm=$!
  # shellcheck disable=SC2086
  HOME=$(mktemp -d) timeout 150 python3 benchmarks/first_keys_in_one_process.py --spaces "$spaces" $extra \
    "${smoke[@]}" --out "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "== $name: exit $? after $SECONDS s"; kill $vm 2>/dev/null
  grep -a "^\[bench_search" "$OUT/$name.log" | cut -c1-700
done
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz ./*.json ./*.log ./*.vmstat 2>/dev/null); ls "$OUT"
