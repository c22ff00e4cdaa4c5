#!/usr/bin/env bash
# Start one rank per GPU (or N CPU ranks) of a Python script or module under torchrun.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bash launch.sh [--nproc N] [--cpu] script.py [args...]
       bash launch.sh [--nproc N] [--cpu] -m package.module [args...]

Runs script.py (or, with -m, a module, as python -m does) under torchrun, one process per rank (a script that
is not a file, or a module python -m would not find from here with this checkout on PYTHONPATH, is one line and
exit status 2 before anything starts):
  * with GPUs: one rank per visible GPU (NCCL), unless --nproc N says otherwise;
  * without GPUs (or with --cpu): N CPU ranks (default 2) with gloo and TRITON_INTERPRET=1.
One rank on one node (one GPU, or --nproc 1) runs without torchrun's agent: the script itself, with the variables
torchrun would give it (RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, MASTER_ADDR=127.0.0.1, a free MASTER_PORT).
Always exports NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(NVLink multicast stays off), and OMP_NUM_THREADS=1 unless it is set.
First installs what the ranks need where it is missing (scripts/ensure_env.sh --launch): where torch and triton
are importable, nothing is downloaded: this package (with its console script triton-dist-tune) is installed
without build isolation or dependencies, or, where pip cannot, the ranks run from this checkout, and one line
says which; where torch or triton is missing, everything (torch, this package with its test, mpi and plot extras,
Open MPI). The ranks then run this checkout's code (PYTHONPATH), whatever copy of the package is installed; where
pip's install (or what a plain python imports) is another copy, launch.sh says so on stderr, naming both. With -m triton_dist_tune campaign, the campaign's
MODULE:NAME, --calls, --keys, --backend and --group-size (against the job's ranks) are checked before torchrun
starts. Arguments that ask for help (-h or --help) run the
script or module once, as one process, not on every rank: its help is printed once. A script (or module) that
opts in, as the examples do (at its top level: LAUNCH_CHECKS_ARGUMENTS = True, and parse_arguments(argv) taking the
arguments after the script's name), has its arguments checked by that function once before torchrun starts
(scripts/check_args.py; it imports the script): a wrong one is its usage error once and exit status 2. Any other
script is not imported nor checked here; where the check cannot tell (the import fails or exits), the ranks start.

Multi-node: set NNODES, with NODE_RANK, MASTER_ADDR and MASTER_PORT (default 29500), on every node; they are
passed to torchrun as --nnodes/--node-rank/--master-addr/--master-port (checked first: a value torchrun
cannot start from is one line and exit status 2). Without NNODES, --standalone is used, and a
MASTER_ADDR or MASTER_PORT left in the environment is ignored.
Environment: PYTHON (default python3) picks the interpreter.
EOF
}

nproc=""
force_cpu=0
module=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nproc) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; nproc="$2"; shift 2 ;;
    --nproc=*) nproc="${1#--nproc=}"; shift ;;
    --cpu) force_cpu=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -m) module=1; shift; break ;;
    --) shift; break ;;
    -*) echo "launch.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
