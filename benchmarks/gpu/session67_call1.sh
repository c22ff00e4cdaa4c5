#!/usr/bin/env bash
# Issue 41, sixty-seventh session, one GPU: where the README's MoE campaign's seconds go on the tuner's thread. The
# campaign alone (benchmarks/gpu/_campaign.sh: one process, fresh HOME and Triton cache) three times in one call:
# plain, under benchmarks/stack_sampler.py (the main thread's stack every 2 ms, waits included), plain again; the
# host's speed probe before each (benchmarks/host_sampler.py probe) and the SM clock; campaign_parts.py per run.
# Usage: OUT=DIR bash benchmarks/gpu/session67_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session67_call1.sh (the example's --tiny)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source benchmarks/gpu/_campaign.sh
tiny=(); [ -n "${CPU_SMOKE:-}" ] && tiny=(--tiny)
cpus="0-$(($(nproc) - 1))"
clock() { nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; }
{ echo "before: $(clock)"; nproc; } > "$OUT/machine.txt"
sampler="import sys; sys.path.insert(0, '$PWD/benchmarks'); import stack_sampler; stack_sampler.start('$OUT/sampled/stacks.txt')"
port=29611
for run in plain1 sampled plain2; do
  mkdir -p "$OUT/$run"; port=$((port + 1))
  echo "$run: probe $(python3 benchmarks/host_sampler.py probe), clock $(clock)" | tee -a "$OUT/machine.txt"
  if [ "$run" = sampled ]; then prelude=$sampler; else prelude=""; fi
  echo "$run: $(campaign_alone "$OUT/$run" "$PWD" 0 "$cpus" "$port" "$prelude") after $SECONDS s" | tee -a "$OUT/machine.txt"
done
echo "after: $(clock)" >> "$OUT/machine.txt"
python3 benchmarks/campaign_parts.py "$OUT"/plain1 "$OUT"/sampled "$OUT"/plain2 | tee "$OUT/parts.txt"
[ -f "$OUT/sampled/stacks.txt" ] && gzip -f "$OUT/sampled/stacks.txt"
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz ./*.txt plain1 sampled plain2 2>/dev/null); ls -la "$OUT"
