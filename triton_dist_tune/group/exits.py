"""A rank's end as the job's store hears it, and the wait at exit of the process that hosts the store (the linger).

A job started through :func:`~triton_dist_tune.group.dist.init_distributed` without torchrun's agent has its
key-value store in global rank 0's process: when that process ends, the store ends with it, and a rank still reading
the last exchange (the one that carries rank 0's error to everyone) meets a raw ``DistNetworkError``. So every rank
of such a job registers here (:func:`register`) and counts out at its end, and the host lingers at its normal exit
until every rank has counted out or is known gone, at most :data:`LINGER_S` (:func:`linger`).

Under the attempt's prefix ``P`` (``attempt<name>/triton_dist_tune/``):

- ``P process/<rank>``: which process the rank is (:func:`~triton_dist_tune.group.note.this_process`: the machine's
  boot id and pid namespace, its pid and start time), written once at registration;
- ``P exited/<rank>``: how the rank ended, written as it counts out, before ``P exited`` (the count) is added 1;
- ``P exited/log``: a line ``<rank> <how>`` for each rank that counted out (appended after ``exited/<rank>``): the
  ranks that ended and how, read in one request (:func:`count_outs`), by the host at the end of its wait and by a
  rank waiting at an exchange for ranks that never came (:mod:`.departed`).

A rank counts out in an exit hook at a normal exit (``exited normally``, or ``exited on an uncaught <class>`` where
an uncaught exception ended its program: :func:`ended_how`), and, where the watchdog ends its process with
``os._exit`` (no exit hooks run; :mod:`~triton_dist_tune.faults.watchdog`), just before that (:func:`count_out`: on
a client of its own, in a thread the exit waits for at most :data:`COUNT_OUT_WAIT_S`, every error swallowed: it
never holds the exit longer). A process counts out once.

The host stops waiting for a rank that has not counted out only on evidence that its process is gone: it ran on this
host and pid namespace and ``/proc`` has no such process any more (or a zombie:
:func:`~triton_dist_tune.group.note.process_gone`, as for a wrong-group note), or this process already gave up on it
at an exchange because its beat stood still for the bound the waits use (:func:`given_up`, recorded by
:mod:`.store`), and in both cases its ``exited/<rank>`` key is not there (it never counted out). Killed on another
host without such a give-up, nothing tells it is gone within :data:`LINGER_S`: the host waits it out.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from . import store_silence
from .clients import own_client
from .note import on_this_host, parse_process, process_gone, this_process
from .store_peek import peek
from .store_wait import Pace

log = logging.getLogger("triton_dist_tune")

#: how long the process hosting the store waits at exit for the other ranks to end first (s)
LINGER_S = 5.0
#: the most seconds a process ended by the watchdog waits for its count-out to reach the store
COUNT_OUT_WAIT_S = 1.0
#: how often the lingering host looks for evidence that a rank that has not counted out is gone (s)
LOOK_S = 0.25
#: how a rank that exits normally counts out
NORMAL = "exited normally"
#: how a rank whose program an uncaught exception ended counts out (its exit hooks run: a crash of the user's code)
UNCAUGHT = "exited on an uncaught {}"


@dataclass
class Job:
    """This process's rank of a job whose store a rank hosts: what it counts out in, and whether it lingers."""

    store: Any
    #: the attempt's prefix of every key here
    prefix: str
    rank: int
    world: int
    #: whether this process hosts the store (and lingers at exit)
    host: bool
    pid: int = field(default_factory=os.getpid)
    #: whether this process has counted out (or begun to)
    counted: bool = False
    #: global rank -> its process as it recorded it, where that is on this host (None: another host, or not
    #: understood), for the ranks whose record :mod:`.departed` read (a record is written once: read once)
    records: dict[int, tuple[str, int, int] | None] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> bool:
        """Whether this call is this process's one count-out (False: done already, or a forked child's)."""
        with self.lock:
            if self.counted or self.pid != os.getpid():
                return False
            self.counted = True
            return True


