#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what is missing, then lint, the multi-rank suite on CPU ranks
# (gloo, Triton's interpreter), the pytest-mpi tests under mpiexec and the Triton-dependent tests (marker
# triton_dependent) again under triton 3.6 (the version on the GPU machines), both beside the main pass.
# Usage: bash tests/run.sh [extra pytest args]   (the args go to the main pass)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

bash scripts/ensure_env.sh
# pip puts Open MPI's mpiexec beside the interpreter's other scripts
export PATH="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"

export TRITON_INTERPRET=1 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
# bytecode caches, where the environment turned them off: the suite starts over a hundred fresh interpreters, each
# of which would compile this package again (~0.2 s of CPU), and each pytest process would rewrite the test modules'
# asserts again (~4 s); written once into the checkout's __pycache__ folders (ignored by git), then read
unset PYTHONDONTWRITEBYTECODE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# triton 3.6 (the version on the GPU machines) for the second pass: downloaded once (about 700 MB) into a cache folder
# outside the checkout, in the background while ruff and the main pass run (network time, not CPU time).
# triton 3.6's interpreter breaks on numpy >= 2.4 (a 1-element array is no longer a scalar): numpy is pinned beside it.
T36=$(realpath -m "${TRITON36_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/triton-dist-tune/triton36-numpy23}")
logs=$(mktemp -d "${TMPDIR:-/tmp}/triton-dist-tune-run.XXXXXX")

# the Triton-dependent tests (marker triton_dependent: Triton's API and semantics) again under triton 3.6, on one
# worker beside the main pass's two: it starts when the download is done and fills the time the main pass's ranks
# spend waiting on each other
pass36() {
  if [ ! -f "$T36/triton/__init__.py" ] || [ ! -d "$T36/numpy" ]; then
    echo "== installing triton 3.6.0 and numpy<2.4 into $T36 (once, about 700 MB, during the main pass)"
    if ! "$PY" -m pip install -q --no-deps --target "$T36" triton==3.6.0 'numpy<2.4' >"$logs/download.log" 2>&1; then
      echo "installing triton 3.6 failed:"; tail -n 20 "$logs/download.log"; return 1
    fi
  fi
  PYTHONPATH="$T36${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c 'import triton; assert triton.__version__.startswith("3.6"), triton.__version__'
  PYTHONPATH="$T36${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q -p no:cacheprovider -m triton_dependent tests/
}

echo "== ruff"
"$PY" -m ruff check .

echo "== triton 3.6 pass: started in the background (its output comes at the end)"
pass36 >"$logs/triton36.log" 2>&1 &
pass36_pid=$!

echo "== pytest-mpi: started in the background (its output comes after the main pass)"
mpiexec -n 2 --oversubscribe "$PY" -m pytest --with-mpi -q -p no:cacheprovider tests/test_mpi.py >"$logs/mpi.log" 2>&1 &
mpi_pid=$!

# eight workers (pytest-xdist) on two cores: most tests spend much of their time waiting (on their ranks, on a
# watchdog's deadline), so more workers than cores keep the cores busy (measured on this project's 2-core machine:
# 2 workers left them 40% idle; fresh clones took 9 min 41 s to 10 min 8 s in all with 3 workers, 8 min 46 s with
# 4; later, with more tests that wait, 9 min 49 s and 10 min 1 s with 4 against 8 min 31 s with 6, each a fresh
# clone and a fresh HOME, triton 3.6 downloaded during the run); 8 since the forked processes no longer pay the
# interpreter's teardown (tests/forkserver.py), which left the cores idle while the waiting tests ran: the main pass
# 538 s with 6 (cores 50-80% busy from its fifth minute on), 488 s with 8 (99% busy until its last minute), back to
# back, both all passed; TDT_TEST_WORKERS sets another count. Work stealing:
# a worker that runs out takes tests queued for another, so none idles at the end; each worker's first slice starts
# with its share of the known-slow tests and keeps a module fixture's tests together (tests/slow_first.py)
workers=${TDT_TEST_WORKERS:-8}
echo "== pytest (triton $("$PY" -c 'import triton; print(triton.__version__)'), $workers workers)"
main=0
"$PY" -m pytest -q -n "$workers" --dist worksteal --durations=15 "$@" || main=$?

echo "== pytest-mpi under mpiexec -n 2 (run beside the main pass; its output)"
mpi=0
wait "$mpi_pid" || mpi=$?
cat "$logs/mpi.log"

echo "== Triton-dependent tests under triton 3.6 (run beside the main pass; its output)"
t36=0
wait "$pass36_pid" || t36=$?
cat "$logs/triton36.log"
rm -rf "$logs"
echo "== exit status: pytest $main, pytest-mpi $mpi, triton 3.6 $t36"
[ "$main" -eq 0 ] && [ "$mpi" -eq 0 ] && [ "$t36" -eq 0 ]
