"""Per-rank logs and the summary that group rank 0 prints.

Every rank writes ``rank-{i}.log`` (readable lines) and ``rank-{i}.jsonl`` (the same records as JSON lines: time,
job, rank, host, level, message) into the log folder: ``./.autotune_logs`` in the job's working directory, as
Triton-distributed documents, or ``TRITON_DIST_AUTOTUNE_LOG_DIR``. A process's records start with a header naming
its job (a readable ``==== triton-dist-tune job ... ====`` line, a JSON record with ``"header": true``); the job is
named by the launcher's job id (``TORCHELASTIC_RUN_ID``, ``SLURM_JOB_ID``, ``PMIX_NAMESPACE``,
``OMPI_MCA_ess_base_jobid``), else by ``MASTER_PORT`` and the start time of the ranks' parent (torchrun's agent,
mpiexec's daemon) where the job has several ranks, else by the process. The folder keeps the last :data:`KEEP_JOBS`
jobs, counted as jobs (a job of one process and a job of eight count alike): when a process opens its files, the
records of older jobs are dropped from every rank's files together, so that a kept job keeps all its ranks (a folder
where jobs start again and again does not grow without bound; a file left without records is removed). A file some
running process writes to is never rewritten, replaced or unlinked: every writer holds a shared ``flock`` on its
files for its lifetime, and a job with records in such a file is kept until the file is free (the folder may then
hold more jobs for a while). Rotations in one folder take turns (an exclusive ``flock`` on the folder), lock each
file before they read it and write through temporary files of their own. Logging never waits for a lock more than
:data:`LOCK_WAIT_S`: a process that cannot have the folder's rotation lock in time (another process rotates it
slowly, or was stopped while rotating) does not rotate and writes ``rank-{i}.{job}.log`` and ``.jsonl`` instead,
files of its job that no rotation holds at that time (one warning says so); later rotations count their records with
the others. A process that cannot lock even those (a rare double stall) logs nothing. ``python -m triton_dist_tune
logs`` merges the ranks' JSON lines of a job into one timeline (:mod:`.timeline`).

Console output goes through the ``triton_dist_tune`` logger at INFO level with a handler of its own, on group
rank 0 only, when asked for with ``autotune_verbose=True`` or ``TRITON_PRINT_AUTOTUNING=1``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import settings
from ..records import LEAST, MEDIAN, Decision, Outcome
from .files import flock_within
from .identity import global_rank as global_rank
from .identity import job_name as job_name
from .rotation import LOCK_WAIT_S as LOCK_WAIT_S
from .rotation import _LogFile as _LogFile
from .rotation import _rotation_lock
from .rotation import keep_last_jobs as keep_last_jobs
from .rotation import rotate as rotate

_lock = threading.Lock()
log = logging.getLogger("triton_dist_tune")
_file_loggers: dict[int, logging.Logger] = {}
_console: logging.Logger | None = None
_folder: Path | None = None

#: jobs whose records a rank's log files keep
KEEP_JOBS = 5
#: the files of this process, kept open with a shared lock on each (see the module docstring)
_held: list[Any] = []
#: rank -> why its log folder could not be written (said once, in a warning, and in the summaries)
_unwritable: dict[int, str] = {}


def log_dir() -> Path:
    """The log folder as the environment says now: ``TRITON_DIST_AUTOTUNE_LOG_DIR``, or ``.autotune_logs`` in the
    working directory (absolute)."""
    return settings.current().log_dir.absolute()


def log_folder() -> Path:
    """The folder this process writes its rank logs to (:func:`log_dir` when it first logged: a later ``chdir``
    does not split a rank's logs)."""
    return _folder if _folder is not None else log_dir()


def logs_text() -> str:
    """Where this rank's logs are, for a summary: the folder, or that it could not be written (and why)."""
    problem = _unwritable.get(global_rank())
    return str(log_folder()) if problem is None else f"none written ({log_folder()}: {problem})"


class JsonLines(logging.Formatter):
    """One JSON object per record: time (unix seconds), job, rank, host, level, message; and ``breakdown`` where the
    record carries one (a tuning's time line: :class:`~triton_dist_tune.records.TimeBreakdown` as JSON)."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.fixed = {"job": job_name(), "rank": rank, "host": socket.gethostname()}

    def format(self, record: logging.LogRecord) -> str:
        spent = getattr(record, "breakdown", None)
        return json.dumps({"time": record.created, **self.fixed, "level": record.levelname,
                           "message": record.getMessage(), **({"breakdown": spent} if spent else {})}, default=str)


def rank_log() -> logging.Logger:
    """The logger that writes this process's ``rank-{i}.log`` and ``rank-{i}.jsonl`` in the log folder (opened
    once per process, after dropping the records of all but the last jobs, and starting with a header; see
    :func:`_open_files` for a folder another process keeps locked). Logging is best effort: an unwritable or locked
    folder leaves the logger without a file, never stops or stalls the job."""
    global _folder
    rank = global_rank()
    with _lock:
        logger = _file_loggers.get(rank)
        if logger is None:
            logger = logging.getLogger(f"triton_dist_tune.rank{rank}")
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
            _folder = folder = log_folder()
            handlers: list[logging.Handler] = [logging.NullHandler()]
            try:
                folder.mkdir(parents=True, exist_ok=True)
                files = _open_files(folder, rank)
                if files:
                    _write_headers(files, rank)
                    handlers = [*files]
            except OSError as exc:  # an unwritable log folder must not stop the job, but is said, once
                _unwritable[rank] = f"{type(exc).__name__}: {exc.strerror or exc}"
                log.warning("triton_dist_tune: cannot write the rank logs into %s (%s); this process logs nothing "
                            "(set TRITON_DIST_AUTOTUNE_LOG_DIR to a writable folder)", folder, _unwritable[rank])
            handlers[0].setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            if len(handlers) > 1:
                handlers[1].setFormatter(JsonLines(rank))
            for handler in handlers:
                logger.addHandler(handler)
            _file_loggers[rank] = logger
        return logger


def warn(text: str, category: type[Warning], stacklevel: int = 1) -> None:
    """A warning of this rank: the rank's log file, and Python's warning (the console hears it once, and the warning
    filters apply) at ``stacklevel`` counted from the caller of this function, as :func:`warnings.warn` counts."""
    rank_log().warning(text)
    warnings.warn(text, category, stacklevel=stacklevel + 1)


def _open_files(folder: Path, rank: int) -> list[logging.FileHandler]:
    """This process's readable and JSON-lines log files, each with a shared lock held until the process ends:
    ``rank-{rank}.log``/``.jsonl``, opened after rotating the folder under its rotation lock; or, when that lock
    or theirs is not had within :data:`LOCK_WAIT_S`, ``rank-{rank}.{job}.log``/``.jsonl`` (without rotating the
    folder: a file a stalled rotation may replace is never written; one warning says so); none when even their
    locks are not had in time."""
    with _rotation_lock(folder) as held:  # no rank file of the folder is opened while another rotates it
        if held:
            rotate(folder, KEEP_JOBS)
            files = _open_held([folder / f"rank-{rank}.log", folder / f"rank-{rank}.jsonl"])
            if files:
                return files
    stem = f"rank-{rank}.{job_name()}"
    files = _open_held([folder / f"{stem}.log", folder / f"{stem}.jsonl"])
    instead = f"to {stem}.log and .jsonl instead" if files else "nothing (those files are locked too)"
    log.warning("triton_dist_tune: the log folder %s stayed locked for more than %.0f s (a slow or stopped log "
                "rotation by another process): this process logs %s", folder, LOCK_WAIT_S, instead)
    return files


def _open_held(paths: list[Path]) -> list[logging.FileHandler]:
    """Handlers appending to ``paths``, each holding a shared ``flock`` on its file until this process ends (no
    rotation rewrites or removes such a file); none, and no file left open, when a lock is not had within
    :data:`LOCK_WAIT_S`."""
    deadline = time.monotonic() + LOCK_WAIT_S
    handlers: list[logging.FileHandler] = []
    for path in paths:
        handler = _open_locked(path, deadline)
        if handler is None:
            for opened in handlers:
                opened.close()
            return []
        handlers.append(handler)
    _held.extend(handler.stream for handler in handlers)
    return handlers


def _open_locked(path: Path, deadline: float) -> logging.FileHandler | None:
    """A handler appending to ``path`` with a shared ``flock`` on the file ``path`` names, had by the monotonic
    ``deadline``, else None. A file that a rotation replaced or removed while this process waited for its lock is
    let go, and the file the path names now is opened instead."""
    while time.monotonic() < deadline:
        handler = _RankFile(path, errors="backslashreplace")  # text read from disk (a journal's error) may hold a
        # lone surrogate (JSON's "\ud800"), which no encoding writes: that record was lost, said as a full disk
        fd = handler.stream.fileno()
        if not flock_within(fd, fcntl.LOCK_SH, deadline):
            handler.close()
            return None
        with contextlib.suppress(OSError):
            if os.path.samestat(os.stat(path), os.fstat(fd)):
                return handler
        handler.close()
    return None


class _RankFile(logging.FileHandler):
    """A rank log file whose failed writes (a disk that fills up during the job) are said once per process, in one
    line, instead of logging's traceback per record; the job goes on, and the records it cannot write are lost."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        global _lost_records
        _lost_records += 1  # (two threads failing at once may both say it: no lock taken inside logging)
        if _lost_records == 1:
            exc = sys.exc_info()[1]
            why = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}" if exc is not None else "?"
            log.warning("triton_dist_tune: cannot write the rank log %s (%s; is the disk full?): this and later "
                        "records that cannot be written are lost (not said again)", self.baseFilename, why)

    def close(self) -> None:
        try:  # what is still buffered cannot be written either: lost, as said
            super().close()
        except OSError:
            pass