class Linger(NamedTuple):
    """What the host's wait at exit came to."""

    #: why it stopped: "counted out" (every rank), "gone" (every rank counted out or known gone), "timeout"
    #: (:data:`LINGER_S`), "store" (the store failed), "not the host" (no wait)
    ended: str
    waited_s: float
    #: ranks counted out when it stopped (this one included)
    counted: int
    world: int
    #: global rank -> how it ended, for each rank known to have ended otherwise than by a normal exit: counted out
    #: on its way to ``os._exit`` (the watchdog), or read gone without counting out (why)
    unclean: dict[int, str]

    def describe(self) -> str:
        """One line for the log."""
        how = "; ".join(f"global rank {r} {why}" for r, why in sorted(self.unclean.items()))
        said = {"counted out": "every rank has counted out",
                "gone": "every rank has counted out or is known gone",
                "timeout": f"{LINGER_S:g} s, the most it waits, ran out ({self.counted} of {self.world} ranks "
                           "counted out; the others are not known gone)",
                "store": "the store failed"}.get(self.ended, self.ended)
        return (f"triton_dist_tune: global rank 0 (hosting the job's store) stopped waiting at exit for the other "
                f"ranks after {self.waited_s:.2f} s: {said}{f' ({how})' if how else ''}")


_job: Job | None = None
#: global rank -> why this process gave up on it at an exchange (its beat stood still): evidence that it is gone
_given_up: dict[int, str] = {}


def register(store: Any, prefix: str, rank: int, world: int, host: bool) -> None:
    """This process is global rank ``rank`` of ``world`` in a job whose store global rank 0 hosts (``host``: this
    process): write which process it is, and count out at exit, the host after lingering (see the module
    docstring)."""
    global _job
    if _job is not None:  # an earlier start of this process (before destroy_process_group): this one counts out
        _job.take()
    job = _job = Job(store, prefix, rank, world, host)
    _given_up.clear()
    process = this_process()
    if process is not None:
        try:
            store.set(f"{prefix}process/{rank}", json.dumps({"process": process}))
        except Exception as exc:  # no record: the host cannot read this process gone from /proc
            log.debug("triton_dist_tune: could not record this rank's process in the store: %s", exc)
    atexit.register(_at_exit, job)


def given_up(ranks: Iterable[int], why: str) -> None:
    """This process gave up on global ranks ``ranks`` at an exchange, ``why`` (their beat stood still)."""
    for rank in ranks:
        _given_up.setdefault(rank, why)


def count_out(how: str) -> None:
    """Count this rank out now, ``how`` it ends, for a process about to end without its exit hooks (``os._exit``):
    on a client of its own, in a thread waited for at most :data:`COUNT_OUT_WAIT_S` (every error swallowed; nothing
    where this process has counted out already, or registered nothing)."""
    job = _job
    if job is None or not job.take():
        return

    def write() -> None:
        try:
            _write_out(own_client(job.store, COUNT_OUT_WAIT_S), job, how)
        except Exception as exc:  # the store is gone or slow: the host waits, or reads this process gone
            log.debug("triton_dist_tune: could not count this rank out: %s", exc)

    try:
        writer = threading.Thread(target=write, name="triton_dist_tune-count-out", daemon=True)
        writer.start()
    except RuntimeError:  # no new thread at the interpreter's exit: never wait on the store itself
        return
    writer.join(COUNT_OUT_WAIT_S)


def _at_exit(job: Job) -> None:
    if job.take():
        outcome = linger(job)
        if outcome.ended != "not the host":
            log.debug("%s", outcome.describe())


def _write_out(store: Any, job: Job, how: str) -> int:
    """Count ``job``'s rank out on ``store`` (its ``exited/<rank>`` first, then its line in ``exited/log``, then the
    count); returns the count."""
    store.set(f"{job.prefix}exited/{job.rank}", how)
    store.append(f"{job.prefix}exited/log", f"{job.rank} {' '.join(how.split())}\n")
    return int(store.add(f"{job.prefix}exited", 1))


