"""Triton compiles in worker processes, so that the compile threads wait on pipes instead of holding the
interpreter lock.

Triton's compiler runs its front end (the kernel's AST to IR) and parts of its passes in Python: a compile holds
the interpreter lock for much of its time. With 16 compile threads beside the tuning's own thread, the threads
queue for the lock, and so does every step of the tuning itself (its argument checks, warm-up runs and launches):
on an H200 host, a first key's restore and warm-up took 3.4 s and 2.0 s with compiles running, 0.1 s and 0.2 s
without (``benchmarks/results/session_h200_2``).

So each compile thread of :mod:`~triton_dist_tune.measure.precompile` hands the compile of a kernel that Triton's
JIT has not compiled yet to a worker process (:mod:`~triton_dist_tune.measure.compile_worker`), waits for its
answer, then lets Triton's JIT go on: it finds the kernel in Triton's cache folder, which the worker filled. A
kernel the worker cannot compile (its module cannot be imported by name: a kernel defined in ``__main__`` or inside
a function; a Triton option set in code, not in the environment, that gives the worker another cache key; an
error) is compiled by the thread as before, so the outcome (and any error Triton raises) is the same.

The workers are started once per process, at the first compile pass, and serve every tuning after it. They see
no GPU (``CUDA_VISIBLE_DEVICES`` empty: a kernel module that touches one at import fails there, not on the GPU),
and they end when the process ends (the end of their input), or at exit, after the compile threads still
waiting on them.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("triton_dist_tune")

_SCRIPT = Path(__file__).with_name("compile_worker.py")
#: seconds between a waiting thread's checks that some worker still runs
_POLL_S = 0.5


@dataclass
class WorkerStats:
    """Kernels handed to the workers: compiled there, and left to the compile threads (with the first reason)."""

    compiled: int = 0
    left: int = 0
    reason: str = ""


class Worker:
    """One worker process and its pipes."""

    def __init__(self) -> None:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        self.proc = subprocess.Popen([sys.executable, str(_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)

    def compile(self, task: bytes) -> tuple[bool, str]:
        """Send one task and wait for its answer: (compiled, error). Raises OSError when the worker is gone."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(struct.pack("<Q", len(task)) + task)
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise OSError("the compile worker ended")
        answer = json.loads(line)
        return bool(answer.get("ok")), str(answer.get("error", ""))

    def close(self) -> None:
        """End the worker now (its input closes; killed if it does not end within 2 s)."""
        self.close_input()
        self.end(2.0)

    def close_input(self) -> None:
        """Close the worker's input: it ends after its task."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass

    def end(self, wait: float) -> None:
        """Wait ``wait`` seconds for the worker to end, then kill it."""
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class WorkerPool:
    """Worker processes shared by the compile threads: a thread borrows an idle one for each task."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.idle: queue.SimpleQueue[Worker] = queue.SimpleQueue()
        #: workers started and not ended (started on demand: a task that finds none idle starts one, up to ``size``)
        self.alive = 0
        self.failed_to_start = False
        self.closed = False
        self.stats = WorkerStats()
        self._lock = threading.Lock()
        self._all: list[Worker] = []

    def _borrow(self) -> Worker | None:
        """An idle worker, a new one while fewer than ``size`` run, else the next to come back (checking every
        :data:`_POLL_S` that one still runs: a worker that ended is not coming back); None when none runs or can
        start."""
        while True:
            try:
                return self.idle.get_nowait()
            except queue.Empty:
                pass
            with self._lock:
                start = self.alive < self.size and not self.failed_to_start and not self.closed
                if start:
                    self.alive += 1
                elif self.alive == 0 or self.closed:
                    return None
            if start:
                return self._start()
            try:
                return self.idle.get(timeout=_POLL_S)
            except queue.Empty:
                continue

    def _start(self) -> Worker | None:
        try:
            worker = Worker()
        except OSError as exc:
            with self._lock:
                self.alive -= 1
                self.failed_to_start = True
            log.warning("triton_dist_tune: cannot start a compile worker (%s): compiling in threads", exc)
            return None
        with self._lock:
            self._all.append(worker)
        return worker

    def compile(self, task: bytes) -> bool:
        """Compile one task in a worker; False when it did not (the caller compiles it)."""
        worker = self._borrow()
        if worker is None:
            self.skip("no compile worker could start")
            return False
        try:
            done, error = worker.compile(task)
        except (OSError, ValueError) as exc:
            worker.close()
            with self._lock:
                self.alive -= 1
                self._left(f"a worker ended: {exc}")
            return False
        self.idle.put(worker)
        with self._lock:
            if done:
                self.stats.compiled += 1
            else:
                self._left(error)
        return done

    def skip(self, reason: str) -> None:
        """Count a kernel left to the compile threads, not handed to a worker."""
        with self._lock:
            self._left(reason)

    def _left(self, reason: str) -> None:
        self.stats.left += 1
        self.stats.reason = self.stats.reason or reason

    def close(self) -> None:
        """End every worker: close all their inputs, then wait for them together (killed after 2 s)."""
        with self._lock:
            workers, self._all = self._all, []
            self.closed = True
        for worker in workers:
            worker.close_input()
        deadline = time.monotonic() + 2.0
        for worker in workers:
            worker.end(max(0.0, deadline - time.monotonic()))


