"""The channel of an mpi4py communicator: exchanges through a duplicate of it, every step of one waited for until
its deadline.

An exchange moves bytes in nonblocking collectives, each polled until it completes or the deadline passes: the
ranks' message lengths (``Iallgather``: every rank has come to the exchange), their messages (``Igatherv`` to group
rank 0 for :meth:`MpiGroup.combine`, ``Iallgatherv`` for :meth:`MpiGroup.allgather`) and, for ``combine``, rank 0's
result (``Ibcast``: its length and first bytes, then the rest of a long one). No step blocks: a rank whose wait ran
out leaves its request pending and raises; a rank that comes to the exchange later completes its first step against
that request, and would wait forever in a blocking second step that the rank which gave up never joins (it waits in
``MPI_Finalize``). Here it waits until the deadline and raises too, and the job ends.

A channel whose wait ran out is out of step for good: its pending request is matched, in order, by the next step any
rank posts on the duplicate, so a later exchange of the rank that gave up would meet a late rank's next step of the
abandoned one (lengths read as a message, ``MPI_ERR_TRUNCATE``). So every later exchange on it raises
:class:`GroupTimeoutError` at once, naming the exchange that broke it, and posts nothing. So does a channel whose wait
was interrupted (Ctrl-C's ``KeyboardInterrupt``, SIGTERM's ``SystemExit``, caught by the caller), its request as
pending (before, an interrupt left the channel in step: the call again met the late rank's steps, ``MPI Error in NBC
subrequest``, mpi4py's ``MPI_ERR_TRUNCATE``).

So is a channel whose setup ran out, or was interrupted: the ``Idup`` on the caller's communicator stays pending,
and a late rank's ``Idup`` matches it. Its channel is kept (:func:`.resolve._resolve` raises
:attr:`MpiGroup.setup_error` once), so a later call on that communicator raises at once rather than posting a second
``Idup``, which MPI would match with a late rank's next collective on the communicator, the caller's own included
(before: each later call waited the whole timeout at a new ``Idup``, "for ranks that never arrived" while the late
rank waited at an exchange on the first one's duplicate, and a collective of the caller's own on the communicator
met a pending ``Idup``: ``MPI Error in NBC subrequest``, error 15, ``MPI_ERR_TRUNCATE``, and it never completed).
Not fixed, and no fault of the later calls: with Open MPI (5.0.11) the one pending ``Idup`` posts its later steps as
it progresses, so a collective of the caller's own posted on the communicator before the late rank's ``Idup``
completes it can meet them (wrong results, ``MPI_ERR_INTERN`` on the late rank; open-mpi/ompi#2025); the error says
to end the job.
"""

from __future__ import annotations

import sys
import time
from array import array
from collections.abc import Callable
from typing import Any

from .. import settings
from ..errors import GroupTimeoutError
from .channel import Group
from .messages import combine_payloads, pack, unpack
from .rank_names import renumbered
from .store_texts import late_causes
from .waiting import report_waiting

#: a pending request is looked at without a pause for this long (a step of ranks that are all there needs only
#: looks: each drives MPI's progress), then with pauses from :data:`_FIRST_POLL_S`, doubling up to :data:`_POLL_S`
_SPIN_S = 0.001
_FIRST_POLL_S = 0.0001
_POLL_S = 0.005
#: bytes of rank 0's result broadcast at once with its length: an exchange's result is mostly shorter
_FIRST_BYTES = 4096
#: the setup's step, as its timeout and a later call's error name it
SETUP = "setting up its control channel (Idup)"
#: every step whose wait ran out (its request, and for a setup the duplicate it fills), kept for the life of the
#: process: MPI still holds the addresses of its buffers, and writes into them when the late ranks come. mpi4py's
#: request holds its buffers only while it lives, so a request dropped with the raise freed them under MPI, and the
#: late ranks' step wrote into freed memory (on 4 ranks the pytest-mpi run of test_mpi.py ended in a segmentation
#: fault while garbage-collecting, 2 runs in 3). Kept apart from the channel, which goes with the caller's
#: communicator object. A few bytes each: one per wait that ran out.
ABANDONED: list[Any] = []