def linger(job: Job) -> Linger:
    """Count this rank out; the host then waits, up to :data:`LINGER_S`, until every rank has counted out or is
    known gone (:class:`_Evidence`), so that a rank still reading the last exchange is not cut off by the store's
    end. The count is read before each look for evidence, so a rank read gone (its ``exited/<rank>`` not there)
    is never also in the count it is added to. It is read at the pace of the exchanges' waits
    (:func:`~triton_dist_tune.group.store_wait.poll_pause`: every 50 ms for the first second, then less and less
    often, every 0.25 s from 2.2 s on): a wait of the whole 5 s reads it about 43 times, not 250 (every 20 ms
    before: 253 requests in all, then 49, now 50 with the count-out's line in ``exited/log``, ``test_linger.py``),
    and notices the last count-out at most 0.25 s later."""
    started = time.monotonic()
    try:
        with store_silence.answering(job.store, LINGER_S):  # (a frozen host: cut after 6 s, never waited for)
            count = _write_out(job.store, job, ended_how())
        if not job.host:
            return Linger("not the host", 0.0, count, job.world, {})
        evidence, gone, ended = _Evidence(job), {}, "counted out"
        deadline, look_at, pace = started + LINGER_S, started, Pace(started, started)
        while count < job.world:
            now = time.monotonic()
            if now >= look_at:
                look_at = now + LOOK_S
                gone = evidence.look()
                if count + len(gone) >= job.world:
                    ended = "gone"
                    break
            if now >= deadline:
                ended = "timeout"
                break
            time.sleep(max(0.0, min(pace.next_look(), deadline) - now))
            pace.last = time.monotonic()
            count = int(job.store.add(f"{job.prefix}exited", 0))
        unclean = {rank: how for rank, how in count_outs(job).items() if how != NORMAL}
        return Linger(ended, time.monotonic() - started, count, job.world, {**unclean, **gone})
    except Exception as exc:  # the store is gone or failing: nothing to wait for
        log.debug("triton_dist_tune: the store failed while this rank counted out: %s", exc)
        return Linger("store", time.monotonic() - started, 0, job.world, {})


def ended_how() -> str:
    """How this process's exit that runs its exit hooks ends it: :data:`NORMAL`, or, where an uncaught exception
    ended the program (Python keeps it as ``sys.last_value`` before the hooks run; not read in an interactive
    session, where it may be an earlier line's), :data:`UNCAUGHT` with its class: what a peer that waited for this
    rank is told (before, a crash of the user's code counted out as ``exited normally``)."""
    exc = getattr(sys, "last_value", None)
    if isinstance(exc, BaseException) and not hasattr(sys, "ps1") and not sys.flags.interactive:
        return UNCAUGHT.format(type(exc).__name__)
    return NORMAL


def current() -> Job | None:
    """This process's rank of the job it registered in (None: none, e.g. torchrun's agent hosts the store)."""
    return _job


def count_outs(job: Job) -> dict[int, str]:
    """Global rank -> how it ended, for each rank that has counted out (``exited/log``), in one request that never
    waits. Plain text, cut to 80 characters: nothing read here is run."""
    text = (peek(job.store, f"{job.prefix}exited/log") or b"").decode(errors="replace")
    found = {}
    for line in text.splitlines():
        rank, _, how = line.partition(" ")
        if rank.isdigit() and len(rank) < 10:
            found[int(rank)] = how[:80]
    return found


class _Evidence:
    """The host's reading of which ranks that have not counted out are gone (see the module docstring)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        #: the other ranks' processes on this host (read at the first look)
        self.here: dict[int, tuple[str, int, int]] | None = None
        #: ranks whose ``exited/<rank>`` key was there: counted out (or about to be)
        self.out: set[int] = set()
        #: ranks whose process was read gone from /proc and that never counted out (final)
        self.gone: dict[int, str] = {}

    def look(self) -> dict[int, str]:
        """Global rank -> why, for the ranks known gone that have not counted out (read after the count)."""
        if self.here is None:
            self.here = self._processes_here()
        for rank, process in self.here.items():
            if rank not in self.out and rank not in self.gone and process_gone(process) and not self._out(rank):
                self.gone[rank] = killed_here(process[1])
        found = dict(self.gone)
        for rank, why in list(_given_up.items()):  # (a live one, frozen, may still count out: read each time)
            if rank != self.job.rank and rank not in found and rank not in self.out and not self._out(rank):
                found[rank] = f"is gone without counting out (this rank gave up on it: {why})"
        return found

    def _out(self, rank: int) -> bool:
        """Whether ``rank``'s ``exited/<rank>`` key is there (remembered once it is)."""
        if self.job.store.check([f"{self.job.prefix}exited/{rank}"]):
            self.out.add(rank)
            return True
        return False

    def _processes_here(self) -> dict[int, tuple[str, int, int]]:
        """The other ranks' process records that name a process on this host and pid namespace."""
        job = self.job
        ranks = [r for r in range(job.world) if r != job.rank]
        keys = [f"{job.prefix}process/{r}" for r in ranks]
        if keys and job.store.check(keys):
            values = [bytes(v) for v in job.store.multi_get(keys)]
        else:  # (a rank that could not write its record: read each, never waiting)
            values = [peek(job.store, key) or b"" for key in keys]
        found = {}
        for rank, value in zip(ranks, values, strict=True):
            process = parse_process(value.decode(errors="replace"))
            if on_this_host(process) and process is not None:
                found[rank] = process
        return found