done
if [[ $# -lt 1 ]]; then
  usage >&2
  exit 2
fi
if [[ -n "$nproc" && ! "$nproc" =~ ^[1-9][0-9]*$ ]]; then
  echo "launch.sh: --nproc needs a positive integer, got '$nproc'" >&2
  exit 2
fi

count_gpus() {
  if [[ "${CUDA_VISIBLE_DEVICES+set}" == set ]]; then
    # An explicit (possibly empty) list decides.
    local list="${CUDA_VISIBLE_DEVICES//[[:space:]]/}"
    [[ -z "$list" || "$list" == "-1" ]] && { echo 0; return; }
    awk -F, '{print NF}' <<<"$list"
  elif command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
  else
    "${PYTHON:-python3}" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0
  fi
}

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# torchrun sets 1 thread per rank itself, with a banner; setting it here keeps its output quiet
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

gpus=0
[[ $force_cpu -eq 1 ]] || gpus="$(count_gpus)"
if [[ "$gpus" -gt 0 ]]; then
  nproc="${nproc:-$gpus}"
else
  # CPU ranks: hide GPUs so that the scripts pick gloo, and run Triton kernels in its interpreter.
  export CUDA_VISIBLE_DEVICES="" TRITON_INTERPRET=1
  nproc="${nproc:-2}"
fi

# multi-node only where NNODES says so: a MASTER_ADDR alone is often left over from another tool, not a request
if [[ -n "${NNODES:-}" ]]; then
  # each read without the spaces around it, and checked here: one line and exit status 2 before anything starts
  # (before: torchrun's traceback for a malformed one; a NODE_RANK not below NNODES waited, silent, for nodes that
  # never come)
  trim() { local v="$1"; v="${v#"${v%%[![:space:]]*}"}"; printf '%s' "${v%"${v##*[![:space:]]}"}"; }
  NNODES="$(trim "$NNODES")"
  node_rank="$(trim "${NODE_RANK:-0}")"
  master_port="$(trim "${MASTER_PORT:-29500}")"
  if [[ ! "$NNODES" =~ ^[1-9][0-9]{0,5}(:[1-9][0-9]{0,5})?$ ]]; then
    echo "launch.sh: NNODES='$NNODES' is not a number of nodes (N, or MIN:MAX for an elastic job)" >&2
    exit 2
  fi
  if [[ ! "$node_rank" =~ ^[0-9]{1,6}$ ]] || (( 10#$node_rank >= 10#${NNODES#*:} )); then
    echo "launch.sh: NODE_RANK='$node_rank' is not a node of NNODES=$NNODES (0 to $((10#${NNODES#*:} - 1)), another on each node)" >&2
    exit 2
  fi
  if [[ ! "$master_port" =~ ^[0-9]{1,5}$ ]] || (( 10#$master_port < 1 || 10#$master_port > 65535 )); then
    echo "launch.sh: MASTER_PORT='$master_port' is not a port: a whole number from 1 to 65535" >&2
    exit 2
  fi
  rdzv=(--nnodes "$NNODES" --node-rank "$((10#$node_rank))"
        --master-addr "$(trim "${MASTER_ADDR:-127.0.0.1}")" --master-port "$((10#$master_port))")
else
  rdzv=(--standalone)
fi

script="$1"
shift
wants_help=0  # the script's (or module's) -h/--help: printed by one process, not by every rank
for arg in "$@"; do
  [[ "$arg" == -- ]] && break
  if [[ "$arg" == -h || "$arg" == --help ]]; then wants_help=1; break; fi
done
if [[ $module -eq 0 && ! -f "$script" ]]; then
  # one line, before anything is installed or started (not python's error from every rank, then torchrun's traceback)
  echo "launch.sh: no script at '$script'$([[ -e "$script" ]] && echo " (not a file)") (from $PWD; -m runs a module)" >&2
  exit 2
fi
# this checkout: the folder of launch.sh itself, not of a symbolic link to it (readlink -f, or, where readlink has
# no -f, the links followed one at a time)
self="${BASH_SOURCE[0]}"
if resolved="$(readlink -f -- "$self" 2>/dev/null)" && [[ -n "$resolved" ]]; then
  self="$resolved"
else
  while [[ -L "$self" ]]; do
    link="$(readlink -- "$self")"
    [[ "$link" == /* ]] || link="$(dirname -- "$self")/$link"
    self="$link"
  done
fi
here="$(cd "$(dirname -- "$self")" && pwd)"
# A fresh machine: install what the ranks need where it is missing (never a download they do not need: see the usage
# above), judged by what is installed, not by what this script's PYTHONPATH below makes importable.
PYTHON="${PYTHON:-python3}" bash "$here/scripts/ensure_env.sh" --launch
# Which copy of the package is installed (pip's record: an editable checkout's folder, or site-packages) and which
# one a plain python, torchrun or the console script imports (the caller's PYTHONPATH, without this script's).
# Where either is not this checkout, say so loudly: the ranks started below run this checkout, those commands not.
copies="$("${PYTHON:-python3}" - "$here" 2>/dev/null <<'PYEOF' || true
import importlib.metadata as m, importlib.util, json, os, sys
here = os.path.realpath(sys.argv[1])
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]  # not the current folder: what is installed
try:
    dist = m.distribution("triton-dist-tune")
    url = json.loads(dist.read_text("direct_url.json") or "{}")
    editable = url.get("dir_info", {}).get("editable") and url.get("url", "").startswith("file://")
    installed = os.path.realpath(url["url"][len("file://"):]) if editable else os.path.realpath(
        str(dist.locate_file("")))
    installed_text = f"installed (pip) from {installed}" + (" (editable)" if editable else "")
except m.PackageNotFoundError:
    installed, installed_text = None, "not installed (pip)"
spec = importlib.util.find_spec("triton_dist_tune")
imported = os.path.dirname(os.path.dirname(os.path.realpath(spec.origin))) if spec and spec.origin else None
not_installed = installed is None and imported in (None, here)  # ensure_env said so: the ranks run this checkout
if not not_installed and (installed != here or imported != here):
    print(f"the triton-dist-tune package is {installed_text}; a plain python imports "
          + (f"triton_dist_tune from {imported}" if imported else "no triton_dist_tune"))
PYEOF
)"
if [[ -n "$copies" ]]; then
  {
    echo "launch.sh: NOTE: this checkout is $here, but $copies."
    echo "launch.sh: the ranks started here run this checkout's code (PYTHONPATH); torchrun, python and the"
    echo "launch.sh: triton-dist-tune command started by hand run that other copy. To install this checkout instead:"
    echo "launch.sh:   ${PYTHON:-python3} -m pip install -e '$here[test,mpi,plot]'"
  } >&2
fi
# The ranks run this checkout's code, whatever copy of the package is installed (an edit needs no reinstall).
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
target=("$script")
[[ $module -eq 1 ]] && target=(-m "$script")  # torchrun's -m: run the module as python -m does
if [[ $module -eq 1 ]]; then
  # a module that is not there: one line and exit status 2 here, not python's "No module named" from every rank and
  # then torchrun's traceback. Looked up as the ranks' python -m will: this interpreter, the current folder first,
  # then this checkout (PYTHONPATH), as a script on stdin has them. The dotted name is followed through its
  # packages' folders without importing them; only where that finds nothing does importlib.util.find_spec look
  # again, which imports the parent packages (as python -m does: their side effects happen here once, and an error
  # of their own, not a missing module, is left to the ranks to show). A package runs as its __main__ module.
  found=0
  "${PYTHON:-python3}" - "$script" <<'PYEOF' || found=$?
import importlib.machinery, importlib.util, os, sys
name = sys.argv[1]
def walked(name):
    """The spec found folder by folder, importing nothing; None where the walk finds nothing."""
    path = None
    for part in name.split("."):
        spec = importlib.machinery.PathFinder.find_spec(part, path) if path or path is None else None
        if spec is None:
            return None
        path = spec.submodule_search_locations or []
    return spec
def missing(name):
    """Why python -m cannot run ``name`` (one line), or None where it can (or where only importing it can tell)."""
    if not name or name.startswith(".") or not all(p.isidentifier() for p in name.split(".")):
        return f"'{name}' is not a module name (python -m takes an absolute dotted name, as package.module)"
    spec = walked(name)
    if spec is None:
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name + ".").startswith(exc.name + "."):
                return f"no module named '{exc.name}'" + (f" (for '{name}')" if exc.name != name else "")
            return None  # a parent package failed to import something else: the ranks say what
        except Exception:
            return None  # the same: an error of the package's own code, left to the ranks to show
    if spec is None:
        return f"no module named '{name}'"
    if spec.submodule_search_locations is not None:  # a package: python -m runs its __main__
        if importlib.machinery.PathFinder.find_spec("__main__", list(spec.submodule_search_locations)) is None:
            return f"'{name}' is a package without a __main__ module: python -m cannot run it"
    return None
why = missing(name)
if why:
    print(f"launch.sh: {why} (from {os.getcwd()}, with this checkout on PYTHONPATH; a script is named without -m)",
          file=sys.stderr)
    sys.exit(2)
PYEOF
  [[ $found -ne 2 ]] || exit 2  # (any other failure of this check leaves the module to the ranks)
fi
one_rank=0  # one rank on one node: started below without torchrun's agent
[[ "$nproc" -eq 1 && "${rdzv[0]}" == --standalone ]] && one_rank=1
if [[ $# -gt 0 && $wants_help -eq 0 && $one_rank -eq 0 ]]; then
  # a script's arguments, checked once here where it opts in (LAUNCH_CHECKS_ARGUMENTS = True and parse_arguments(argv),
  # as the examples do): a wrong one is its usage error once and argparse's exit status 2, not that error from every
  # rank followed by torchrun's ChildFailedError traceback (scripts/check_args.py; any other script, or no arguments:
  # not imported, nothing checked)
  checked=0
  if [[ $module -eq 1 ]]; then
    "${PYTHON:-python3}" "$here/scripts/check_args.py" -m "$script" "$@" || checked=$?
  else
    "${PYTHON:-python3}" "$here/scripts/check_args.py" "$script" "$@" || checked=$?
  fi
  [[ $checked -eq 0 ]] || exit "$checked"
fi
if [[ $module -eq 1 && "$script" == triton_dist_tune && "${1:-}" == campaign && $wants_help -eq 0 ]]; then
  # a campaign's input (MODULE:NAME, --keys, --group-size against the job's ranks) is checked once here: a mistake
  # is its one-line message and exit status 2, not that message from every rank followed by torchrun's traceback of
  # the failed ranks. The job's size: ranks per node times nodes (0, not known, for an elastic NNODES=MIN:MAX).
  world="$nproc"
  if [[ -n "${NNODES:-}" ]]; then
    if [[ "$NNODES" =~ ^[1-9][0-9]*$ ]]; then world=$((nproc * NNODES)); else world=0; fi
  fi
  "${PYTHON:-python3}" -m triton_dist_tune "$@" --check-only "$world" || exit $?
fi
if [[ $wants_help -eq 1 || $one_rank -eq 1 ]]; then
  # One rank on one node: start it as torchrun would (its variables, a free port for the store rank 0 hosts), without
  # torchrun's agent, a second Python that imports torch (about 4 s of every one-GPU command). Help: one process too.
  # The port is free now and outside the kernel's range of ephemeral ports: the rank binds it seconds later (after
  # importing torch), and a port the kernel hands out (bind to 0, or any outgoing connection's own end) could be
  # taken meanwhile by another process's connection (EADDRINUSE: seen beside a busy test suite).
  port="$("${PYTHON:-python3}" - <<'PICK'
import random, socket
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split()[:2])
except (OSError, ValueError):
    low, high = 32768, 60999
ports = [p for p in range(20000, 65536) if not low <= p <= high] or list(range(20000, 65536))
random.shuffle(ports)
for port in ports[:200]:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(port)
        break
else:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])
PICK
)"
  export RANK=0 LOCAL_RANK=0 GROUP_RANK=0 ROLE_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 GROUP_WORLD_SIZE=1 \
    ROLE_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
  exec "${PYTHON:-python3}" "${target[@]}" "$@"
fi
exec "${PYTHON:-python3}" -m torch.distributed.run "${rdzv[@]}" --nproc-per-node "$nproc" "${target[@]}" "$@"
