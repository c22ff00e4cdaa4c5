"""Which job and rank this process's log records belong to (the same job name on every rank of a job)."""

from __future__ import annotations

import functools
import os
import re
import sys
import time
from pathlib import Path

from .. import settings


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
    # a job of one rank shares its name with no one: named by itself, not by its parent (launch.sh starts one rank
    # without torchrun's agent, so its parent is the caller's shell, which may have started long before)
    port = (launcher.master_port or "").strip() if launcher.world_size != 1 else ""
    started = _parent_start() if port.isdigit() else None
    if started is None:
        port, started = "", time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    return f"{stamp}-port{port}" if port else f"{stamp}-pid{os.getpid()}"


def global_rank() -> int:
    """This process's rank in the whole job (torch.distributed, then launcher variables, else 0).

    torch.distributed is asked only where the process has imported it: a process that has not cannot have
    initialized it, and importing torch to find out costs seconds (every CLI command and log writer paid that)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    rank = settings.launcher().rank
    return rank if rank is not None else 0
