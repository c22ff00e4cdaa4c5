#!/usr/bin/env bash
# Issue 41, eleventh session, one GPU: the README's MoE campaign (examples/moe_gemm.py --campaign, 16 batch sizes)
# alone, one process, a fresh HOME per run (decision and Triton caches empty), with the next key compiled ahead
# (TRITON_DIST_AUTOTUNE_COMPILE_NEXT_KEY=1, the default) and without (0), alternating (ARMS, default "off on off on").
# Prints per run: exit status, the campaign's seconds (the example's RESULT line), the kernels the compile workers
# compiled and the seconds they spent on them, and how many configs compiled ahead each key then screened; keeps each
# run's rank log. An arm `old` runs another library with it on (ARM_OLD: a folder holding its triton_dist_tune and
# examples, made with `git archive COMMIT triton_dist_tune examples`; carry it); an arm `procsN` runs this library
# with N compile worker processes (TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=N; default min(16, CPUs)).
# Usage: OUT=DIR bash benchmarks/gpu/next_key_ab.sh   (leaves next_key_ab.tgz alone in OUT)
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 bash benchmarks/gpu/next_key_ab.sh (the example's --tiny --cpu)
source "$(dirname "$0")/_setup.sh" /tmp/next_key_ab
tiny=(); [ -n "${CPU_SMOKE:-}" ] && tiny=(--tiny)
port=29700; k=0
for arm in ${ARMS:-off on off on}; do
  k=$((k + 1)); port=$((port + 1)); flag=1; [ "$arm" = off ] && flag=0
  root=$PWD; [ "$arm" = old ] && root=$(cd "${ARM_OLD:?set ARM_OLD}" && pwd)
  procs=; case $arm in procs*) procs=${arm#procs} ;; esac
  home=$(mktemp -d)
  PYTHONPATH=$root HOME=$home TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=$procs TRITON_DIST_AUTOTUNE_COMPILE_NEXT_KEY=$flag TRITON_DIST_AUTOTUNE_LOG_DIR=$home/logs RANK=0 LOCAL_RANK=0 \
    WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout "${RUN_TIME:-130}" python3 "$root/examples/moe_gemm.py" --campaign "${tiny[@]}" > "$OUT/run_$k-$arm.txt" 2>&1
  rc=$?
  log=$(find "$home/logs" -name '*.log' | head -n 1)
  [ -n "$log" ] && gzip -c "$log" > "$OUT/rank_$k-$arm.log.gz"
  seconds=$(grep -o '"campaign_s": [0-9.]*' "$OUT/run_$k-$arm.txt" | tail -n 1)
  kernels=$(grep -o 'so far: [0-9]* kernel(s) compiled there in [0-9.]* s' "${log:-/dev/null}" | tail -n 1)
  hits=$(grep -o 'screened [0-9]* of the [0-9]* config' "${log:-/dev/null}" | awk '{h+=$2; n+=$5} END {print h "/" n}')
  lib=$(cd /tmp && PYTHONPATH=$root python3 -c "import triton_dist_tune; print(triton_dist_tune.__file__)" 2>&1 | tail -n 1)
  echo "run $k $arm: exit $rc | $seconds | $kernels | compiled ahead and then screened: $hits | library $lib"
  rm -rf "$home"
done
(cd "$OUT" && tar czf next_key_ab.tgz ./*.txt ./*.log.gz 2>/dev/null)
find "$OUT" -mindepth 1 -maxdepth 1 ! -name next_key_ab.tgz -exec rm -rf {} +  # the archive alone comes back
tar tzf "$OUT/next_key_ab.tgz" | head -n 20
