#!/usr/bin/env bash
# Issue 41, twenty-ninth session, one call on one H200 (nvidia-h200, CPUs 0-15), the session's final tree:
# (1) the whole one-GPU acceptance (fresh HOME, its own Triton cache);
# (2) the 48-config bar (bench_fidelity.py, the tuner's defaults) at four of its eight shapes, 3 fresh tunings each,
#     against 14-round oracles (as the twenty-fifth session's call 5), with what time the call leaves.
# ACC=0: (2) alone (call 4 ran (1), then failed to start (2): `_acceptance_left.sh` lacked gpu_state and CALL; call 5).
# Leaves acc.tgz, acc_table.md, fidelity.tgz, summary.txt.   Usage: OUT=DIR [CALL_S=575] bash benchmarks/gpu/session29_call4.sh
OUT=${OUT:?set OUT}; mkdir -p "$OUT/fid"
source "$(dirname "$0")/_acceptance_left.sh"
{
  gpu_state
  [ "${ACC:-1}" = 1 ] && MIN=110 acceptance_left 250
  echo "acceptance done after $SECONDS s"
  HOME=$(mktemp -d) TMPDIR=$(mktemp -d) timeout $((CALL - SECONDS - 20)) taskset -c 0-15 python3 \
    benchmarks/bench_fidelity.py --out "$OUT/fid/fidelity.json" --phases tune --tunings 3 --oracle-rounds 14 \
    --shapes "${SHAPES:-512,2048,4096,8192}" --variants ours > "$OUT/fid/fidelity_log.txt" 2>&1
  echo "fidelity: exit $? after $SECONDS s"
  grep -v "changed its argument" "$OUT/fid/fidelity_log.txt" | tail -n 14
  gpu_state
} 2>&1 | tee "$OUT/summary.txt"
(cd "$OUT" && tar czf fidelity.tgz fid && rm -rf fid)
