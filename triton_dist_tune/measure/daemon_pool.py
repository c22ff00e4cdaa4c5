"""The daemon threads that compile (:class:`DaemonPool`), their deadline (:func:`wait_within`), and the wait for
them at exit (see :mod:`~triton_dist_tune.measure.precompile`, whose compiles run here).

**Speculative compiles on threads of their own.** A rank tuning alone compiles ahead what it will likely need:
the configs its search's next stage will likely hold (:data:`AHEAD`) and those a campaign's next key will likely
screen (:data:`NEXT_KEY`). On one pool of threads, a stage's own compiles (:data:`NOW`) went first in the queue but
waited for every thread busy with a guess: a guess is not stopped once started. In the README's MoE campaign on one
H200 (16 compile workers, ``benchmarks/results/session_h200_14``) the workers were busy 40-60% of each key while
the key waited 0.3-4.7 s for its compiles. So a pool given ``speculative`` threads runs the guesses there alone,
and its ``workers`` threads run what a stage needs now (a guess promoted before it started included): a needed
compile starts at once, whatever the guesses do. The thread a task runs on says which class it is
(:func:`speculating`): :mod:`~triton_dist_tune.measure.precompile` hands a guess to worker processes of lower
priority (:data:`~triton_dist_tune.measure.compile_worker.SPECULATIVE_NICENESS`), so that it takes mostly the CPUs
the needed compiles leave idle.

**A guess needed while it runs.** A stage that needed a config a guess worker was compiling waited for a process
of the lowest priority, which gets about 1.5% of a CPU it shares with work of normal priority (Linux's weights: 15
against 1024) and an eighth of one it shares with a needed compile. :meth:`DaemonPool.promote` raises that worker
to the needed compiles' niceness until its task ends (:func:`~.compile_workers.hasten`); where this process may
not raise a priority, the task runs again among the needed compiles and the config's wait ends with the first run
to succeed (:func:`first_of`). On one H200 the README's MoE campaign needed 20-27 such guesses (65-102 beside 8
busy processes), which ended 0.1-1.3 s (the keys' medians) after they were raised; the campaign's compile waits
did not measurably change (``benchmarks/results/session_h200_33``).
"""

from __future__ import annotations

import atexit
import heapq
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..disk import logs
from ..errors import describe_error
from .compile_workers import close_shared, drop_guesses, hasten, unhasten

#: seconds the process waits at exit, in all, for the compiles still running in its pools (not those left behind,
#: nor guesses, which are dropped)
EXIT_WAIT_S = 30.0

#: the ranks of a pool's tasks, run in this order (then in order of submission): needed now; compiled ahead of the
#: stage that may need it (:mod:`~triton_dist_tune.measure.ahead`); compiled ahead for a campaign's next key
#: (:mod:`~triton_dist_tune.function.next_key`). The last two are guesses: a pool with speculative threads runs them
#: there alone.
NOW, AHEAD, NEXT_KEY = 0, 1, 2
_END = 3  # a thread's end, after every task

_thread = threading.local()


def speculating() -> bool:
    """Whether this thread is a speculative thread of some pool (it runs guesses: :data:`AHEAD`, :data:`NEXT_KEY`)."""
    return bool(getattr(_thread, "speculative", False))