_pool: WorkerPool | None = None
_pool_lock = threading.Lock()
_route = threading.local()


def shared_pool(size: int) -> WorkerPool:
    """This process's worker pool (started at the first call, with ``size`` workers)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _install()
            _pool = WorkerPool(size)
        return _pool


def close_shared() -> None:
    """End this process's workers (at exit, once the compile threads waiting on them are done: see
    :func:`~triton_dist_tune.measure.precompile._drain_at_exit`)."""
    with _pool_lock:
        pool = _pool
    if pool is not None:
        pool.close()


@contextmanager
def routed(pool: WorkerPool | None) -> Iterator[None]:
    """Within: the Triton compiles this thread starts go to ``pool`` first (None: none do)."""
    _route.pool = pool
    try:
        yield
    finally:
        _route.pool = None


def task(fn: Any, signature: Any, constexprs: Any, attrs: Any, target: Any, options: dict[str, Any]) -> bytes | None:
    """The worker's task for one compile of kernel ``fn`` (``triton.compile``'s arguments), or None when a worker
    cannot find the kernel (defined in ``__main__`` or inside a function) or the task cannot be pickled."""
    inner = getattr(fn, "fn", None)
    module, qualname = getattr(inner, "__module__", None), getattr(inner, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname:
        return None
    try:
        triton_env = {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}  # its cache folder: now
        return pickle.dumps((list(sys.path), triton_env, triton_version_key(), module, qualname, signature, constexprs,
                             attrs, target, options))
    except Exception:
        return None


def triton_version_key() -> str | None:
    """Triton's version key (a hash of its compiler and C library, computed once per process and cached by
    Triton); None for a Triton without one. The compile pool computes it first
    (:func:`~triton_dist_tune.measure.precompile.version_key`), and every task carries it to the workers: each
    would otherwise spend about a second of CPU on it."""
    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        return None
    return triton_key()


def _install() -> None:
    """Wrap ``JITFunction._do_compile`` (Triton's compile of a kernel its JIT has not compiled): on a thread
    :func:`routed` to a pool, a worker compiles it first (the call below then loads it from the cache)."""
    from triton.runtime.jit import JITFunction

    original: Callable[..., Any] = JITFunction._do_compile
    if getattr(original, "__tdt_routed__", False):
        return

    def _do_compile(self: Any, key: Any, signature: Any, device: Any, constexprs: Any, options: Any, attrs: Any,
                    *rest: Any, **kwargs: Any) -> Any:
        pool = getattr(_route, "pool", None)
        if pool is not None:
            try:
                target = self.device_caches[device][2]
                work = task(self, signature, constexprs, attrs, target, dict(options.__dict__))
            except Exception:
                work = None
            if work is None:
                pool.skip("a kernel defined in __main__ or inside a function, or not pickled")
            else:
                pool.compile(work)
        return original(self, key, signature, device, constexprs, options, attrs, *rest, **kwargs)

    _do_compile.__tdt_routed__ = True  # type: ignore[attr-defined]
    JITFunction._do_compile = _do_compile