#: records of this process that its rank log files could not take (the first is said, in one line)
_lost_records = 0


def _write_headers(handlers: list[logging.FileHandler], rank: int) -> None:
    """The first record of this process in each file: which job, rank, host and process."""
    started = time.time()
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    host, job = socket.gethostname(), job_name()
    text, jsonl = handlers
    text.stream.write(f"==== triton-dist-tune job {job} rank {rank} host {host} pid {os.getpid()} started {when} "
                      "====\n")
    jsonl.stream.write(json.dumps({"time": started, "job": job, "rank": rank, "host": host, "level": "INFO",
                                   "message": f"job {job} rank {rank} pid {os.getpid()} started", "header": True})
                       + "\n")
    for handler in handlers:
        handler.flush()



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


def ms_text(value: float | None) -> str:
    """A time in ms for a table or a log line: 4 decimals, or ``-`` when there is none."""
    return "-" if value is None else f"{value:.4f}"


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows of text cells under ``header``, each column as wide as its widest cell, two spaces apart."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in (header, *rows))


#: what a decision's table says under it when its times are least samples (the tuner's summary, ``show``, ``list``)
LEAST_NOTE = "each config's time is its least sample, not its median: the race's samples were noisy"


def time_heading(statistic: str) -> str:
    """The heading of a table's time column: ``median ms``, or ``least ms`` for a decision whose times are least
    samples (:data:`~triton_dist_tune.records.LEAST`; said under the table by :data:`LEAST_NOTE`)."""
    return f"{LEAST if statistic == LEAST else MEDIAN} ms"


