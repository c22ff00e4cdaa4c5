"""``triton-dist-tune campaign``: run a tuning campaign from the command line, under torchrun or mpiexec.

``torchrun --nproc-per-node 8 -m triton_dist_tune campaign pkg.kernels:gemm_fn --calls pkg.kernels:build
--keys 1 2 4 8 16 --rank-local`` imports the decorated function and the builder of its calls (``module:name``, or
``path/to/file.py:name``), starts the job's default group (``init_distributed``) when a launcher started several
ranks, runs :func:`~triton_dist_tune.campaign` and prints its summary on rank 0 (``--json FILE`` writes it).

Every option name here must stay clear of torchrun's: torchrun's parser reads each ``--word`` of the whole command
line, and one that is a prefix of a torchrun option (argparse accepts abbreviations) is taken as that option or
rejected as ambiguous, even after the module name. ``--local`` was such a prefix (``--local-addr``,
``--local-ranks-filter``), hence ``--rank-local``; ``--local`` is still read when torchrun is not in the way.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..disk import logs
from ..errors import AutotuneError, BadInputError, MismatchError, describe_error
from ..group.dist import backend_problem
from .common import UsageError, at_least_one


class LoadError(ValueError):
    """A ``MODULE:NAME`` or ``FILE.py:NAME`` that names nothing importable: a one-line command-line error."""


def load(spec: str) -> Any:
    """The object named by ``module:name`` or ``file.py:name``; :class:`LoadError` when the module, the file or
    the name is missing (an error raised while the module runs is the module's own, and propagates)."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise LoadError(f"{spec!r} is not MODULE:NAME or FILE.py:NAME")
    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise LoadError(f"{spec!r}: no file {path}")
        sys.path.insert(0, str(path.parent))
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise LoadError(f"{spec!r}: cannot import {where}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[path.stem] = module
        module_spec.loader.exec_module(module)
    else:
        sys.path.insert(0, str(Path.cwd()))
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (where == exc.name or where.startswith(exc.name + ".")):
                raise  # the module exists but imports something missing: its own traceback says what
            raise LoadError(f"{spec!r}: no module named {exc.name!r} (from the current folder {Path.cwd()} or "
                            "sys.path; run from the folder that holds it, or give FILE.py:NAME)") from None
    try:
        return getattr(module, name)
    except AttributeError:
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        raise LoadError(f"{spec!r}: module {where!r} has no {name!r} (it has: {', '.join(public[:12])}"
                        f"{', ...' if len(public) > 12 else ''})") from None


def _key(text: str) -> Any:
    """A key from the command line: JSON (lists become tuples), else the text itself when it is a plain word; text
    that starts like JSON (``[``, ``{``, ``"``) but does not parse is a :class:`LoadError`, not a string key."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        if text.lstrip()[:1] in ("[", "{", '"'):
            raise LoadError(f"--keys: {text!r} is not valid JSON ({exc}); quote each key for the shell, e.g. "
                            "'[16, 4096]'") from None
        return text
    return _tuple(value)


def _tuple(value: Any) -> Any:
    """JSON lists as tuples (hashable keys), nested too."""
    return tuple(_tuple(v) for v in value) if isinstance(value, list) else value


#: ``--group-size``'s type: a whole number of ranks, at least 1
GROUP_SIZE = at_least_one("a whole number of ranks", "a group holds at least 1 rank")


def _check_summary_file(path: Path) -> None:
    """``--json``'s file can be written: its folder exists and it is not a folder itself; else a
    :class:`UsageError`."""
    if not path.parent.is_dir():
        raise UsageError(f"--json {path}: no folder {path.parent} to write the summary into")
    if path.is_dir():
        raise UsageError(f"--json {path}: a folder, not a file to write the summary into")


def _check_loaded(args: argparse.Namespace, tuned: Any, build: Any) -> None:
    """A :class:`LoadError` where the function is not one :func:`~triton_dist_tune.autotune` decorated, or the
    builder is not callable (``--keys`` are given to it). Before, both were said only once the job's group had
    started, by :func:`~triton_dist_tune.campaign` on every rank: under ``launch.sh``, after torchrun started the
    ranks, whose exit it then reported with its own traceback."""
    if not hasattr(getattr(tuned, "tuner", None), "decided"):
        raise LoadError(f"{args.function!r} is not a function decorated with triton_dist_tune.autotune (a campaign "
                        "tunes one; a contextual_autotune function is tuned by its own calls)")
    if not callable(build):
        raise LoadError(f"--calls {args.calls!r} is a {type(build).__name__}, not a function: --keys are given to "
                        "it, build(key) returning the call's arguments")


def _check_backend(name: str | None) -> None:
    """A :class:`UsageError` where ``--backend`` names no backend torch has (:func:`~..group.dist.backend_problem`).
    Before, torch's own error in every rank's ``init_process_group``: a traceback each, then torchrun's."""
    problem = backend_problem(name)
    if problem is not None:
        raise UsageError(f"--backend {problem}")


def _check_group_size(size: int | None, world: int) -> None:
    """A :class:`UsageError` when ``--group-size`` does not divide the job's ``world`` ranks."""
    if size is not None and world % size:
        raise UsageError(f"--group-size {size} does not divide the {world} rank(s) of the job")


def tell_torchrun(text: str) -> None:
    """Write ``text`` into this rank's torchrun error file (``TORCHELASTIC_ERROR_FILE``, set by torchrun for each
    rank it starts), in the form torchrun reads: its report of the failed ranks ("ChildFailedError") then shows it
    as each rank's traceback, not a link on how to record one. Torchrun reports any rank that exits non-zero that
    way, with its own traceback: no exit status avoids it (``launch.sh`` checks the input before torchrun starts).
    Nothing where the variable is unset or the file cannot be written."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    stamp = str(int(time.time()))
    try:
        Path(path).write_text(json.dumps({"message": {"message": text, "extraInfo": {"py_callstack": text,
                                                                                     "timestamp": stamp}}}))
    except OSError:
        pass


def _groups(size: int) -> tuple[Any, Any]:
    """Groups of ``size`` consecutive ranks and the replica groups linking their positions: (mine, my replicas)."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    groups = [dist.new_group(list(range(s, s + size))) for s in range(0, world, size)]
    replicas = [dist.new_group(list(range(p, world, size))) for p in range(size)]
    return groups[rank // size], replicas[rank % size]


def cmd_campaign(args: argparse.Namespace) -> int:
    """``campaign``: check the keys and load the function and builder, start the group, tune; 1 on rank 0 when some
    key failed, once it has written ``--json``, 0 on the other ranks. (When every rank exited 1, the first to exit
    had torchrun's agent or mpiexec end the others, rank 0 among them, maybe before its write: a slow disk lost the
    summary, and torchrun's report showed each rank failed, with a SIGTERM or its hint on tracebacks;
    tests/test_cli_audit.py.) A campaign that stops on the library's own error ends as :func:`stopped` says."""
    import triton_dist_tune as tdt
    from triton_dist_tune import settings

    launcher = settings.launcher()
    keys = [_key(k) for k in args.keys]  # bad input fails before the ranks start a group
    tuned, build = load(args.function), load(args.calls)
    _check_loaded(args, tuned, build)
    _check_backend(args.backend)
    if args.json and (launcher.rank or 0) == 0:  # the rank that writes it says so now, not after the whole campaign
        _check_summary_file(Path(args.json))  # (the launcher ends the others)
    if args.check_only is not None:  # launch.sh, before torchrun starts the ranks: with the job's size where it
        if args.check_only > 0:  # knows it (not for an elastic NNODES=MIN:MAX), --group-size against it too
            _check_group_size(args.group_size, args.check_only)
        return 0
    world = launcher.world_size or 1  # the launcher's, the same on every rank: each refuses alike, before the group
    _check_group_size(args.group_size, world)
    name = getattr(getattr(tuned, "tuner", None), "name", None) or args.function
    started = world > 1 and not _group_started()  # (main() called in a process whose group is its own: kept)
    if world > 1:
        try:
            tdt.init_distributed(backend=args.backend)
        except AutotuneError as exc:  # a rank that never joined, a store not reached: this rank's own view
            return not_started(name, exc, launcher.rank or 0)
    pg = replicas = None
    if args.group_size is not None and args.group_size < world:
        pg, replicas = _groups(args.group_size)
    build = with_group(build, pg if pg is not None else _default_group())
    try:
        summary = tdt.campaign(tuned, build, keys, local=True if args.local else None, pg=pg, replicas=replicas)
    except AutotuneError as exc:  # the library's own: one line (an error of any other kind is a bug's: its traceback)
        if started and isinstance(exc, AGREED):
            _destroy_group()
        return stopped(name, exc, launcher.rank or 0)
    if started:
        _destroy_group()
    if (launcher.rank or 0) != 0:
        return 0  # every rank holds the same summary: rank 0 alone writes it and says how the campaign ended (below)
    if args.json:
        Path(args.json).write_text(json.dumps(summary.to_json(), indent=1, default=str))
    if not summary.failed:
        return 0
    text = (f"triton-dist-tune: campaign {summary.function}: {len(summary.failed)} of {len(summary.rows)} key(s) "
            f"failed: {', '.join(row.key for row in summary.failed)} (the summary holds each error)")
    print(text, file=sys.stderr)
    tell_torchrun(text)
    return 1


def with_group(build: Any, group: Any) -> Any:
    """``build`` given ``group`` as its ``group`` keyword where it takes one (a parameter of that name, not
    positional-only): the group the function's collectives run on, which the command made (``--group-size``: this
    rank's group of consecutive ranks; else the default group, or None in a job of one process), so a builder has
    no other way to name it. Any other ``build`` (a list of calls, a builder without that parameter) is returned
    as it is."""
    try:
        parameter = inspect.signature(build).parameters.get("group") if callable(build) else None
    except (TypeError, ValueError):  # a callable whose signature Python cannot read: called as it is
        parameter = None
    if parameter is None or parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
        return build
    return functools.partial(build, group=group)


def _default_group() -> Any:
    """torch.distributed's default group where it exists, else None (a job of one process)."""
    import torch.distributed as dist

    return dist.group.WORLD if _group_started() else None


def _group_started() -> bool:
    """Whether torch.distributed's default group exists already (the command was called in a process that made it)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _destroy_group() -> None:
    """Destroy the job's group this command started (not one its process had made before), once the campaign
    ended alike on every rank (a summary, or an :data:`AGREED` error): a process that exits with a gloo group alive
    can end in ``terminate called without an active exception`` (SIGABRT: torch's gloo threads at the interpreter's
    end, pytorch/pytorch#190489; once in 80 jobs of ``benchmarks/chaos.py``). Not after a rank's own error: its
    peers may still be inside the group's collectives."""
    import torch.distributed as dist

    try:
        dist.destroy_process_group()
    except Exception as exc:  # its end is the process's: said in the log, never in the way of the exit status
        logs.rank_log().warning("campaign: could not destroy the job's group: %s", describe_error(exc))


#: the errors a campaign raises on every rank alike, with the same message (agreed before any rank raises them: keys
#: that differ between ranks, a call some rank cannot build, an exchange's refused row): rank 0 says them for the job
AGREED = (BadInputError, MismatchError)


def stopped(name: str, exc: AutotuneError, rank: int) -> int:
    """End the campaign of function ``name`` on ``exc``, an error of the library's own that it raised on this rank
    (global ``rank``); the exit status. Before, it left the command as a traceback on every rank (a
    :class:`~triton_dist_tune.BadInputError`, a ValueError, as one line per rank taken for a bad command-line value,
    exit status 2 on every rank): tests/test_cli_campaign_errors.py.

    An error of :data:`AGREED` is said by rank 0 alone, in one line (in torchrun's error file too), exit status 1;
    the other ranks print nothing and exit 0, as for failed keys (:func:`cmd_campaign`): no rank's exit has torchrun
    end rank 0 before it has spoken. Any other (a unit lost, :class:`~triton_dist_tune.RankFailedError`: this rank's
    own view, which the others may never reach) is one line on every rank that raised it, naming the rank, exit
    status 1. Every rank's log keeps the error."""
    logs.rank_log().error("campaign %s stopped: %s", name, describe_error(exc))
    agreed = isinstance(exc, AGREED)
    if agreed and rank != 0:
        return 0
    text = str(exc).removeprefix("triton_dist_tune: ").removeprefix(f"campaign {name}: ")
    if agreed:
        text += " (every rank stopped here: fix it and run the campaign again)"
    elif "rerun" not in text.lower():
        text += " (rerun the campaign: the keys decided so far are in the cache)"
    line = f"triton-dist-tune: campaign {name} stopped{'' if agreed else f' on rank {rank}'}: " \
           f"{type(exc).__name__}: {text}"
    print(line, file=sys.stderr)
    tell_torchrun(line)
    return 1


def not_started(name: str, exc: AutotuneError, rank: int) -> int:
    """End the campaign of function ``name`` whose job's group did not start on this rank (global ``rank``):
    ``init_distributed`` raised ``exc`` (a rank that never joined within ``..._INIT_TIMEOUT``, a store not reached,
    a launcher's variable that is not a number); one line on this rank, exit status 1. Before, a Python traceback,
    after 600 s that no variable changed: tests/test_cli_campaign_errors.py."""
    logs.rank_log().error("campaign %s did not start: %s", name, describe_error(exc))
    line = f"triton-dist-tune: campaign {name} could not start on rank {rank}: {type(exc).__name__}: {exc}"
    print(line, file=sys.stderr)
    tell_torchrun(line)
    return 1


def add_parser(sub: Any) -> None:
    """Register ``campaign`` on the command line's subparsers."""
    p = sub.add_parser("campaign", help="tune a function at many keys, spread over the job's ranks (run it under "
                       "torchrun or mpiexec)")
    p.add_argument("function", help="the function decorated with autotune: MODULE:NAME or FILE.py:NAME")
    p.add_argument("--calls", required=True, help="calls(key) -> the call's arguments (MODULE:NAME or FILE.py:NAME); "
                   "calls(key, group) is given the group the function's collectives run on")
    p.add_argument("--keys", nargs="+", required=True, help="the keys given to --calls (JSON values, e.g. 16 "
                   "'[16, 4096]')")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--rank-local", dest="local", action="store_true", help="the function talks to no other "
                       "rank: every rank tunes its share of the keys alone")
    # the former name: under torchrun it is taken for an abbreviation of torchrun's --local-addr/--local-ranks-filter
    scope.add_argument("--local", dest="local", action="store_true", help=argparse.SUPPRESS)
    scope.add_argument("--group-size", type=GROUP_SIZE, help="the function is collective over groups of this many "
                       "consecutive ranks: the keys are split between the groups (replicas)")
    p.add_argument("--backend", help="torch.distributed backend (default: nccl with CUDA, else gloo)")
    p.add_argument("--json", metavar="FILE", help="write the summary as JSON (rank 0)")
    # launch.sh's check before torchrun starts: load the function and the builder, read the keys, check --group-size
    # against the job's world size (its value; 0 or none: not known), run nothing
    p.add_argument("--check-only", nargs="?", const=0, type=int, metavar="WORLD", help=argparse.SUPPRESS)
    p.set_defaults(run=cmd_campaign)