class MpiGroup(Group):
    """An mpi4py communicator, talked to through a duplicate of it.

    Messages are encoded as plain data (:mod:`.codec`) like the key-value store's, so a value that is not plain
    data is refused alike on every launcher, and they move as raw bytes (mpi4py's buffer methods): nothing the
    other ranks send is unpickled."""

    def __init__(self, comm: Any, timeout: float | None = None) -> None:
        super().__init__()
        from mpi4py import MPI

        #: what broke the channel: an exchange step whose wait ran out, its request left pending (None: in step)
        self.broken: str | None = None
        #: the setup's timeout, or its interrupt (its ``Idup`` left pending), raised once by :meth:`raise_setup_error`
        self.setup_error: BaseException | None = None
        self._setup: Any = None  # the setup's request, kept while it may be pending

        self._byte = MPI.BYTE
        self.name = self.title = f"mpi:{comm.Get_name() or 'comm'}"
        self.member_ranks = _world_ranks(comm)  # (named in the setup's timeout too)
        self.rank = comm.Get_rank()  # (the duplicate's, which an Idup whose wait ran out cannot be asked)
        self.size = comm.Get_size()
        self.identity = ("mpi", self.name, self.member_ranks or (self.size,))
        if not hasattr(comm, "Idup"):
            self.comm = comm.Dup()
        else:  # Dup is collective: a rank that never calls with this communicator must not hang the others
            self.comm, self._setup = comm.Idup()
            timeout, every = _deadlines(timeout)
            try:
                self._wait(self._setup, SETUP, timeout, every, self.rank)
            except BaseException as exc:  # the channel is kept broken: see the module's docstring (before, an
                self.setup_error = exc  # interrupt's was dropped, and a call again posted a second Idup)
                ABANDONED.append(self.comm)  # the handle the pending Idup writes when the late ranks come

    def raise_setup_error(self) -> None:
        """Raise the setup's timeout (or interrupt), once: the call that set the channel up raises it, later calls on
        the communicator meet :attr:`broken` at their first exchange."""
        error, self.setup_error = self.setup_error, None
        if error is not None:
            raise error

    def _usable(self, what: str) -> None:
        """Raise :class:`GroupTimeoutError` at once where an earlier wait ran out (:attr:`broken`)."""
        if self.broken is not None and SETUP in self.broken:
            raise GroupTimeoutError(
                f"triton_dist_tune: rank {self.rank} of MPI group '{self.name}' cannot exchange at '{what}': the "
                f"channel was never set up: {self.broken}, and that Idup is still pending on the communicator (MPI "
                "matches collectives in order, so another Idup would meet a late rank's next collective on it, "
                "yours included); nothing was posted. Until the late ranks' Idup completes it, Open MPI may match "
                "a collective of your own on the communicator with its later steps (open-mpi/ompi#2025: wrong "
                "results, MPI_ERR_TRUNCATE): end the job, and tune again in a new one (the journals resume).")
        if self.broken is not None:
            raise GroupTimeoutError(
                f"triton_dist_tune: rank {self.rank} of MPI group '{self.name}' cannot exchange at '{what}': the "
                f"channel is out of step since {self.broken} (a request MPI matches in order is still pending, so "
                "a new exchange would meet another rank's step of the abandoned one); nothing was posted. Tune on "
                "this communicator again in a new job (the journals resume), or pass a new one (comm.Dup()) on "
                "every rank.")

    def _wait(self, request: Any, what: str, timeout: float, every: float, rank: int, since: float | None = None,
              later_step: bool = False) -> None:
        """Poll ``request`` until it completes; raise :class:`GroupTimeoutError` once ``timeout`` seconds have passed
        since ``since`` (default: now), with a progress line every ``every`` seconds. ``later_step``: a step after
        every rank had come to the exchange. Left by a raise, its timeout's or an interrupt's (Ctrl-C's
        ``KeyboardInterrupt``, SIGTERM's ``SystemExit`` in a tuning), the request stays pending: it is kept
        (:data:`ABANDONED`) and the channel is :attr:`broken`."""
        try:
            self._poll(request, what, timeout, every, rank, since, later_step)
        except BaseException as exc:
            ABANDONED.append(request)  # with its buffers, which MPI may still write (see ABANDONED)
            if self.broken is None:  # (before, an interrupt left it in step: the call again met the late rank's
                # steps of the abandoned exchange, mpi4py's MPI_ERR_TRUNCATE, and MPI wrote into freed buffers)
                how = (f"ran out after {timeout:g} s" if isinstance(exc, GroupTimeoutError)
                       else f"was interrupted ({type(exc).__name__})")
                self.broken = f"its wait at '{what}' {how}"
            raise

    def _poll(self, request: Any, what: str, timeout: float, every: float, rank: int, since: float | None,
              later_step: bool) -> None:
        """:meth:`_wait`'s looks at ``request``, raising its timeout."""
        began = time.monotonic()
        start = began if since is None else since
        deadline, report_at = start + timeout, start + every
        pause = 0.0
        while not request.Test():
            now = time.monotonic()
            if now > report_at:
                report_waiting(rank, self.name, what, [], None, now - start, timeout)
                report_at += every
            if now > deadline:
                world = list(self.member_ranks)
                if renumbered(world) and 0 <= rank < len(world):  # a sub-communicator
                    where = f"rank {rank} (world rank {world[rank]}) of MPI group '{self.name}' (world ranks {world})"
                else:
                    where = f"rank {rank} of MPI group '{self.name}'"
                where += f" waited {timeout:g} s at '{what}'"
                if later_step:
                    raise GroupTimeoutError(
                        f"triton_dist_tune: {where} after every rank had come to it, for ranks that left it: one "
                        "gave up before this rank came (its own wait ran out: its error says so), crashed or hung.")
                raise GroupTimeoutError(f"triton_dist_tune: {where} for ranks that never arrived: {late_causes()}")
            if now - began < _SPIN_S:
                continue  # a step of ranks that are all there completes within microseconds of looks
            time.sleep(pause)
            pause = min(_POLL_S, max(_FIRST_POLL_S, 2 * pause))

    def _messages(self, obj: Any, what: str, timeout: float, every: float,
                  to_all: bool) -> tuple[list[bytes] | None, float]:
        """Every rank's message (by group rank) on group rank 0, or on every rank where ``to_all`` (None elsewhere),
        and the moment every rank had come to the exchange (the later steps' deadline runs from it)."""
        self._usable(what)
        data = pack(obj, self.rank, what)
        lengths = array("q", bytes(8 * self.size))
        self._wait(self.comm.Iallgather(array("q", [len(data)]), lengths), what, timeout, every, self.rank)
        arrived = time.monotonic()
        counts = list(lengths)
        places = [sum(counts[:r]) for r in range(self.size)]
        into = bytearray(sum(counts)) if to_all or self.rank == 0 else None
        received = [into, counts, places, self._byte] if into is not None else None
        request = self.comm.Iallgatherv(data, received) if to_all else self.comm.Igatherv(data, received, root=0)
        self._wait(request, what, timeout, every, self.rank, arrived, later_step=True)
        messages = None if into is None else [bytes(into[p:p + n]) for p, n in zip(places, counts, strict=True)]
        return messages, arrived

    def combine(self, obj: Any, what: str, fn: Callable[[list[Any]], Any], timeout: float | None = None) -> Any:
        timeout, every = _deadlines(timeout)
        payloads, arrived = self._messages(obj, what, timeout, every, to_all=False)
        result = combine_payloads(fn, payloads, what) if payloads is not None else b""
        return unpack(self._from_rank_0(result, what, timeout, every, arrived), what, self.rank)

    def _from_rank_0(self, result: bytes, what: str, timeout: float, every: float, arrived: float) -> bytes:
        """Group rank 0's ``result`` on every rank: its length and first bytes in one broadcast of
        :data:`_FIRST_BYTES`, the rest (a long result only) in a second."""
        first = bytearray(_FIRST_BYTES)
        if self.rank == 0:
            first[:8] = len(result).to_bytes(8, "little")
            first[8:8 + len(result)] = result[:_FIRST_BYTES - 8]
        self._wait(self.comm.Ibcast([first, self._byte], root=0), what, timeout, every, self.rank, arrived,
                   later_step=True)
        length = int.from_bytes(first[:8], "little")
        if length <= _FIRST_BYTES - 8:
            return bytes(first[8:8 + length])
        rest = bytearray(result[_FIRST_BYTES - 8:]) if self.rank == 0 else bytearray(length - (_FIRST_BYTES - 8))
        self._wait(self.comm.Ibcast([rest, self._byte], root=0), what, timeout, every, self.rank, arrived,
                   later_step=True)
        return bytes(first[8:]) + bytes(rest)

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        timeout, every = _deadlines(timeout)
        payloads, _ = self._messages(obj, what, timeout, every, to_all=True)
        assert payloads is not None
        return unpack(combine_payloads(list, payloads, what, self.rank), what, self.rank)