def format_table(outcomes: Sequence[Outcome], chosen: int | None, statistic: str = MEDIAN) -> str:
    """A text table of outcomes: index, group time (its median, or its least sample where ``statistic`` says so:
    then headed "group least ms", and :data:`LEAST_NOTE` under the table), spread, this rank's median, samples,
    state, config."""
    least = statistic == LEAST
    group, rank = (f"group {time_heading(LEAST)}", "rank median ms") if least else ("group ms", "rank ms")
    width = max(10, len(group), len(rank))
    header = f"{'':2}{'#':>4}  {group:>{width}}  {'spread':>7}  {rank:>{width}}  {'n':>3}  {'status':<9} config"
    lines = [header]
    for o in outcomes:
        mark = "->" if o.index == chosen else ""
        spread = f"+-{100 * o.spread:.1f}%" if o.spread is not None else "-"
        status = ("untimed" if o.untimed else "ok") if o.state == "measured" else o.state
        if o.resumed:
            status += "*"
        text = (f"{mark:2}{o.index:>4}  {ms_text(o.time):>{width}}  {spread:>7}  {ms_text(o.own):>{width}}  "
                f"{o.samples:>3}  {status:<9} {o.config}")
        if o.error:
            text += f"  [{o.error}]"
        lines.append(text)
    return "\n".join(lines + ([LEAST_NOTE] if least else []))


