"""Per-rank log files (``.autotune_logs/rank-{i}.log``) and the summary that group rank 0 prints.

The folder is ``TRITON_DIST_AUTOTUNE_LOG_DIR`` or ``./.autotune_logs``. Console output goes through the
``triton_dist_tune`` logger at INFO level with a handler of its own, on group rank 0 only, when asked for with
``autotune_verbose=True`` or ``TRITON_PRINT_AUTOTUNING=1``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from .cache import env_flag
from .records import Decision, Outcome

_lock = threading.Lock()
_file_loggers: dict[int, logging.Logger] = {}
_console: logging.Logger | None = None


def log_dir() -> Path:
    """Where the per-rank log files go."""
    return Path(os.environ.get("TRITON_DIST_AUTOTUNE_LOG_DIR", ".autotune_logs"))


def global_rank() -> int:
    """This process's rank in the whole job (torch.distributed, then launcher variables, else 0)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def rank_log() -> logging.Logger:
    """The logger that writes this process's ``rank-{i}.log`` (opened on first use, appended to)."""
    rank = global_rank()
    with _lock:
        logger = _file_loggers.get(rank)
        if logger is None:
            logger = logging.getLogger(f"triton_dist_tune.rank{rank}")
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
            folder = log_dir()
            try:
                folder.mkdir(parents=True, exist_ok=True)
                handler: logging.Handler = logging.FileHandler(folder / f"rank-{rank}.log")
            except OSError:
                handler = logging.NullHandler()  # an unwritable log folder must not stop the job
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            logger.addHandler(handler)
            _file_loggers[rank] = logger
        return logger


def printing_enabled(verbose: bool | None) -> bool:
    """Whether to print summaries: ``autotune_verbose`` when given, else ``TRITON_PRINT_AUTOTUNING``."""
    return bool(verbose) if verbose is not None else env_flag("TRITON_PRINT_AUTOTUNING")


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
