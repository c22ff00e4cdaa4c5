#!/usr/bin/env bash
# Issue 39, item 4: GPU choices on many ranks. 3 fresh tunings per key of the examples' AG-GEMM and GEMM-RS (2
# shapes each, the 840-config space of corpus_collective.py), function level and contextual_autotune, each choice
# judged against the group oracle (benchmarks/bench_collective_choices.py; its docstring has the method). 4 GPUs,
# or 2 where only 2 are (device tool, kind nvidia-h200-x4 or -x2).
#   bash benchmarks/gpu/collective_choices.sh
# The oracle (collective_w4.json: the group's device time; collective_w2.json: eager windows, before the eighth
# session): $ORACLE when set, else benchmarks/results/corpus/collective_w{N}.json when committed, else $OUT/collective_w{N}.json (written
# by benchmarks/gpu/record_collective.sh earlier in the same device call), else the recorder's state on a warm
# machine ($STATE/collective_w{N}.json); with none, the choices and their tuned times only (the ratios are owed).
# Both in one call of 600 s:
#   LIMIT=300 TIMEOUT=330 bash benchmarks/gpu/record_collective.sh; LIMIT=200 TIMEOUT=230 bash benchmarks/gpu/collective_choices.sh
# The job stays within LIMIT seconds (default 540; each case gets a share of what is left, a progress line per
# tuning). Run the same command again on the warm machine to go on: the cases done are kept ($STATE/choices_w{N}),
# the rest tuned, the report rewritten against the oracle found then. Writes $OUT/choices_w{N}/choices.{json,md}.
# CPU plumbing: TRITON_INTERPRET=1 EXTRA="--cpu-smoke --op ag" OUT=/tmp/x STATE=/tmp/x bash benchmarks/gpu/collective_choices.sh
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HOME=$(mktemp -d); export HOME
STATE=${STATE:-/tmp/tdt_collective}; mkdir -p "$STATE"
export TRITON_CACHE_DIR="$STATE/triton_cache"  # the recorder's: its compiled tiles serve the tunings too
OUT=${OUT:-/tmp/collective_out}; mkdir -p "$OUT"
N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); if [ "$N" -ge 4 ]; then N=4; else N=2; fi
oracle=()
for f in ${ORACLE:-} "benchmarks/results/corpus/collective_w$N.json" "$OUT/collective_w$N.json" "$STATE/collective_w$N.json"; do
  if [ -f "$f" ]; then oracle=(--oracle "$f"); break; fi
done
echo "oracle: ${oracle[1]:-none (the ratios are owed)}"
nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.device_count(), "GPUs")'
# shellcheck disable=SC2086  # EXTRA holds several arguments
timeout "${TIMEOUT:-585}" python3 -m torch.distributed.run --standalone --nproc-per-node "$N" \
  benchmarks/bench_collective_choices.py --out "$STATE/choices_w$N" --time-limit "${LIMIT:-540}" "${oracle[@]}" \
  ${EXTRA:-} 2>&1 | grep -v -i 'warn' | tee -a "$OUT/choices_log_w$N.txt"
echo "exit ${PIPESTATUS[0]} after $SECONDS s"
mkdir -p "$OUT/choices_w$N" && cp "$STATE/choices_w$N"/choices.* "$OUT/choices_w$N/" 2>/dev/null
