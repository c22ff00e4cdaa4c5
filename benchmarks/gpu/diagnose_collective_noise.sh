#!/usr/bin/env bash
# Issue 39, items 3-5: why GEMM-RS's group times on many ranks do not repeat across processes. REPEAT runs (default
# 3), each its own process, of benchmarks/diagnose_collective_noise.py (eager windows against calls queued behind a
# hold of the device, host launch time, ranks' arrival skew, SM clock), then the cross-process comparison
# (benchmarks/_noise_report.py). 4 GPUs, or 2 where only 2 are; about a minute per run.
#   bash benchmarks/gpu/diagnose_collective_noise.sh
# CPU plumbing: TRITON_INTERPRET=1 EXTRA="--cpu-smoke --rounds 2 --window-ms 1 --queued-ms 1" REPEAT=2 OUT=/tmp/x bash benchmarks/gpu/diagnose_collective_noise.sh
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HOME=$(mktemp -d); export HOME
OUT=${OUT:-/tmp/noise_out}; mkdir -p "$OUT"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$HOME/triton_cache}"
N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); if [ "$N" -ge 4 ]; then N=4; else N=2; fi
files=()
for k in $(seq 1 "${REPEAT:-3}"); do
  echo "== run $k"
  # shellcheck disable=SC2086  # EXTRA holds several arguments
  timeout "${TIMEOUT:-150}" python3 -m torch.distributed.run --standalone --nproc-per-node "$N" \
    benchmarks/diagnose_collective_noise.py --out "$OUT/noise_r$k.json" ${EXTRA:-} 2>&1 | grep -v -i warn \
    | tee "$OUT/noise_r$k.log"
  [ -f "$OUT/noise_r$k.json" ] && files+=("$OUT/noise_r$k.json")
done
[ ${#files[@]} -gt 0 ] && python3 benchmarks/_noise_report.py "${files[@]}" | tee "$OUT/noise_report.md"