class DaemonPool:
    """A pool of daemon threads running submitted callables (``concurrent.futures.Future`` results) by rank
    (:data:`NOW`, then :data:`AHEAD`, then :data:`NEXT_KEY`), then in order of submission (:meth:`promote` moves one
    forward). With ``speculative`` threads, the guesses (:data:`AHEAD`, :data:`NEXT_KEY`) run on those alone and
    the ``workers`` threads run the rest (see the module docstring).

    Unlike ``ThreadPoolExecutor``, whose threads the interpreter joins at exit, a thread stuck in a call here never
    keeps the process alive; :meth:`abandon` adds a thread in place of one left behind, so the queue goes on."""

    def __init__(self, workers: int, name: str, speculative: int = 0) -> None:
        self.name = name
        #: each class's queue (False: the needed compiles; True: the guesses, with speculative threads), of (rank,
        #: submission order, the future, the callable); None entries end a thread
        self._tasks: dict[bool, list[tuple[int, int, Future, Callable[[], Any]] | tuple[int, int, None, None]]] = {
            False: [], True: []}
        self._lock = threading.Lock()
        self._ready = {kind: threading.Condition(self._lock) for kind in (False, True)}
        self._count = 0
        self._threads: list[threading.Thread] = []
        #: whether each thread (by name) is speculative
        self._speculative: dict[str, bool] = {}
        self.speculative = max(0, speculative)
        self._closed = False
        #: the task each thread runs now, by thread name; the tasks left behind past their deadline
        self._busy: dict[str, Future] = {}
        #: each running task's callable, thread ident, and whether that thread is speculative (:meth:`promote`)
        self._running: dict[Future, tuple[Callable[[], Any], int, bool]] = {}
        self._left: set[Future] = set()
        #: the callables of the futures not started yet (for :meth:`promote`)
        self._pending: dict[Future, Callable[[], Any]] = {}
        for _ in range(max(1, workers)):
            self._start(False)
        for _ in range(self.speculative):
            self._start(True)
        _pools.add(self)

    def _start(self, speculative: bool) -> None:
        name = f"{self.name}-{'guess-' if speculative else ''}{len(self._threads)}"
        self._speculative[name] = speculative
        thread = threading.Thread(target=self._work, args=(speculative,), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _put(self, rank: int, future: Future | None, fn: Callable[[], Any] | None,
             speculative: bool = False) -> None:
        """Queue a task (the lock held) on the class ``speculative`` says."""
        self._count += 1
        heapq.heappush(self._tasks[speculative], (rank, self._count, future, fn))  # type: ignore[arg-type]
        self._ready[speculative].notify()

    def _next(self, speculative: bool) -> tuple[Future, Callable[[], Any]] | None:
        """The next task of its class to run (marked running), or None: the thread ends."""
        tasks = self._tasks[speculative]
        with self._lock:
            while True:
                while not tasks:
                    self._ready[speculative].wait()
                _, _, future, fn = heapq.heappop(tasks)
                if future is None or fn is None:
                    return None
                if self._pending.pop(future, None) is None:
                    continue  # started from its other entry (promoted), or cancelled
                if future.set_running_or_notify_cancel():
                    return future, fn

    def _work(self, speculative: bool) -> None:
        _thread.speculative = speculative
        while True:
            item = self._next(speculative)
            if item is None:
                return
            future, fn = item
            name = threading.current_thread().name
            self._busy[name] = future
            self._running[future] = (fn, threading.get_ident(), speculative)
            try:
                result = fn()
            except BaseException as exc:  # handed to whoever waits for it
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                self._busy.pop(name, None)
                self._running.pop(future, None)
                if speculative:
                    unhasten(threading.get_ident())

    def submit(self, fn: Callable[[], Any], rank: int = NOW) -> Future:
        """Run ``fn`` in a thread of the pool after every task of its ``rank`` or a lower one submitted before it,
        and before every task of a higher rank not started yet (a guess, with speculative threads: on one of those);
        returns its future."""
        future: Future = Future()
        if self._closed:
            future.cancel()
            return future
        with self._lock:
            self._pending[future] = fn
            self._put(rank, future, fn, speculative=rank != NOW and self.speculative > 0)
        return future

    def promote(self, future: Future) -> tuple[bool, Future | None]:
        """``future``'s task is needed now. Not started: it runs as if submitted now with rank :data:`NOW` (on a
        thread for the needed compiles). Running on a speculative thread: its compiles are raised to the needed
        compiles' priority (:func:`~.compile_workers.hasten`); where this process may not raise one, the task runs
        again among the needed compiles. Returns whether a speculative thread ran it, and that second run's future
        or None (:func:`first_of` the two is then the task's)."""
        with self._lock:
            fn = self._pending.get(future)
            if fn is not None:
                self._put(NOW, future, fn)
                return False, None
            running = self._running.get(future)
        if running is None or not running[2]:
            return False, None
        fn, ident, _ = running
        if hasten(ident):
            if future.done():  # it ended meanwhile: the thread's next guess is not needed
                unhasten(ident)
            return True, None
        return True, None if future.done() else self.submit(fn, NOW)

    def running_guess(self, future: Future) -> bool:
        """Whether a speculative thread runs ``future``'s task now."""
        running = self._running.get(future)
        return running is not None and running[2]

    def abandon(self, future: Future | None = None) -> None:
        """A thread of the pool is stuck in a call (``future``'s) past its deadline: leave it, and start one of its
        class in its place; :meth:`drain` does not wait for it."""
        for part in getattr(future, "parts", ()):  # first_of's: its runs still running are left
            if part.running():
                self.abandon(part)
        speculative = False
        if future is not None:
            self._left.add(future)
            speculative = self.running_guess(future)
        if not self._closed and (future is None or not hasattr(future, "parts")):
            self._start(speculative)

    def drain(self, deadline: float) -> None:
        """Cancel what has not started and wait, until ``deadline`` (``time.monotonic``), for the threads still
        running a task that was not left behind."""
        self.shutdown()
        for thread in list(self._threads):
            task = self._busy.get(thread.name)
            if task is not None and task not in self._left and thread is not threading.current_thread():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def shutdown(self) -> None:
        """Cancel what has not started; idle threads end, a stuck one is left (a daemon: it never blocks exit)."""
        self._closed = True
        with self._lock:
            pending, self._pending = list(self._pending), {}
            for tasks in self._tasks.values():
                tasks.clear()
        for future in pending:
            future.cancel()
        with self._lock:
            for thread in self._threads:
                self._put(_END, None, None, self._speculative.get(thread.name, False))


def first_of(first: Future, second: Future) -> Future:
    """A future of the same task run twice (:meth:`DaemonPool.promote`): the result of the run that succeeds
    first, else the error of the last to fail. Running from the start; its ``parts`` are the two runs."""
    either: Future = Future()
    either.set_running_or_notify_cancel()
    either.parts = (first, second)  # type: ignore[attr-defined]
    lock = threading.Lock()
    left = [2]

    def ended(run: Future) -> None:
        with lock:
            left[0] -= 1
            if either.done():
                return
            if not run.cancelled() and run.exception() is None:
                either.set_result(run.result())
            elif left[0] == 0:
                either.set_exception(CancelledError() if run.cancelled() else run.exception())  # type: ignore[arg-type]

    first.add_done_callback(ended)
    second.add_done_callback(ended)
    return either


#: every pool of this process, for :func:`_drain_at_exit`
_pools: weakref.WeakSet[DaemonPool] = weakref.WeakSet()


def compiling() -> bool:
    """Whether a thread of some pool of this process runs a task now (a compile, mostly)."""
    return any(pool._busy for pool in list(_pools))


@atexit.register
def _drain_at_exit() -> None:
    """At interpreter exit: drop what has not started and the guesses still running (their workers end at once:
    :func:`~.compile_workers.drop_guesses`); let the needed compiles still running end, :data:`EXIT_WAIT_S` at most
    in all; then end the compile worker processes (a thread waiting on one would otherwise see it end). The rank log
    says so when this took over 0.1 s or dropped a guess."""
    began = time.monotonic()
    pools = list(_pools)
    for pool in pools:
        pool.shutdown()
    dropped = drop_guesses()
    for pool in pools:
        pool.drain(began + EXIT_WAIT_S)
    close_shared()
    seconds = time.monotonic() - began
    if seconds > 0.1 or dropped:
        logs.rank_log().info("at exit: %.2f s for the compiles still running and their workers; %d guess(es) "
                             "dropped while compiling", seconds, dropped)


def wait_within(futures: Sequence[Future], limit: float, pool: DaemonPool | None = None,
                began: float | None = None) -> str | None:
    """Wait for ``futures`` at most ``limit`` seconds from ``began`` (``time.monotonic``; default now); returns
    "compile: error" of the first that failed or did not end in time (its thread is then abandoned: ``pool`` gets a
    new one), else None."""
    deadline = (time.monotonic() if began is None else began) + limit
    for future in futures:
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            if pool is not None and future.running():
                pool.abandon(future)
            future.cancel()
            return f"compile: did not finish within {limit:g} s (the timeout); its thread is left behind"
        except Exception as exc:  # a config that does not compile is data
            return f"compile: {describe_error(exc)}"
    return None
