#!/usr/bin/env bash
# Issue 41, fourteenth session, one call on nvidia-h200-x2 with this tree (graphs captured under the tuning's
# deadline): (GPU 0, CPUs 0-15) the one-GPU README commands that capture graphs (quick start, MoE alone, the MoE
# campaign with --export-vllm) through acceptance.py; beside it (GPU 1, CPUs 16-31) the GEMM validation at the ends of
# the 3 s bar's range (M = 16 and 8192), 3 fresh tunings each, judged by the corpus and on its own GPU.
# Leaves acc.tgz, acc.txt, gemm.tgz, gemm.txt. Usage: OUT=DIR bash benchmarks/gpu/session14_call5.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session14_call5.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/gemm"
export PYTHONUNBUFFERED=1
acc=(--only quickstart,moe_alone,moe_campaign --budget 200); shapes=16,8192; smoke=(); cpus_a=0-15; cpus_b=16-31
if [ -n "${CPU_SMOKE:-}" ]; then acc=(--cpu --only quickstart); shapes=16; smoke=(--cpu-smoke); cpus_a=0; cpus_b=1; fi
(CUDA_VISIBLE_DEVICES=0 taskset -c "$cpus_a" python3 benchmarks/gpu/acceptance.py --out /tmp/acc5 "${acc[@]}" \
  > "$OUT/acc.txt" 2>&1; echo "acceptance: exit $?" >> "$OUT/acc.txt") &
(HOME=$(mktemp -d) PYTHONPATH=$PWD CUDA_VISIBLE_DEVICES=1 timeout 330 taskset -c "$cpus_b" \
  python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --family gemm_k4096_n4096 \
  --shapes "$shapes" --tunings 3 --judge-here 8 --out "$OUT/gemm/gemm.json" "${smoke[@]}" > "$OUT/gemm/vlog.txt" 2>&1
 echo "gemm: exit $? | $(python3 benchmarks/corpus_vs_host.py "$OUT/gemm/gemm.json" 2>&1 | tail -n 2 | tr '\n' ' ')" \
  > "$OUT/gemm.txt") &
wait
(cd /tmp && tar czf "$OUT/acc.tgz" acc5) && (cd "$OUT" && tar czf gemm.tgz gemm && rm -rf gemm)
cat "$OUT/gemm.txt"; tail -n 4 "$OUT/acc.txt"
