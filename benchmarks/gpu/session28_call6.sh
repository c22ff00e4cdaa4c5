#!/usr/bin/env bash
# Issue 41, twenty-eighth session, one call on one H200: where the README campaign command's time outside its keys
# goes (7-9 s of 58-64 s): the MoE example's campaign with --export-vllm as launch.sh runs one rank, under cProfile
# (the main thread), fresh HOME; then the profile's largest cumulative entries outside the tuner.
# Leaves prof.tgz, summary.txt.  Usage: OUT=DIR bash benchmarks/gpu/session28_call6.sh   (CPU plumbing: CPU=1)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/prof"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
  MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
args=(--campaign --export-vllm "$OUT/prof/vllm"); [ -n "${CPU:-}" ] && args=(--tiny --campaign --batches 16)
{
  start=$(date +%s.%N)
  HOME=$(mktemp -d) timeout 300 taskset -c 0-15 python3 -m cProfile -o "$OUT/prof/campaign.prof" \
    examples/moe_gemm.py "${args[@]}" > "$OUT/prof/out.txt" 2>&1
  echo "exit $? after $(python3 -c "import time; print(round(time.time() - $start, 1))") s"
  grep -o '"campaign_s": [0-9.]*' "$OUT/prof/out.txt"
  python3 - "$OUT/prof/campaign.prof" <<'PY'
import pstats, sys
stats = pstats.Stats(sys.argv[1])
rows = [(ct, "/".join(fn[0].split("/")[-2:]) + f":{fn[1]} {fn[2]}") for fn, (cc, nc, tt, ct, callers)
        in stats.stats.items()]
mine = ("examples/", "torch/__init__.py:1 ", "triton/__init__.py:1 ", "init_distributed", "campaign.py")
for ct, name in sorted(rows, reverse=True):
    if any(w in name for w in mine) and ct > 0.05:
        print(f"{ct:8.2f} s  {name}")
PY
} 2>&1 | tee "$OUT/summary.txt"
cd "$OUT" && tar czf prof.tgz prof && rm -rf prof
