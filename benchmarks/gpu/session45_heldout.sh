#!/usr/bin/env bash
# Issue 41, forty-fifth session, one H200: the 48-config bar ("worst within 1.01 of the sustained best, at most
# 2.1 s per key") at shapes none of the race's settings was chosen on: bench_fidelity.py's 40-config GEMM space at
# N = 4096, K = 14336 (an MLP's down projection; its settings were chosen at N = 8192, K = 4096), 3 fresh tunings per
# shape, a 16-round sustained oracle. Also says whether this torch has dist.all_gather_single (the docs' example).
# Leaves fidelity.json, fidelity.txt, env.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session45_heldout.sh
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{ python3 -c "import torch, triton, torch.distributed as dist; print('torch', torch.__version__, 'triton', triton.__version__,
'all_gather_single', hasattr(dist, 'all_gather_single'), 'reduce_scatter_single', hasattr(dist, 'reduce_scatter_single'))"
  nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader; } > "$OUT/env.txt" 2>&1
HOME=$(mktemp -d) PYTHONPATH=$PWD timeout "${FTIME:-500}" taskset -c 0-15 \
  python3 benchmarks/bench_fidelity.py --out "$OUT/fidelity.json" --phases tune --tunings 3 --variants ours \
  --oracle-rounds 16 --nk 4096,14336 --shapes "${SHAPES:-128,512,2048,8192,16384}" > "$OUT/fidelity.txt" 2>&1
echo "fidelity: exit $? after $SECONDS s" >> "$OUT/env.txt"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"; tail -n 12 "$OUT/fidelity.txt"
