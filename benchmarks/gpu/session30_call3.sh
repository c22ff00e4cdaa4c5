#!/usr/bin/env bash
# Issue 41, thirtieth session, one call on one H200 (nvidia-h200, CPUs 0-15), the session's final library:
# (1) the whole one-GPU acceptance (fresh HOME, its own Triton cache; its work folder kept);
# (2) the README campaign command again on the acceptance's caches (every batch size a cache hit: a rerun, or a
#     campaign resumed), its wall time and RESULT line.
# EXTRA: more acceptance arguments (a CPU dry run: EXTRA=--cpu; the rerun then adds --cpu --tiny).
# Leaves acc.tgz, acc_table.md, rerun.txt, summary.txt.   Usage: OUT=DIR [CALL_S=575] bash benchmarks/gpu/session30_call3.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
source "$(dirname "$0")/_acceptance_left.sh"
W=$(mktemp -d)/acc
{
  gpu_state
  ACC_ARGS="--work $W ${EXTRA:-}" MIN=110 acceptance_left $((CALL - SECONDS - 60 > 300 ? 300 : CALL - SECONDS - 60))
  echo "acceptance done after $SECONDS s"
  cpu=(); [ -n "${EXTRA:-}" ] && cpu=(--cpu) && tiny=(--tiny) || tiny=()
  began=$(date +%s.%N)
  env HOME="$W/home" XDG_CACHE_HOME="$W/home/.cache" TMPDIR="$W/tmp" TRITON_DIST_AUTOTUNE_LOG_DIR="$W/logs/rerun" \
    timeout $((CALL - SECONDS - 10)) taskset -c 0-15 bash launch.sh "${cpu[@]}" examples/moe_gemm.py "${tiny[@]}" \
    --campaign --export-vllm "$W/vllm_rerun" > "$OUT/rerun.txt" 2>&1
  status=$?
  echo "rerun: exit $status in $(python3 -c "import time; print(round(time.time() - $began, 1))") s"
  grep -E "^\[campaign|RESULT|at exit" "$OUT/rerun.txt" | tail -n 4 | cut -c1-600
  ls "$W/vllm_rerun" 2>&1 | head -3
  gpu_state
} 2>&1 | tee "$OUT/summary.txt"
