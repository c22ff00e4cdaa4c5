#!/usr/bin/env bash
# Issue 41, forty-first session, one call on one H200: why flash-linear-attention's steady figure read about 1.0 ms
# per call through launch.sh and 0.5 ms as one process in two acceptance runs (session 40 call 5, session 41 call 3),
# against 0.43-0.88 ms through launch.sh before. The example six times (CPUs 0-15, as the acceptance runs it), its
# line and the SM clock after each: (1) launch.sh with a fresh HOME (tunes), (2) one process (reads the decisions),
# (3) launch.sh again (reads them), (4) one process again; (5) launch.sh with another fresh HOME and compiles in
# threads (TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=0: no worker processes left after the tuning); (6) one process
# with a third fresh HOME (tunes without launch.sh). Leaves OUT/fla_regimes.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session41_fla_regimes.sh   (carry arms/fla_site)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/arms/fla_site${PYTHONPATH:+:$PYTHONPATH}
one() {  # name, HOME, command...
  local name=$1 home=$2 t0=$SECONDS
  shift 2
  local line
  line=$(HOME=$home taskset -c 0-15 "$@" 2>&1 | grep -E "^fla chunk_gla rank 0|^skipped|Error" | head -n 2)
  echo "$name ($((SECONDS - t0)) s): $line | $(nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader)"
}
{
  a=$(mktemp -d); b=$(mktemp -d); c=$(mktemp -d)
  one "1 launch.sh, tunes" "$a" bash launch.sh examples/fla_contextual.py
  one "2 one process, reads" "$a" python3 examples/fla_contextual.py
  one "3 launch.sh, reads" "$a" bash launch.sh examples/fla_contextual.py
  one "4 one process, reads" "$a" python3 examples/fla_contextual.py
  TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=0 one "5 launch.sh, tunes, compiles in threads" "$b" bash launch.sh \
    examples/fla_contextual.py
  one "6 one process, tunes" "$c" python3 examples/fla_contextual.py
} 2>&1 | tee "$OUT/fla_regimes.txt"
