"""A running process's scheduling priority set, its threads' and its child processes' included.

A compile worker of the guesses (:mod:`~triton_dist_tune.measure.compile_workers`) runs at the lowest priority. When
a stage of the search needs a config whose guess that worker is compiling, the worker is raised to the priority of
the workers of the needed compiles until its task ends (:func:`~.compile_workers.hasten`). Triton's compile runs
``ptxas`` as a child process of the worker, so the children are raised too.

Raising a priority needs a privilege (``CAP_SYS_NICE``, which root has outside most containers, or an
``RLIMIT_NICE`` that allows it): without it :func:`set_niceness` raises ``PermissionError``. Lowering one never does.
"""

from __future__ import annotations

import os


def set_niceness(pid: int, niceness: int) -> None:
    """Give process ``pid``'s threads, and its child processes' (recursively, as ``/proc`` lists them), the niceness
    ``niceness`` (absolute, as ``os.setpriority`` takes it). A thread or process that ended meanwhile is passed
    over; ``PermissionError`` where this process may not raise a priority (or no priority can be set here)."""
    if not hasattr(os, "setpriority"):
        raise PermissionError("this platform sets no process priority")
    for thread in _threads(pid):
        try:
            os.setpriority(os.PRIO_PROCESS, thread, niceness)
        except ProcessLookupError:
            continue
        for child in _children(pid, thread):
            set_niceness(child, niceness)


def niceness() -> int:
    """This process's niceness (0 where the platform has none)."""
    return os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else 0


def _threads(pid: int) -> list[int]:
    try:
        return sorted(int(name) for name in os.listdir(f"/proc/{pid}/task"))
    except (OSError, ValueError):
        return [pid]  # no /proc here: the process's first thread alone


def _children(pid: int, thread: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{thread}/children") as listing:
            return [int(word) for word in listing.read().split()]
    except (OSError, ValueError):
        return []