def _deadlines(timeout: float | None) -> tuple[float, float]:
    """An exchange's timeout (``timeout``, else ``TRITON_DIST_AUTOTUNE_TIMEOUT``) and the seconds between its progress
    lines, read from the environment once per exchange (a read costs about 35 us: read at every step, an exchange took
    0.19 ms against 0.11, benchmarks/bench_mpi_exchange.py)."""
    now = settings.current()
    return (now.timeout if timeout is None else timeout), now.progress_s


def _world_ranks(comm: Any) -> tuple:
    """The COMM_WORLD ranks of an mpi4py communicator's members (none where they cannot be found)."""
    try:
        from mpi4py import MPI

        ranks = comm.Get_group().Translate_ranks(list(range(comm.Get_size())), MPI.COMM_WORLD.Get_group())
    except Exception:
        return ()
    return tuple(int(r) for r in ranks) if all(r is not None and r >= 0 for r in ranks) else ()


def is_communicator(obj: Any) -> bool:
    """Whether ``obj`` is an mpi4py communicator: an ``MPI.Comm``, of mpi4py's classes or of a subclass defined
    anywhere (mpi4py's ``util.pkl5``, a team's own; before, only classes of mpi4py's modules were taken, so a team's
    subclass was refused as "not an mpi4py communicator", and any object of mpi4py's with a ``Dup``, an
    ``MPI.Group``, ``MPI.Info`` or ``MPI.Datatype``, was taken for one and failed in mpi4py's ``AttributeError``).
    Read from ``sys.modules``: no object of mpi4py's exists where ``mpi4py.MPI`` was never imported."""
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and isinstance(obj, mpi.Comm)


def not_a_communicator(obj: Any) -> str:
    """Why ``obj``, an object of mpi4py's, is not a group, for an error: what it is, and for an ``MPI.Group`` (the
    members of one, ``comm.Get_group()``) how to make its communicator."""
    what = f"an mpi4py {type(obj).__name__}, not a communicator"
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and isinstance(obj, mpi.Group):
        what += " (an MPI.Group names ranks; its communicator is comm.Create_group(group), made on its members)"
    return what