def faster_text(margin: float, runner_up: Any) -> str:
    """How much faster the choice is than the runner-up that took ``1 + margin`` times as long, as a person says
    it: ``2.0x faster than config 0 (49% less time)`` from 1.5x on, else ``4.8% less time than config 0``."""
    ratio = 1 + margin
    less = 100 * (1 - 1 / ratio) if ratio > 0 else 0.0
    if ratio >= 1.5:
        return f"{ratio:.1f}x faster than config {runner_up} ({less:.0f}% less time)"
    return f"{less:.1f}% less time than config {runner_up}"


def margin_text(decision: Decision) -> str:
    """How sure a decision is, in words: how much faster than the runner-up, and whether it is a near-tie."""
    if decision.untimed:
        return " (the only config of the key's space after pruning: run once, not timed)"
    if decision.margin is None:
        return " (the only usable config)"
    tie = ", a near tie: within the measured noise" if decision.near_tie else ""
    return f" ({faster_text(decision.margin, decision.runner_up)}{tie})"


def group_title(group: Any) -> str:
    """A group as users know it (its ``title``): ``default`` (the default torch group), ``ranks [0, 2]`` (another
    torch group), or its own name (an mpi4py communicator), ``this process alone``."""
    return str(getattr(group, "title", None) or group.name)


def print_summary(name: str, key_text: str, group: Any, decision: Decision, cache_file: Path | str) -> None:
    """Print a finished tuning on the console, in the form Triton users know, with where it was written
    (``cache_file``: the file, or why none was written). After a search, the configs it did not screen are counted,
    not listed."""
    shown = [o for o in decision.outcomes if not (decision.search and o.state == "pruned")]
    left = len(decision.outcomes) - len(shown)
    how = "timed on the device (CUDA graph replays)" if decision.clock == "graph" else "timed eagerly"
    how = ("not timed: one config, run once" if decision.untimed
           else f"{decision.timing} timing, {how}, {decision.rounds} round(s)")
    search = f"\n{decision.search}; {left} config(s) pruned or not screened" if decision.search else ""
    spent = f"\ntime: {decision.breakdown.text()}" if decision.breakdown is not None else ""
    cut = "\ncut short by the time budget: the best measured so far, provisional" if decision.cut else ""
    console().info(
        "Triton autotuning for function %s,\nwith key as %s,\nfinished after %.2fs on %d rank(s) of group '%s' "
        "(%s),%s%s%s\nbest config selected: %s%s;\n%s\ncache file: %s\nlogs: %s", name,
        key_text, decision.seconds, group.size, group_title(group), how, search,
        spent, cut, decision.config, margin_text(decision), format_table(shown, decision.index, decision.statistic),
        cache_file, logs_text())


def print_cache_hit(name: str, key_text: str, group: Any, chosen: str, cache_file: Path) -> None:
    """Print that a key's decision was read from the cache."""
    console().info("Triton autotuning for function %s,\nwith key as %s: cache hit on %d rank(s) of group '%s',\n"
                   "config: %s\ncache file: %s", name, key_text, group.size, group_title(group), chosen, cache_file)
