#!/usr/bin/env bash
# Issue 41, twenty-ninth session, one call on one H200: where the README MoE command's last 1.6-1.7 s go after its
# RESULT line (calls 1-2). Each step one process of one rank (the variables launch.sh gives it), fresh HOME, under
# benchmarks/exit_probe.py (the wall clock when main returned, when the exit handlers were done, and
# destroy_process_group's seconds); this script reads the clock again once the process has ended.
# Steps: torch alone with CUDA up (no tuner); the MoE example alone, twice; the README campaign once; torch alone and
# the example alone again with the garbage collector's objects frozen before the interpreter's end (EXIT_PROBE_FREEZE).
# Leaves exit.tgz, summary.txt.   Usage: OUT=DIR bash benchmarks/gpu/session29_call3.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/exit"
export PYTHONUNBUFFERED=1 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1
step() {  # name, then the script and its arguments
  local name=$1; shift
  export MASTER_PORT=$((29500 + RANDOM % 1000)) HOME=$(mktemp -d) TRITON_DIST_AUTOTUNE_LOG_DIR=$OUT/exit/logs_$name
  timeout 150 taskset -c 0-15 python3 benchmarks/exit_probe.py "$@" > "$OUT/exit/$name.out" 2> "$OUT/exit/$name.err"
  local code=$? ended; ended=$(date +%s.%N)
  python3 - "$OUT/exit/$name.out" "$ended" "$name" "$code" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
probe = next((json.loads(l[11:]) for l in text.splitlines() if l.startswith("EXIT_PROBE ")), {})
result = next((json.loads(l[7:]) for l in text.splitlines() if l.startswith("RESULT ")), {})
ended = float(sys.argv[2])
printed = result.get("clock", {}).get("result_printed")
parts = []
if printed and "returned" in probe:
    parts.append(f"RESULT to main's return {probe['returned'] - printed:.2f} (destroy {probe.get('destroy_s', 0):.2f})")
if "returned" in probe and "handlers_done" in probe:
    parts.append(f"exit handlers {probe['handlers_done'] - probe['returned']:.2f}")
if "handlers_done" in probe:
    parts.append(f"interpreter's end {ended - probe['handlers_done']:.2f}")
print(f"{sys.argv[3]}: exit {sys.argv[4]}; " + ", ".join(parts) + " s")
PY
  grep -rh "at exit" "$TRITON_DIST_AUTOTUNE_LOG_DIR" --include=rank-0.log 2>/dev/null | tail -n 1
}
cat > /tmp/torch_only.py <<'PY'
import torch
x = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
print((x @ x).sum().item() != 0)
PY
{
  nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
  step torch_only /tmp/torch_only.py
  step moe_alone_1 examples/moe_gemm.py
  EXIT_PROBE_FREEZE=1 step torch_only_frozen /tmp/torch_only.py
  step moe_alone_2 examples/moe_gemm.py
  EXIT_PROBE_FREEZE=1 step moe_alone_frozen examples/moe_gemm.py
  step campaign examples/moe_gemm.py --campaign --export-vllm "$OUT/exit/vllm"
  echo "done after $SECONDS s"
} 2>&1 | tee "$OUT/summary.txt"
(cd "$OUT" && tar czf exit.tgz exit && rm -rf exit)
