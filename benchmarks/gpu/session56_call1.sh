#!/usr/bin/env bash
# Issue 41, fifty-sixth session, one GPU: the GPU tests, the one-GPU acceptance (quick start, MoE alone and as the
# README's campaign with --export-vllm, flash-linear-attention, list/show/plot), then the first key with compiles
# (GEMM and MoE at M = 256: bench_search.py's compile phase) REPEATS times (default 3), each in a fresh process,
# HOME and Triton cache; the SM clock before and after. Outputs under OUT, and OUT/all.tgz.
# Usage: OUT=DIR bash benchmarks/gpu/session56_call1.sh   (carry arms/fla_site: bash benchmarks/gpu/fla_site.sh arms/fla_site)
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session56_call1.sh (no GPU tests, no acceptance)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
clock() { nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; }
{ echo "before: $(clock)"; nproc; git log --oneline -1 2>/dev/null; } > "$OUT/machine.txt"
if [ -z "${CPU_SMOKE:-}" ]; then
  # GPU_TESTS: the test files to run (default: the three of the fifty-sixth session)
  TDT_TEST_FORKSERVER=0 timeout "${GPU_TESTS_S:-120}" python3 -m pytest -q -p no:cacheprovider -rA \
    ${GPU_TESTS:-tests/test_contextual_cuda.py tests/test_beats_cuda.py tests/test_graphs_cuda.py} 2>&1 \
    | tail -n 16 > "$OUT/gpu_tests.txt"
  echo "GPU tests ended after $SECONDS s" | tee -a "$OUT/gpu_tests.txt"
  HOME=$(mktemp -d) PYTHONPATH=$PWD/arms/fla_site timeout 270 python3 benchmarks/gpu/acceptance.py \
    --out "$OUT/acc" --budget 200 > "$OUT/acceptance.log" 2>&1
  echo "acceptance exit $? after $SECONDS s"; tail -n 25 "$OUT/acceptance.log"
fi
for i in $(seq 1 "${REPEATS:-3}"); do
  HOME=$(mktemp -d) timeout 120 python3 benchmarks/bench_search.py --out "$OUT/first_keys_$i" --phases compile \
    --spaces gemm,moe --compile-shape 256 "${smoke[@]}" > "$OUT/first_keys_$i.log" 2>&1
  echo "first keys $i: exit $? after $SECONDS s"; grep "first key with compiles" "$OUT/first_keys_$i.log"
done
python3 - "$OUT" <<'EOF' | tee "$OUT/first_keys.txt"
import json, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("first_keys_*/*.json")):
    for name, row in json.loads(path.read_text()).get("compile", {}).items():
        decision = row.get("ours_decision") or {}
        print(f"{path.parent.name} {name}: {row['ours_s']:.2f} s, {row['kept']} kept -> {row['ours']}; "
              f"{decision.get('breakdown', '')}")
EOF
echo "after: $(clock)" >> "$OUT/machine.txt"
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz ./*.txt ./*.log first_keys_* acc 2>/dev/null); ls -la "$OUT"
