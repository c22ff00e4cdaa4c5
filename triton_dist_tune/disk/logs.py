"""Per-rank logs of one job and the summary that group rank 0 prints.

Each job writes into a folder of its own, ``<log folder>/<job>/``: ``rank-{i}.log`` (readable lines) and
``rank-{i}.jsonl`` (the same records as JSON lines: time, job, rank, host, level, message) for every rank. The log
folder is ``TRITON_DIST_AUTOTUNE_LOG_DIR`` or ``~/.triton_dist/logs``; the job is named by the launcher's job id
(``TORCHELASTIC_RUN_ID``, ``SLURM_JOB_ID``, ``PMIX_NAMESPACE``, ``OMPI_MCA_ess_base_jobid``), else by
``MASTER_PORT`` and the start time of the ranks' parent (torchrun's agent, mpiexec's daemon), else by the process.
``python -m triton_dist_tune logs`` merges the ranks' JSON lines of a job into one timeline.

Console output goes through the ``triton_dist_tune`` logger at INFO level with a handler of its own, on group
rank 0 only, when asked for with ``autotune_verbose=True`` or ``TRITON_PRINT_AUTOTUNING=1``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import settings
from ..records import Decision, Outcome

_lock = threading.Lock()
_file_loggers: dict[int, logging.Logger] = {}
_console: logging.Logger | None = None


def log_dir() -> Path:
    """The log folder: ``TRITON_DIST_AUTOTUNE_LOG_DIR``, or ``~/.triton_dist/logs``."""
    return settings.current().log_dir


def _parent_start() -> float | None:
    """The unix time the parent process started (Linux), which every rank a launcher started shares."""
    try:
        fields = Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 (starttime) of proc(5), counted after the command name
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


@functools.lru_cache(maxsize=1)
def job_name() -> str:
    """The name of this job's log folder, the same on every rank of the job (see the module docstring)."""
    launcher = settings.launcher()
    if launcher.job is not None:
        var, value = launcher.job
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{var.split('_')[0].lower()}-{value}")[:80]
    port = (launcher.master_port or "").strip()
    started = _parent_start() if port.isdigit() else None
    if started is None:
        port, started = "", time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    return f"{stamp}-port{port}" if port else f"{stamp}-pid{os.getpid()}"


def job_dir() -> Path:
    """This job's log folder."""
    return log_dir() / job_name()


def global_rank() -> int:
    """This process's rank in the whole job (torch.distributed, then launcher variables, else 0)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    rank = settings.launcher().rank
    return rank if rank is not None else 0


class JsonLines(logging.Formatter):
    """One JSON object per record: time (unix seconds), job, rank, host, level, message."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.fixed = {"job": job_name(), "rank": rank, "host": socket.gethostname()}

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"time": record.created, **self.fixed, "level": record.levelname,
                           "message": record.getMessage()}, default=str)


def rank_log() -> logging.Logger:
    """The logger that writes this process's ``rank-{i}.log`` and ``rank-{i}.jsonl`` in the job's log folder."""
    rank = global_rank()
    with _lock:
        logger = _file_loggers.get(rank)
        if logger is None:
            logger = logging.getLogger(f"triton_dist_tune.rank{rank}")
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
            folder = job_dir()
            handlers: list[logging.Handler]
            try:
                folder.mkdir(parents=True, exist_ok=True)
                handlers = [logging.FileHandler(folder / f"rank-{rank}.log"),
                            logging.FileHandler(folder / f"rank-{rank}.jsonl")]
            except OSError:
                handlers = [logging.NullHandler()]  # an unwritable log folder must not stop the job
            handlers[0].setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            if len(handlers) > 1:
                handlers[1].setFormatter(JsonLines(rank))
            for handler in handlers:
                logger.addHandler(handler)
            _file_loggers[rank] = logger
        return logger


def printing_enabled(verbose: bool | None) -> bool:
    """Whether to print summaries: ``autotune_verbose`` when given, else ``TRITON_PRINT_AUTOTUNING``."""
    return bool(verbose) if verbose is not None else settings.current().print_autotuning


def console() -> logging.Logger:
    """The logger for rank 0's console output (stderr, INFO)."""
    global _console
    with _lock:
        if _console is None:
            _console = logging.getLogger("triton_dist_tune.console")
            _console.setLevel(logging.INFO)
            _console.propagate = False
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
            _console.addHandler(handler)
        return _console


