"""Compiling every config's kernels ahead, in parallel, once per node, while the first configs are warmed up.

- **Split across the node.** The ranks of the group that share a host and a Triton cache folder split the configs:
  rank r of the node compiles every n-th config, starting at its r-th (:func:`node_share`), into the node's
  shared Triton cache; the others load those kernels from it at their first run. One exchange (of host names)
  finds the node.
- **Overlapped with the warm-up.** The compiles run in a thread pool (:class:`Compiles`) while the measurer warms
  up the configs in order: just before a config's warm-up, the rank that compiles it waits for its compile, and
  one exchange tells every rank whether it compiled (so the others start its first run only once the kernel is
  in the node's cache, and a config that failed to compile is left out on every rank, with its error, before any
  rank runs it). The race starts once every config is warm, so no compile runs while a sample is timed.
- **Under a deadline, in threads that can be abandoned.** A config whose compile has not ended ``T`` s (the
  tuning's timeout) after the measurer starts waiting for it counts as failed (on every rank: the failures are
  agreed); its thread is left behind. The pool's threads are daemon threads (:class:`DaemonPool`, not
  ``concurrent.futures``' pool, whose threads the interpreter joins at exit), so a ``precompile_fn`` that never
  returns costs its config and ``T`` seconds, never the rank: the tuning ends and the process still exits. A
  thread left behind is replaced, so the configs queued after it still compile. **At exit** the compiles still
  running (those of configs a time budget left out, say) are waited for, up to
  :data:`~triton_dist_tune.measure.daemon_pool.EXIT_WAIT_S` in all, unless
  left behind: a daemon thread still inside Triton's compiler when the interpreter finalizes is ended by it where it
  takes the interpreter lock back, inside the compiler's C++ code, which aborts the process (``terminate called
  after throwing an instance of ''``, ``FATAL: exception not rethrown``) after the program's work is done.
- **``precompile_fn``** (the user's way): ``precompile_fn(config, *args, **kwargs)``, typically a call of
  ``kernel.warmup(*args, grid=..., **meta)`` for each Triton kernel the config would launch, run in a bounded
  thread pool for this rank's share (Triton's compiler spends most of its time outside the interpreter lock).
- **The compile pass** (the default, without user code; :mod:`~triton_dist_tune.measure.compile_pass`): the
  function runs once per config on every rank, with Triton's JIT launches turned into compiles in the pool.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from typing import Any

from .. import settings
from ..disk import logs
from ..group.channel import Group
from .compile_worker import routable
from .compile_workers import WorkerPool, refusal, routed, shared_pool, triton_version_key
from .daemon_pool import NEXT_KEY, NOW, DaemonPool, compiling, first_of, speculating, wait_within

#: a tuning whose key keeps this many configs or more hands its compiles to worker processes by default. Measured on
#: one H200 host (16 CPUs; ``benchmarks/results/session_h200_3``): the first key of an 840-config GEMM (200-300
#: configs compiled) took 16.4 / 16.7 s with 16 workers, 20.3 / 20.8 s with 16 threads alone (the tuning's own
#: thread starved: restores 3.0-3.9 s, warm-ups 1.7-2.0 s, against 0.2-0.3 and 0.3-0.4 s); the quick start's 12
#: configs took 5.6 s with workers (each starts an interpreter and imports Triton and the kernel's module), 2.1 s
#: without. Between the two, unmeasured.
WORKERS_FROM_CONFIGS = 128


def default_processes(peers: int, space: int) -> int:
    """Compile worker processes (:mod:`~triton_dist_tune.measure.compile_workers`) for a rank whose node runs
    ``peers`` ranks of the group, tuning a key that keeps ``space`` configs: ``TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES``
    (0: none, the threads compile), else min(16, the rank's share of the usable CPUs) from :data:`WORKERS_FROM_CONFIGS`
    configs, none below; none where nothing is compiled here (:func:`compiles_here`) or where Triton gives a worker
    no compile to take (:func:`~.compile_worker.routable`: Triton 3.2 to 3.4, whose threads compile)."""
    if not compiles_here() or not routable():
        return 0
    share = max(1, usable_cpus() // max(1, peers))
    chosen = settings.current().compile_processes
    if chosen is not None:
        return min(chosen, share)
    return min(16, share) if space >= WORKERS_FROM_CONFIGS else 0


def default_workers() -> int:
    """Threads used to compile: ``TRITON_DIST_AUTOTUNE_COMPILE_THREADS`` or the usable CPUs (at most 16); one under
    Triton's interpreter (``TRITON_INTERPRET=1``), which patches ``triton.language`` while it runs and is not
    thread-safe. (On a 16-core host the 48 configs of a GEMM space compile in 4.0 s with 16 threads, 4.2 s with 8.)"""
    env = settings.current()
    if env.interpret:
        return 1
    return env.compile_threads or min(16, usable_cpus())


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: ``taskset``, a Slurm or container cpuset), not the host's
    count: 8 ranks given 16 CPUs of a 128-core node each started 16 compile workers, 128 processes on 16 CPUs."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def compiles_here() -> bool:
    """Whether kernels are compiled here (a GPU, and not Triton's interpreter), so that compiling ahead is worth
    it."""
    if settings.current().interpret:
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def node_ranks(group: Group, label: str, timeout: float) -> list[int]:
    """The group ranks on this rank's node, in rank order: those with the same host name and Triton cache folder
    (one exchange)."""
    mine = (socket.gethostname(), _triton_cache_dir())
    everyone = group.allgather(mine, f"{label} compile split", timeout=timeout)
    return [rank for rank, node in enumerate(everyone) if tuple(node) == mine]


def node_share(group: Group, label: str, timeout: float) -> tuple[int, int]:
    """(this rank's position among the ranks of the group on its node, their number) (:func:`node_ranks`)."""
    peers = node_ranks(group, label, timeout)
    return peers.index(group.rank), len(peers)


def my_share(todo: Sequence[Any], position: int, peers: int) -> list[Any]:
    """The items of ``todo`` this rank compiles: every ``peers``-th, from its ``position``."""
    return [item for k, item in enumerate(todo) if k % peers == position]


def agree_failures(group: Group, label: str, mine: dict[int, str], timeout: float) -> dict[int, str]:
    """Every rank's compile failures {index: error} -> {index: "rank r: compile: error; ..."}, the same on every
    rank."""
    everyone = group.allgather(mine, f"{label} precompile", timeout=timeout)
    failed: dict[int, str] = {}
    for rank, errors in enumerate(everyone):
        for index, error in errors.items():
            failed[index] = (failed[index] + "; " if index in failed else "") + f"rank {rank}: compile: {error}"
    return failed


@dataclass
class NeededGuesses:
    """Compiles a stage needed while a guess worker ran them (:meth:`Compiles.promote`): how many, how many of them
    ran again among the needed compiles (no priority could be raised), and the seconds from each one's need to its
    end."""

    count: int = 0
    again: int = 0
    seconds: list[float] = field(default_factory=list)

    def note(self, future: Future, again: bool) -> None:
        """Count ``future`` (running, needed now), and time it from now to its end."""
        self.count += 1
        self.again += again
        began = time.monotonic()
        future.add_done_callback(lambda _: self.seconds.append(time.monotonic() - began))

    def text(self) -> str:
        """What :meth:`Compiles.workers_text` says of them ("" when none)."""
        if not self.count:
            return ""
        how = (f"{self.again} run again among the needed compiles ({refusal() or 'their priority not raised'})"
               if self.again else "raised to the needed compiles' priority")
        ended = sorted(self.seconds)
        after = f"; they ended {ended[len(ended) // 2]:.2f} s (median) after" if ended else ""
        return f"; this tuning needed {self.count} guess(es) while their workers compiled them, {how}{after}"


@dataclass
class Compiles:
    """This rank's compiles started ahead, by config index (see the module docstring). ``active`` on every rank of a
    group that compiles ahead (a rank with no share too), so that every rank makes the same exchanges."""

    pool: DaemonPool | None = None
    futures: dict[int, list[Future]] = field(default_factory=dict)
    #: the pool's first task, Triton's version key (:func:`version_key`): every compile waits for it
    keyed: Future | None = None
    #: seconds a config's wait may take (the tuning's timeout): a compile still running then counts as failed
    limit: float = 0.0
    active: bool = False
    #: configs the compile pass ran (:func:`~.compile_pass.compile_pass`; it stops at the time budget)
    passed: int = 0
    #: submit each config's compiles only when :meth:`wait` asks for them (Triton's interpreter, which is not
    #: thread-safe: nothing compiles while the function runs, and a config the time budget leaves out never
    #: compiles)
    lazy: bool = False
    #: the compiles of ``lazy`` submits not submitted yet, by config index
    deferred: dict[int, list[Callable[[], Any]]] = field(default_factory=dict)
    #: the worker processes the compile threads hand their compiles to (None: the threads compile)
    workers: WorkerPool | None = None
    #: those the pool's speculative threads hand theirs to (:mod:`~.daemon_pool`; None: none)
    guess_workers: WorkerPool | None = None
    #: every config whose compile was started here (by :func:`precompile` or the compile pass), needed or ahead
    submitted: set[int] = field(default_factory=set)
    #: seconds :meth:`wait` has waited, in all
    waited: float = 0.0
    #: when a wait for a config's compiles first began (:meth:`wait_first`), by index: its deadline runs from then
    wait_began: dict[int, float] = field(default_factory=dict)
    #: configs a search's stage deferred once their grace was spent (:mod:`~.warm_order`): a later stage defers
    #: them again without another
    graced: set[int] = field(default_factory=set)
    #: the guesses needed while a guess worker compiled them (:meth:`promote`)
    needed_guesses: NeededGuesses = field(default_factory=NeededGuesses)
    #: work for the rank's own thread while it would wait for compiles (a campaign's next key's guess and passes:
    #: :mod:`~triton_dist_tune.function.next_key`), in order; a unit that returns False drops the rest
    idle: deque[Callable[[], bool | None]] = field(default_factory=deque)
    #: the tuning that started the pool, for the rank log's line per compile (:func:`log_compile`)
    label: str = ""

    def run_idle(self, until: Callable[[], bool] = lambda: False) -> None:
        """Run the :attr:`idle` work, a unit at a time, until ``until()`` says to stop, a unit returns False (the
        rest is dropped) or none is left."""
        while self.idle and not until():
            if self.idle.popleft()() is False:
                self.idle.clear()

    def submit(self, index: int, compile_one: Callable[[], Any], rank: int = NOW) -> None:
        """Compile config ``index`` (one more of its kernels) in the pool, at ``rank``
        (:data:`~.daemon_pool.NOW`; :data:`~.daemon_pool.AHEAD`: compiled ahead of the stage that may need it,
        :meth:`promote` when it is; :data:`~.daemon_pool.NEXT_KEY`: for a campaign's next key, with its arguments,
        :mod:`~triton_dist_tune.function.next_key`: not one of this tuning's compiles, never waited for here)."""
        assert self.pool is not None
        keyed, workers, guess_workers, label = self.keyed, self.workers, self.guess_workers, self.label

        def task() -> Any:
            if keyed is not None:
                keyed.exception()  # wait for it; a failure there is the compile's to raise again
            began, ended = time.monotonic(), False
            try:
                with routed(guess_workers if guess_workers is not None and speculating() else workers):
                    result = compile_one()
                ended = True
                return result
            finally:
                log_compile(label, index, rank, time.monotonic() - began, ended)

        if rank == NEXT_KEY:
            if not self.lazy:
                self.pool.submit(task, NEXT_KEY)
        elif self.lazy:
            self.deferred.setdefault(index, []).append(task)
        else:
            self.futures.setdefault(index, []).append(self.pool.submit(task, rank))

    @property
    def open(self) -> bool:
        """Whether compiles can be added to this pool, ahead of the stage that needs them: an active pool that
        compiles as it is given work (not :attr:`lazy`)."""
        return self.active and self.pool is not None and not self.lazy

    def promote(self, index: int) -> None:
        """Config ``index``, submitted :data:`~.daemon_pool.AHEAD`, is needed now: its compiles not started go
        before those ahead, and those a guess worker runs go on at the needed compiles' priority (or, where this
        process may not raise one, run again among the needed compiles: :meth:`~.daemon_pool.DaemonPool.promote`)."""
        if self.pool is None:
            return
        futures = self.futures.get(index, [])
        for position, future in enumerate(futures):
            guess, again = self.pool.promote(future)
            if guess:
                self.needed_guesses.note(future, again is not None)
            if again is not None:
                futures[position] = first_of(future, again)

    def done(self, index: int) -> bool:
        """Whether config ``index``'s compiles have ended (True when none was submitted, or they wait to be
        submitted: :attr:`lazy`)."""
        return all(future.done() for future in self.futures.get(index, []))

    def wait_first(self, indices: Sequence[int], timeout: float) -> bool:
        """Wait at most ``timeout`` seconds until the compiles of some config of ``indices`` have all ended
        (counted in :attr:`waited`); whether one has."""
        started = time.monotonic()
        for index in indices:  # each config's deadline runs from its first wait
            self.wait_began.setdefault(index, started)
        try:
            while True:
                if any(self.done(index) for index in indices):
                    return True
                running = [f for index in indices for f in self.futures.get(index, []) if not f.done()]
                left = timeout - (time.monotonic() - started)
                if left <= 0 or not running:
                    return any(self.done(index) for index in indices)
                futures_wait(running, timeout=left, return_when=FIRST_COMPLETED)
        finally:
            self.waited += time.monotonic() - started

    def wait(self, index: int) -> str | None:
        """Wait for config ``index``'s compiles (submitted now when :attr:`lazy`); returns "compile: error" of the
        first that failed (or did not end within ``limit`` seconds from the first wait for it, this one or
        :meth:`wait_first`'s: its thread is left behind), else None."""
        assert self.pool is not None or index not in self.deferred
        for task in self.deferred.pop(index, []):
            self.futures.setdefault(index, []).append(self.pool.submit(task))  # type: ignore[union-attr]
        started = time.monotonic()
        try:
            return wait_within(self.futures.pop(index, []), self.limit, self.pool, self.wait_began.pop(index, None))
        finally:
            self.waited += time.monotonic() - started

    def workers_text(self) -> str | None:
        """What the compile worker processes did so far in this process (None: this tuning used none)."""
        if self.workers is None:
            return None
        stats = self.workers.stats
        reason = f" (the first: {stats.reason})" if stats.reason else ""
        guesses = ""
        if self.guess_workers is not None:
            extra = self.guess_workers.stats
            guesses = (f"; guesses: {extra.compiled} kernel(s) compiled in {extra.busy:.1f} s of the time of "
                       f"{self.guess_workers.alive} process(es) of the lowest priority")
        return (f"compile workers ({self.workers.alive} process(es); {stats.forked} forked, {stats.spawned} "
                f"spawned) so far: {stats.compiled} kernel(s) compiled there in {stats.busy:.1f} s of their time, "
                f"{stats.early} by the compile threads while the workers started, {stats.left} left to the compile "
                f"threads{reason}{guesses}{self.needed_guesses.text()}")

    def close(self) -> None:
        """Drop the compiles not started yet (the tuning ended); running ones go on in daemon threads."""
        self.deferred.clear()
        if self.pool is not None:
            self.pool.shutdown()


#: a compile task shorter than this found its kernels in Triton's cache: not logged (:func:`log_compile`). In the
#: README's MoE campaign on one H200, 2,884 of its 4,034 tasks (``benchmarks/results/session_h200_34``)
LOGGED_FROM_S = 0.05


def log_compile(label: str, index: int, rank: int, seconds: float, ended: bool) -> None:
    """One line in the rank log per compile a pool ran (not those that found their kernels in Triton's cache:
    :data:`LOGGED_FROM_S`): its config, its seconds from its start on a thread to its end, and what it was
    submitted as: a stage's need (``needed``), a guess of the tuning's next stages (``guess``; needed later or not)
    or of a campaign's next key (``next key``). For the straggler rule's question
    (:func:`~triton_dist_tune.function.searched.contenders`): do the configs that compile longest ever read near
    their key's choice."""
    if ended and seconds < LOGGED_FROM_S:
        return
    kind = {NOW: "needed", NEXT_KEY: "next key"}.get(rank, "guess")
    logs.rank_log().info("%s compile of config %d: %.2f s (%s%s)", label, index, seconds, kind,
                         "" if ended else ", raised")


def start_pool(workers: int | None, timeout: float, peers: int = 1, space: int = 0, alone: bool = False,
               label: str = "") -> Compiles:
    """An active :class:`Compiles` with a pool of ``workers`` daemon threads (default :func:`default_workers`),
    which hand their compiles to this process's worker processes (:func:`default_processes` for a node of ``peers``
    ranks of the group and a key of ``space`` configs). ``alone``: a rank tuning alone, which compiles guesses
    ahead: with worker processes, as many speculative threads, handing theirs to as many workers of the lowest
    priority (:mod:`~.daemon_pool`)."""
    threads = 1 if default_workers() == 1 else (workers or default_workers())
    processes = default_processes(peers, space)
    # the workers first: forked (at their first start) before this pool's threads run, and while no other does
    processes_pool = shared_pool(processes, compiling=compiling()) if processes else None
    guesses = processes if alone else 0
    guess_pool = shared_pool(guesses, compiling=compiling(), speculative=True) if guesses else None
    pool = DaemonPool(threads, "tdt-compile", speculative=guesses)
    return Compiles(pool, keyed=pool.submit(version_key), limit=timeout, active=True, workers=processes_pool,
                    guess_workers=guess_pool, label=label)


def version_key() -> None:
    """Compute Triton's version key once, before any compile: every compile needs it (a hash of Triton's compiler
    files and of its C library, hundreds of MB), Triton caches it per process, and compile threads that all start
    before it is cached each compute it again. Measured on a 16-CPU H100 host, first key of 40 configs: 16 threads
    spent ~22 s of their time on it (the first-key probe, ``benchmarks/HISTORY.md``). Nothing under Triton's
    interpreter, which compiles nothing."""
    if not settings.current().interpret:
        triton_version_key()


def precompile(group: Group, label: str, precompile_fn: Callable[..., Any], todo: Sequence[tuple[int, dict, str]],
               args: tuple, kwargs: dict[str, Any], workers: int | None, timeout: float, space: int = 0,
               compiles: Compiles | None = None, rank: int = NOW) -> Compiles:
    """Start compiling this rank's node share of ``todo`` with ``precompile_fn`` in a thread pool (``compiles``'s:
    adding to it; else a new one), at ``rank`` (:meth:`Compiles.submit`; for a campaign's next key, ``args`` and
    ``kwargs`` are that key's). Under Triton's interpreter (which is not thread-safe) each config's compile starts
    only when its warm-up waits for it (:attr:`Compiles.lazy`)."""
    position, peers = node_share(group, label, timeout)
    device = current_cuda_device()
    if compiles is None:
        compiles = start_pool(workers, timeout, peers, space, alone=group.size == 1, label=label)
        compiles.lazy = settings.current().interpret
    for index, config, _ in my_share(todo, position, peers):
        def compile_one(config: dict = config) -> None:
            on_device(device)
            precompile_fn(config, *args, **kwargs)

        compiles.submit(index, compile_one, rank)
        if rank != NEXT_KEY:
            compiles.submitted.add(index)
    return compiles


def on_device(device: int | None) -> None:
    """Make ``device`` current in this thread (a new thread starts on GPU 0)."""
    if device is not None:
        import torch

        torch.cuda.set_device(device)


def current_cuda_device() -> int | None:
    """The current CUDA device, or None without CUDA."""
    try:
        import torch

        return torch.cuda.current_device() if torch.cuda.is_available() else None
    except Exception:
        return None


def _triton_cache_dir() -> str:
    """Triton's cache folder (``triton.knobs``, which reads ``TRITON_CACHE_DIR``), or "" where Triton has none."""
    try:
        import triton

        return str(triton.knobs.cache.dir)
    except Exception:
        return ""