def counted_out(store: Any, rank: int) -> bool:
    """Whether global rank ``rank`` of this process's job has counted out (its process ends or has ended: it comes to
    no exchange any more); False where this process registered nothing, or the store cannot say."""
    job = _job
    try:
        return job is not None and bool(store.check([f"{job.prefix}exited/{rank}"]))
    except Exception:
        return False


def gone_besides(reports: Sequence[Any], late: Sequence[int], global_ranks: Sequence[int]) -> str:
    """Words to add to the error of a wait that the failure board ended (:func:`.channel.ended_message`): the ranks
    of ``late`` (group ranks; ``global_ranks`` gives their global ranks) that no report says ended but whose process
    on this host is gone without counting out, as `` Also gone: group rank 3 (global 3), which is gone ...``. Such a
    rank was killed (a SIGKILL runs no exit hook, and its beat reads silent only a window later), and a peer's
    collective with it broke first: before, the error named that peer's broken collective and the ranks the board
    knew of, not the killed rank (``chaos.py``, job seed 1826462843). Empty where none is, or where this process
    cannot tell (best effort)."""
    ended = {report.rank for report in reports if report.ended}
    gone = gone_of([rank for rank in late if rank not in ended], global_ranks)
    said = [f"group rank {rank} (global {global_ranks[rank]}), which {why}" for rank, why in gone.items()]
    return f" Also gone: {'; '.join(said)}." if said else ""


def counted_out_of(late: Sequence[int], global_ranks: Sequence[int]) -> dict[int, str]:
    """The group ranks of ``late`` (``global_ranks`` gives their global ranks) that have counted out (their process
    ends or has ended: they come to no exchange any more), each with how (:func:`without_coming`), read in one
    request that never waits (:func:`count_outs`; before, a request per late rank, for the first 16); empty where
    this process registered nothing or the store fails. Best effort, for an error's words."""
    job = _job
    if job is None:
        return {}
    try:
        out = count_outs(job)
    except Exception as exc:  # the store is gone or failing: nothing to tell
        log.debug("triton_dist_tune: could not read the late ranks' count-outs: %s", exc)
        return {}
    return {rank: without_coming(out[global_ranks[rank]]) for rank in late
            if 0 <= rank < len(global_ranks) and global_ranks[rank] in out}


def without_coming(how: str) -> str:
    """What an error says of a rank that counted out ``how`` where its peers waited for it."""
    return f"ended its process without coming ({how})"


def killed_here(pid: int) -> str:
    """What an error (or the host's log) says of a rank whose process, ``pid`` on this host, is gone without
    counting out."""
    return f"is gone without counting out (its process, pid {pid} on this host, was killed or ended without its exit " \
           "hooks)"


def gone_of(late: Sequence[int], global_ranks: Sequence[int]) -> dict[int, str]:
    """The group ranks of ``late`` (``global_ranks`` gives their global ranks) whose process is known gone without
    counting out (on this host, or given up on by this process), each with why, in the order of their global ranks;
    empty where none is, or where this process cannot tell (registered nothing: torchrun's agent hosts the store;
    the store failing). Best effort, for an error's words."""
    others = {global_ranks[rank]: rank for rank in late if 0 <= rank < len(global_ranks)}
    job = _job
    if not others or job is None:
        return {}
    try:
        gone = _Evidence(job).look()
    except Exception:  # the store is gone or failing: nothing more to tell
        return {}
    return {others[g]: why for g, why in sorted(gone.items()) if g in others}

