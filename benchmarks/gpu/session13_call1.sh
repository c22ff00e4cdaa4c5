#!/usr/bin/env bash
# Issue 41, thirteenth session, one call on nvidia-h200-x2: two jobs side by side, each on one GPU and 16 CPUs
# (a 16-CPU H200 host's share), each leaving its archive in its own folder of OUT:
# - a/ (GPU 0, CPUS_A): the README's MoE campaign alone, this tree's library (at d38eb72, the tree it ran from:
#   graphs captured as each config is warmed up, since reverted: `on`) against the twelfth session's (ARM_OLD, default arms/s12 = `git archive 5cbb1bd triton_dist_tune
#   examples`; carry it), alternating (ARMS_A);
# - b/ then c/ (GPU 1, CPUS_B): the MoE validation of four shapes judged on this host as well as by the corpus
#   (validate_search.py --judge-here 8), then the campaign with 12 compile worker processes against 16 (`procs12`,
#   `on`), alternating (ARMS_C).
# Usage: OUT=DIR bash benchmarks/gpu/session13_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 CPUS_A=0 CPUS_B=1 ARMS_A="on old" ARMS_C=procs1 OUT=DIR bash ...
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
small=(); [ -n "${CPU_SMOKE:-}" ] && small=(SHAPES=16 FAMILY=gemm_k4096_n4096)
CUDA_VISIBLE_DEVICES=0 OUT=$OUT/a ARM_OLD=${ARM_OLD:-arms/s12} ARMS="${ARMS_A:-on old on old on}" RUN_TIME=95 \
  taskset -c "${CPUS_A:-0-15}" bash benchmarks/gpu/next_key_ab.sh > "$OUT/a.txt" 2>&1 &
(
  env CUDA_VISIBLE_DEVICES=1 OUT="$OUT/b" ARMS=new JUDGE=8 FAMILY=moe SHAPES=16,32,64,512 VTIME=200 "${small[@]}" \
    taskset -c "${CPUS_B:-16-31}" bash benchmarks/gpu/validate_ab.sh
  CUDA_VISIBLE_DEVICES=1 OUT=$OUT/c ARMS="${ARMS_C:-procs12 on procs12}" RUN_TIME=95 \
    taskset -c "${CPUS_B:-16-31}" bash benchmarks/gpu/next_key_ab.sh
) > "$OUT/b.txt" 2>&1 &
wait
cat "$OUT/a.txt" "$OUT/b.txt"
