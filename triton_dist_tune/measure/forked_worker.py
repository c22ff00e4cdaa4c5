"""Compile workers forked from this process (:mod:`~triton_dist_tune.measure.compile_workers`): ready at once,
with everything this process has imported, where a spawned worker takes seconds to import Triton and torch.

A forked worker keeps only its two pipes: every other file and socket of this process is closed there (a rank's
sockets close when the rank ends, and each worker sees its own input end when the rank does). It has the default
signal handlers (the rank's own must not run there) and no garbage collection (an object of the rank's finalized
there could close a file number the worker reuses); it never touches the GPU (Triton's compile takes the target
from the rank) and leaves by ``os._exit``. :func:`fork_refusal` says when a fork is not safe.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import signal
import subprocess
import sys
import time
import warnings
from typing import IO, NoReturn

from .. import settings
from .compile_worker import NICENESS, serve


def fork_refusal(compiling: bool) -> str | None:
    """Why workers are not forked from this process now (None: they are): ``compiling``, a compile thread of this
    process is running (it may hold a lock of Triton's compiler or an import lock, which the fork would copy held);
    ``TRITON_DIST_AUTOTUNE_COMPILE_START=spawn``; no ``os.fork`` or not Linux; MPI initialized (Open MPI warns on
    a fork, and some of its transports break). ``..._COMPILE_START=fork`` forks whatever the last two say."""
    chosen = settings.current().compile_start
    if chosen == "spawn":
        return "TRITON_DIST_AUTOTUNE_COMPILE_START=spawn"
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return "not Linux"
    if chosen == "fork":
        return None
    if compiling:
        return "a compile thread is running"
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            return "MPI is initialized"
    except Exception:
        return "MPI's state is unknown"
    return None


class Forked:
    """A worker forked from this process (:func:`_serve_forked`): its pid and pipes, with the part of
    ``subprocess.Popen`` that :class:`~.worker_process.Worker` uses (``stdin``, ``stdout``, ``pid``, ``wait``,
    ``kill``)."""

    def __init__(self, niceness: int = NICENESS) -> None:
        tasks_in, tasks_out = os.pipe()
        answers_in, answers_out = os.pipe()
        try:
            with warnings.catch_warnings():  # Python 3.12 warns on a fork of a process with threads: fork_refusal
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            for number in (tasks_in, tasks_out, answers_in, answers_out):
                os.close(number)
            raise
        if pid == 0:
            _serve_forked(tasks_in, answers_out, niceness)
        os.close(tasks_in)
        os.close(answers_out)
        self.pid = pid
        self.stdin: IO[bytes] | None = os.fdopen(tasks_out, "wb")
        self.stdout: IO[bytes] | None = os.fdopen(answers_in, "rb")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The worker's exit code once it ended (it is then reaped), else None."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored)
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the worker to end (``subprocess.TimeoutExpired`` after ``timeout`` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"compile worker {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return code

    def kill(self) -> None:
        """Kill the worker (SIGKILL)."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _serve_forked(tasks: int, answers: int, niceness: int) -> NoReturn:
    """In a forked worker: keep the pipes ``tasks`` and ``answers`` only, then serve them (at ``niceness``) until the
    parent closes ``tasks``; never returns."""
    code = 1
    try:
        detach_from_parent({tasks, answers})
        serve(os.fdopen(tasks, "rb"), os.fdopen(answers, "w"), niceness)
        code = 0
    finally:
        os._exit(code)


def detach_from_parent(keep: set[int]) -> None:
    """In a process just forked: leave the parent's state behind (its objects, signal handlers, files but ``keep``
    and the standard streams, sent to /dev/null; no GPU). The parent's objects are frozen out of the garbage
    collector (one of them finalized here could close a file number this process reuses), which goes on collecting
    this process's own: disabled, a worker kept every reference cycle its compiles left (about 0.45 MB a compile, a
    Triton compile for sm90 on the CPU: 31 MB over 18 compiles against 23 MB collected)."""
    gc.disable()  # nothing collected before the parent's objects are frozen
    gc.freeze()
    gc.enable()
    faulthandler.disable()
    for number in signal.valid_signals():  # the parent's handlers (a journal's, say) must not run here
        try:
            if callable(signal.getsignal(number)):
                signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass
    null = os.open(os.devnull, os.O_RDWR)
    for number in (0, 1, 2):
        os.dup2(null, number)
    _close_all_but({0, 1, 2, *keep})
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


def _close_all_but(keep: set[int]) -> None:
    """Close every file number of this process but ``keep``."""
    try:
        numbers = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        numbers = list(range(os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096))
    for number in numbers:
        if number not in keep:
            try:
                os.close(number)
            except OSError:
                pass
