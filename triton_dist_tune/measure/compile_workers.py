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

The workers are started once per process, all at once at the first compile pass, and serve every tuning after it.
A worker started as a new interpreter costs seconds: it imports Triton and torch (when this process has it: a
kernel's module mostly imports it), and at its first task the kernel's module. On one H200 host (16 CPUs) 16 such
workers started together took 5.4 s (median) to answer their first task, where a kernel then took 0.32 s; the
first stage of a first key waited for them (``benchmarks/diagnose_compile.py``, ``benchmarks/results/
session_h200_9``). So on Linux the workers are forked from this process (:mod:`~triton_dist_tune.measure.
forked_worker`), with everything it has imported, before any compile thread of the pass starts: 16 were ready in
0.13 s on a 2-core VM with torch imported. Where a fork is refused (:func:`~triton_dist_tune.measure.
forked_worker.fork_refusal`: a compile thread of this process is running, MPI is initialized,
``TRITON_DIST_AUTOTUNE_COMPILE_START=spawn``, not Linux) they are spawned as new interpreters in the background,
and until one is ready the compile threads compile their kernels themselves (:attr:`WorkerStats.early`). Spawned
workers see no GPU (``CUDA_VISIBLE_DEVICES`` empty: a kernel module that touches one at import fails there, not on
the GPU). Workers end when the process ends (the end of their input), or at exit, after the compile threads still
waiting on them.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .compile_worker import NICENESS, SPECULATIVE_NICENESS, explicit_knobs, triton_key_module
from .forked_worker import fork_refusal
from .priority import niceness as current_niceness
from .priority import set_niceness
from .worker_process import Worker

log = logging.getLogger("triton_dist_tune")

#: seconds between a waiting thread's checks that some worker still runs
_POLL_S = 0.5


@dataclass
class WorkerStats:
    """Kernels handed to the workers: compiled there, compiled by the compile threads while no worker was ready yet
    (``early``), and left to the compile threads for another reason (``left``, with the first reason)."""

    compiled: int = 0
    #: seconds the workers spent on their tasks, in all (from handing one over to its answer)
    busy: float = 0.0
    early: int = 0
    left: int = 0
    reason: str = ""
    #: workers forked from this process, and spawned as new interpreters
    forked: int = 0
    spawned: int = 0


class WorkerPool:
    """Worker processes shared by the compile threads: a thread borrows an idle one for each task. The workers start
    in the background (:meth:`start`); a task that finds none idle while some are still starting is compiled by its
    thread. Each worker lowers its priority by ``niceness``."""

    def __init__(self, size: int, niceness: int = NICENESS) -> None:
        self.size = max(1, size)
        self.niceness = niceness
        self.idle: queue.SimpleQueue[Worker] = queue.SimpleQueue()
        #: workers started and not ended (those still starting included)
        self.alive = 0
        #: workers started and not ready yet
        self.starting = 0
        self.failed_to_start = False
        self.closed = False
        self.stats = WorkerStats()
        self._lock = threading.Lock()
        self._all: list[Worker] = []
        #: the worker each thread has borrowed now, by thread ident (:func:`hasten` raises it)
        self._lent: dict[int, Worker] = {}
        #: the workers raised to the needed compiles' niceness until their task ends
        self._raised: set[Worker] = set()
        #: the absolute niceness of this pool's workers, and of the workers of the needed compiles
        mine = current_niceness()
        self._own, self._needed = min(19, mine + niceness), min(19, mine + NICENESS)

    def start(self, fork: bool = False) -> None:
        """Start the workers that would bring the pool to ``size`` (none once one failed to start, or after
        :meth:`close`): ``fork``, forked here and now (:class:`~.forked_worker.Forked`; the caller has checked
        :func:`fork_refusal`), else spawned in the background."""
        with self._lock:
            count = 0 if self.failed_to_start or self.closed else self.size - self.alive
            self.alive += count
            self.starting += count
        workers: list[Worker | None] = []
        for _ in range(count):  # every fork first, before the threads below start
            try:
                workers.append(Worker(fork=True, niceness=self.niceness) if fork else None)
            except OSError as exc:
                log.warning("triton_dist_tune: cannot fork a compile worker (%s): spawning it", exc)
                fork = False
                workers.append(None)
        for worker in workers:
            threading.Thread(target=self._start, args=(worker,), name="tdt-compile-worker-start",
                             daemon=True).start()

    def _start(self, worker: Worker | None) -> None:
        """Start one worker (unless forked: ``worker``) and wait until it is ready, then make it idle."""
        forked = worker is not None
        if worker is None:
            try:
                worker = Worker(niceness=self.niceness)
            except OSError as exc:
                self._not_started(None, exc)
                return
        with self._lock:
            self._all.append(worker)
            if forked:
                self.stats.forked += 1
            else:
                self.stats.spawned += 1
        try:
            worker.ready()
        except (OSError, ValueError) as exc:
            self._not_started(worker, exc)
            return
        with self._lock:
            self.starting -= 1
            closed = self.closed
        if closed:  # the pool closed while this worker started (close() may have listed it before)
            worker.close()
        else:
            self.idle.put(worker)

    def _not_started(self, worker: Worker | None, exc: Exception) -> None:
        if worker is not None:
            worker.close()
        with self._lock:
            self.alive -= 1
            self.starting -= 1
            first = not self.failed_to_start
            self.failed_to_start = True
        if first:
            log.warning("triton_dist_tune: cannot start a compile worker (%s): compiling in threads", exc)

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until some worker is ready (started if none runs); False if none is."""
        self.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                worker = self.idle.get(timeout=min(_POLL_S, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                with self._lock:
                    if self.alive == 0:
                        return False
                continue
            self.idle.put(worker)
            return True
        return False

    def _borrow(self) -> tuple[Worker | None, bool]:
        """(an idle worker, else the next to come back, checking every :data:`_POLL_S` that one still runs: a worker
        that ended is not coming back, and is replaced; None when none is lent), and whether none is lent because
        workers are still starting (the caller compiles its kernel itself), not because none runs or can start."""
        while True:
            try:
                return self.idle.get_nowait(), False
            except queue.Empty:
                pass
            with self._lock:
                if self.closed or (self.alive == 0 and self.failed_to_start):
                    return None, False
            self.start()  # in place of workers that ended
            with self._lock:
                if self.starting:
                    self.stats.early += 1
                    return None, True
            try:
                return self.idle.get(timeout=_POLL_S), False
            except queue.Empty:
                continue

    def compile(self, task: bytes) -> bool:
        """Compile one task in a worker; False when it did not (the caller compiles it)."""
        worker, starting = self._borrow()
        if worker is None:
            if not starting:
                self.skip("no compile worker could start")
            return False
        began = time.monotonic()
        ident = threading.get_ident()
        with self._lock:
            self._lent[ident] = worker
        if hastened(ident):
            try:
                self.raise_lent(ident)
            except OSError as exc:  # PermissionError mostly
                _refused(exc)
        try:
            done, error = worker.compile(task)
        except (OSError, ValueError) as exc:
            self._give_back(ident, worker)
            worker.close()
            with self._lock:
                self.alive -= 1
                self._left(f"a worker ended: {exc}")
            return False
        self._give_back(ident, worker)
        self.idle.put(worker)
        with self._lock:
            self.stats.busy += time.monotonic() - began
            if done:
                self.stats.compiled += 1
            else:
                self._left(error)
        return done

    def raise_lent(self, ident: int) -> None:
        """Raise the worker thread ``ident`` has borrowed, if any, to the niceness of the needed compiles' workers
        until the thread gives it back (nothing where this pool's workers run at that niceness);
        ``OSError`` (``PermissionError`` mostly) where this process may not raise a priority."""
        with self._lock:
            worker = self._lent.get(ident)
            if worker is not None and self._own > self._needed and worker not in self._raised:
                set_niceness(worker.proc.pid, self._needed)
                self._raised.add(worker)

    def _give_back(self, ident: int, worker: Worker) -> None:
        """The thread ``ident`` is done with ``worker``: a raised worker goes back to this pool's niceness (lowering
        a priority needs no privilege)."""
        with self._lock:
            self._lent.pop(ident, None)
            if worker in self._raised:
                self._raised.discard(worker)
                try:
                    set_niceness(worker.proc.pid, self._own)
                except OSError:
                    pass

    def skip(self, reason: str) -> None:
        """Count a kernel left to the compile threads, not handed to a worker."""
        with self._lock:
            self._left(reason)

    def _left(self, reason: str) -> None:
        self.stats.left += 1
        self.stats.reason = self.stats.reason or reason

    def kill(self) -> int:
        """End every worker at once, killed, its task dropped (a thread waiting on one gets False). Returns how
        many were busy."""
        with self._lock:
            workers, self._all = self._all, []
            self.closed = True
        busy = max(0, len(workers) - self.idle.qsize())
        for worker in workers:
            worker.proc.kill()
        for worker in workers:
            worker.end(1.0)
        return busy

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


#: this process's worker pools: for the compiles a stage needs, and for the guesses (``True``)
_pools: dict[bool, WorkerPool] = {}
_pool_lock = threading.Lock()
_route = threading.local()
#: set at interpreter exit (:func:`drop_guesses`): a compile a worker did not do is dropped, not done by its thread
_exiting = threading.Event()
#: the threads whose compiles are needed now although a speculative thread runs them (:func:`hasten`)
_hastened: set[int] = set()
#: why this process may not raise a worker's priority, once it was refused ("" until then)
_refusal = ""


def hasten(ident: int) -> bool:
    """A guess that thread ``ident`` compiles is needed now: the worker it has borrowed (and each it borrows until
    :func:`unhasten`) runs at the niceness of the needed compiles' workers. False when this process may not raise a
    priority (:mod:`~.priority`): the guess goes on at the lowest priority, and the caller may compile it again
    among the needed compiles."""
    if _refusal:
        return False
    with _pool_lock:
        _hastened.add(ident)
        pools = list(_pools.values())
    try:
        for pool in pools:
            pool.raise_lent(ident)
    except OSError as exc:  # PermissionError mostly
        _refused(exc)
        unhasten(ident)
        return False
    return True


def _refused(exc: OSError) -> None:
    global _refusal
    if not _refusal:
        _refusal = str(exc) or "permission denied"
        log.debug("triton_dist_tune: a compile worker's priority cannot be raised here: %s", _refusal)


def hastened(ident: int) -> bool:
    """Whether the compiles of thread ``ident`` are needed now (:func:`hasten`)."""
    return ident in _hastened


def unhasten(ident: int) -> None:
    """Thread ``ident``'s task has ended: its next compiles are guesses again."""
    with _pool_lock:
        _hastened.discard(ident)


def refusal() -> str:
    """Why this process may not raise a worker's priority ("" unless it was refused)."""
    return _refusal


def shared_pool(size: int, compiling: bool = True, speculative: bool = False) -> WorkerPool:
    """This process's worker pool (created at the first call, with ``size`` workers: forked now unless
    :func:`fork_refusal` says why not, given whether a compile thread of this process is ``compiling``; else spawned
    in the background). ``speculative``: the pool for guesses, whose workers run at
    :data:`~.compile_worker.SPECULATIVE_NICENESS` (:mod:`~.daemon_pool`)."""
    with _pool_lock:
        pool = _pools.get(speculative)
        if pool is None:
            _install()
            pool = _pools[speculative] = WorkerPool(size, SPECULATIVE_NICENESS if speculative else NICENESS)
            refusal = fork_refusal(compiling)
            if refusal is not None:
                log.debug("triton_dist_tune: compile workers spawned, not forked: %s", refusal)
            pool.start(fork=refusal is None)
        return pool


def drop_guesses() -> int:
    """At interpreter exit: end the guesses' workers at once (no key of this process will use what they compile) and
    from now on drop, rather than compile in its own thread, every kernel a worker did not compile (a compiler
    running in a thread while the interpreter ends can crash the process). Returns the guesses dropped running."""
    _exiting.set()
    with _pool_lock:
        pool = _pools.get(True)
    return pool.kill() if pool is not None else 0


def close_shared() -> None:
    """End this process's workers (at exit, once the compile threads waiting on them are done: see
    :func:`~triton_dist_tune.measure.daemon_pool._drain_at_exit`)."""
    with _pool_lock:
        pools = [_pools[kind] for kind in sorted(_pools)]
    for pool in pools:
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
    """The worker's task for one compile of kernel ``fn`` (``triton.compile``'s arguments, and Triton's settings as
    they are now: its environment variables and the knobs set in code), or None when a worker cannot find the kernel
    (defined in ``__main__`` or inside a function), cannot be given a knob or the compiler's instrumentation
    (:func:`explicit_knobs`) or the task cannot be pickled."""
    inner = getattr(fn, "fn", None)
    module, qualname = getattr(inner, "__module__", None), getattr(inner, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname:
        return None
    knobs = explicit_knobs()
    if knobs is None:
        return None
    try:
        triton_env = {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}  # its cache folder: now
        return pickle.dumps((list(sys.path), triton_env, triton_version_key(), module, qualname, signature, constexprs,
                             attrs, target, options, knobs))
    except Exception:
        return None


def triton_version_key() -> str | None:
    """Triton's version key (a hash of its compiler and C library, computed once per process and cached by
    Triton); None for a Triton without one. The compile pool computes it first
    (:func:`~triton_dist_tune.measure.precompile.version_key`), and every task carries it to the workers: each
    would otherwise spend about a second of CPU on it."""
    holder = triton_key_module()
    return None if holder is None else holder.triton_key()


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
                pool.skip("a kernel defined in __main__ or inside a function, a Triton knob set in code to a class or "
                          "a tool, Triton's compiler instrumented (a sanitizer, Proton), or not pickled")
            elif not pool.compile(work) and _exiting.is_set():
                raise RuntimeError("triton_dist_tune: the process is exiting; a compile its worker did not do is "
                                   "dropped")
        return original(self, key, signature, device, constexprs, options, attrs, *rest, **kwargs)

    _do_compile.__tdt_routed__ = True  # type: ignore[attr-defined]
    JITFunction._do_compile = _do_compile
