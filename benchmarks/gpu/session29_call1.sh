#!/usr/bin/env bash
# Issue 41, twenty-ninth session, one call on one H200 (nvidia-h200, CPUs 0-15):
# (1) the one-GPU acceptance first (fresh HOME, its own Triton cache): the campaign's figure now splits the
#     command's time outside its keys into start, the example's phases and exit (RESULT's clock);
# (2) the 840-config GEMM (gemm_k4096_n4096) at M = 16, 256 and 8192 with this tree (near-tie blocks of at most 3
#     leaders), fresh tunings, the new arm judging its choices on this host too (JUDGE);
# (3) then GEMM M = 1024, 6 fresh tunings per run, as many runs as the call leaves (the tail over 3 s).
# (2) and (3) share one Triton cache (only the first run compiles the space).
# Leaves acc.tgz, acc_table.md, shapes.tgz, m1024.tgz, summary.txt.
# Usage: OUT=DIR [CALL_S=575] bash benchmarks/gpu/session29_call1.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
source "$(dirname "$0")/_acceptance_left.sh"
{
  gpu_state
  MIN=110 acceptance_left 250
  echo "acceptance done after $SECONDS s"
  shared=$(mktemp -d)
  OUT=$OUT/s ARMS="new" FAMILY=gemm_k4096_n4096 SHAPES=16,256,8192 TUNINGS=3 JUDGE=6 \
    VTIME=$((CALL - SECONDS - 100 > 200 ? 200 : CALL - SECONDS - 100)) SHARED_TRITON_CACHE=$shared \
    taskset -c 0-15 bash benchmarks/gpu/validate_ab.sh
  mv "$OUT/s/validate_ab.tgz" "$OUT/shapes.tgz" && rmdir "$OUT/s"
  echo "shapes done after $SECONDS s"
  n=$(( (CALL - SECONDS - 20) / 60 )); [ "$n" -gt 4 ] && n=4; [ "$n" -lt 1 ] && n=1
  runs=$(printf 'new %.0s' $(seq "$n")); per=$(( (CALL - SECONDS - 20) / n ))
  echo "M = 1024: runs '$runs', $per s each"
  OUT=$OUT/m ARMS="$runs" FAMILY=gemm_k4096_n4096 SHAPES=1024 TUNINGS=6 VTIME=$per SHARED_TRITON_CACHE=$shared \
    taskset -c 0-15 bash benchmarks/gpu/validate_ab.sh
  mv "$OUT/m/validate_ab.tgz" "$OUT/m1024.tgz" && rmdir "$OUT/m"
  echo "M = 1024 done after $SECONDS s"
} 2>&1 | tee "$OUT/summary.txt"
