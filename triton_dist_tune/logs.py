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
from typing import Any

from .cache import env_flag

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


def format_table(rows: Sequence[dict[str, Any]], chosen: int | None) -> str:
    """A text table of measurements: index, config, group time, this rank's time, status."""
    header = f"{'':2}{'#':>4}  {'group ms':>10}  {'rank ms':>10}  {'status':<10} config"
    lines = [header]
    for row in rows:
        mark = "->" if row["index"] == chosen else ""
        group_ms = f"{row['time']:.4f}" if row.get("time") is not None else "-"
        own_ms = f"{row['own']:.4f}" if row.get("own") is not None else "-"
        status = row["state"] if row["state"] != "measured" else "ok"
        if row.get("early_stop"):
            status = "stopped"
        text = f"{mark:2}{row['index']:>4}  {group_ms:>10}  {own_ms:>10}  {status:<10} {row['config']}"
        if row.get("error"):
            text += f"  [{row['error']}]"
        lines.append(text)
    return "\n".join(lines)


class Progress:
    """A one-line progress bar on a terminal (rank 0, verbose tunings only)."""

    def __init__(self, label: str, total: int, enabled: bool) -> None:
        self.label, self.total, self.done = label, total, 0
        self.enabled = enabled and total > 1 and sys.stderr.isatty()

    def step(self) -> None:
        """Count one config as finished."""
        self.done += 1
        if self.enabled:
            width = 30
            filled = width * self.done // self.total
            sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