def format_table(outcomes: Sequence[Outcome], chosen: int | None) -> str:
    """A text table of outcomes: index, group median, spread, this rank's median, samples, state, config."""
    header = f"{'':2}{'#':>4}  {'group ms':>10}  {'spread':>7}  {'rank ms':>10}  {'n':>3}  {'status':<9} config"
    lines = [header]
    for o in outcomes:
        mark = "->" if o.index == chosen else ""
        group_ms = f"{o.time:.4f}" if o.time is not None else "-"
        spread = f"+-{100 * o.spread:.1f}%" if o.spread is not None else "-"
        own_ms = f"{o.own:.4f}" if o.own is not None else "-"
        status = "ok" if o.state == "measured" else o.state
        if o.resumed:
            status += "*"
        text = (f"{mark:2}{o.index:>4}  {group_ms:>10}  {spread:>7}  {own_ms:>10}  {o.samples:>3}  {status:<9} "
                f"{o.config}")
        if o.error:
            text += f"  [{o.error}]"
        lines.append(text)
    return "\n".join(lines)


def margin_text(decision: Decision) -> str:
    """How sure a decision is, in words: the margin over the runner-up, and whether it is a near-tie."""
    if decision.margin is None:
        return " (the only usable config)"
    tie = ", a near-tie" if decision.near_tie else ""
    return f" ({100 * decision.margin:.1f}% ahead of config {decision.runner_up}{tie})"


def group_title(group: Any) -> str:
    """A group as users know it: ``default`` (the default torch group), ``ranks [0, 2]`` (another torch group),
    or its own name (an mpi4py communicator, a process alone)."""
    ranks = getattr(group, "global_ranks", None)
    if ranks is None:
        return "this process alone" if group.name == "single" else str(group.name)
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        if dist.is_initialized() and group.name == c10d._get_process_group_name(dist.group.WORLD):
            return "default"
    except Exception:
        pass
    return f"ranks {list(ranks)}"


def print_summary(name: str, key_text: str, group: Any, decision: Decision, cache_file: Path) -> None:
    """Print a finished tuning on the console, in the form Triton users know, with where it was written."""
    console().info(
        "Triton autotuning for function %s,\nwith key as %s,\nfinished after %.2fs on %d rank(s) of group '%s' "
        "(%s timing, %d round(s)),\nbest config selected: %s%s;\n%s\ncache file: %s\nlogs: %s", name, key_text,
        decision.seconds, group.size, group_title(group), decision.timing, decision.rounds, decision.config,
        margin_text(decision), format_table(decision.outcomes, decision.index), cache_file, job_dir())


def print_cache_hit(name: str, key_text: str, group: Any, chosen: str, cache_file: Path) -> None:
    """Print that a key's decision was read from the cache."""
    console().info("Triton autotuning for function %s,\nwith key as %s: cache hit on %d rank(s) of group '%s',\n"
                   "config: %s\ncache file: %s", name, key_text, group.size, group_title(group), chosen, cache_file)


# -- reading a job's logs back (the command line's ``logs``) --------------------------------------------------


def job_folders(root: Path) -> list[Path]:
    """The job folders under the log folder ``root``, oldest first (by their last write)."""
    if not root.is_dir():
        return []
    folders = [p for p in root.iterdir() if p.is_dir() and any(p.glob("rank-*.jsonl"))]
    return sorted(folders, key=lambda p: (max(f.stat().st_mtime for f in p.glob("rank-*.jsonl")), p.name))


def read_job(folder: Path) -> tuple[list[dict[str, Any]], int]:
    """Every rank's JSON-lines records of the job in ``folder``, merged in time order (ties: by rank), and the
    number of damaged lines skipped (a rank killed mid-write leaves a torn last line)."""
    records, damaged = [], 0
    for path in sorted(folder.glob("rank-*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict) and isinstance(record.get("time"), (int, float)) and "message" in record:
                records.append(record)
            elif line.strip():
                damaged += 1
    records.sort(key=lambda r: (r["time"], r.get("rank", 0)))
    return records, damaged


def render_record(record: dict[str, Any]) -> str:
    """One record as a timeline line: time, rank, level, message (continuation lines indented)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(record["time"])) + f".{int(record['time'] * 1000) % 1000:03d}"
    head = f"{stamp} rank {record.get('rank', '?'):>2} {record.get('level', 'INFO'):<7} "
    return head + str(record["message"]).replace("\n", "\n" + " " * len(head))
