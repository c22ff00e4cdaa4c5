#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what is missing, then lint, the multi-rank suite on CPU ranks
# (gloo, Triton's interpreter), the pytest-mpi tests under mpiexec, and the Triton-dependent tests again under
# triton 3.6 (the version on the GPU machines). Usage: bash tests/run.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

bash scripts/ensure_env.sh
# pip puts Open MPI's mpiexec beside the interpreter's other scripts
export PATH="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"

export TRITON_INTERPRET=1 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

echo "== ruff"
"$PY" -m ruff check .

# two workers (pytest-xdist): most tests wait on their ranks' processes, so two at a time keep both cores busy;
# work stealing: a worker that runs out takes tests queued for the other, so neither idles at the end
echo "== pytest (triton $("$PY" -c 'import triton; print(triton.__version__)'), 2 workers)"
"$PY" -m pytest -q -n 2 --dist worksteal "$@"

echo "== pytest-mpi under mpiexec -n 2"
mpiexec -n 2 --oversubscribe "$PY" -m pytest --with-mpi -q -p no:cacheprovider tests/test_mpi.py

echo "== Triton-dependent tests under triton 3.6"
# triton 3.6's interpreter breaks on numpy >= 2.4 (a 1-element array is no longer a scalar): pin numpy beside it.
# Downloaded once (about 700 MB) into a cache folder outside the checkout.
T36=$(realpath -m "${TRITON36_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/triton-dist-tune/triton36-numpy23}")
if [ ! -f "$T36/triton/__init__.py" ] || [ ! -d "$T36/numpy" ]; then
  echo "== installing triton 3.6.0 and numpy<2.4 into $T36 (once, about 700 MB)"
  "$PY" -m pip install -q --no-deps --target "$T36" triton==3.6.0 'numpy<2.4'
fi
PYTHONPATH="$T36${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c 'import triton; assert triton.__version__.startswith("3.6"), triton.__version__'
PYTHONPATH="$T36${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q -n 2 --dist worksteal -p no:cacheprovider \
  tests/test_contextual_semantics.py tests/test_triton_compat.py tests/test_semantics.py tests/test_search.py \
  tests/test_triton_autotuner.py
