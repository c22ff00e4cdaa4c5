"""The tuner's own control channel between the ranks of a group.

The tuner never issues a collective on the user's process group: its messages could then be matched against the
collectives inside the user's function. Instead every group gets a channel of its own:

- a torch.distributed group (any backend, subgroups included) talks through the job's key-value store, under a
  namespace made of the restart attempt, the group's name and a sequence number;
- an mpi4py communicator talks through a duplicate of it (``Dup`` gives it a separate message context);
- a single process talks to nobody.

All exchanges are one primitive, :meth:`Group.allgather`, with a deadline: a rank that does not show up in time
makes every waiting rank raise :class:`GroupTimeoutError` naming the missing ranks, never hang.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from . import settings
from .errors import BadInputError, GroupTimeoutError

DEFAULT_TIMEOUT_S = settings.DEFAULT_TIMEOUT_S
_POLL_S = 0.005
#: what torch.distributed.new_group returns on ranks that are not members of the new group
NON_MEMBER = -100

log = logging.getLogger("triton_dist_tune")


def default_timeout() -> float:
    """Seconds a rank waits for the others at one step (``TRITON_DIST_AUTOTUNE_TIMEOUT``, default 300)."""
    return settings.current().timeout


def wait_in_slices(wait: Callable[[float], Any], timeout: float, on_progress: Callable[[float], None],
                   every: float | None = None) -> None:
    """Call ``wait(seconds)`` (which raises when its time runs out) in slices of ``every`` seconds (default
    ``TRITON_DIST_AUTOTUNE_PROGRESS_S``, 30) until it returns, calling ``on_progress(seconds waited so far)`` after
    each slice that ran out. Re-raises when ``timeout`` seconds have passed, or at once when a slice failed before
    its time was up (not a timeout: e.g. the store went away)."""
    every = settings.current().progress_s if every is None else every
    start = time.monotonic()
    while True:
        left = timeout - (time.monotonic() - start)
        chunk = max(0.001, min(every, left))
        began = time.monotonic()
        try:
            wait(chunk)
            return
        except Exception:
            if chunk >= left or time.monotonic() - began < 0.9 * chunk:
                raise
            on_progress(time.monotonic() - start)


def report_waiting(rank: int, name: str, what: str, missing: Sequence[int], global_ranks: Sequence[int] | None,
                   waited: float, timeout: float) -> None:
    """The progress line of a rank that waits for others at a step of the protocol."""
    globals_ = f" (global {[global_ranks[r] for r in missing]})" if global_ranks else ""
    log.warning("triton_dist_tune: rank %d of group '%s' has waited %.0f s at '%s' for group ranks %s%s; giving up "
                "after %g s", rank, name, waited, what, list(missing), globals_, timeout)


class Group:
    """A group of ranks that tune together. Subclasses implement :meth:`allgather`."""

    rank: int = 0
    size: int = 1
    name: str = "single"
    #: what identifies the group in this process's state (decisions, tables): its kind, name and global ranks
    identity: tuple = ("single",)

    def __init__(self) -> None:
        #: held by a thread for a whole tuning on this group, so that two threads never interleave its exchanges
        self.lock = threading.RLock()

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        """Every rank contributes ``obj``; every rank gets the list of all contributions, by group rank.

        ``what`` names the step in the error raised when some rank does not arrive within ``timeout`` seconds.
        """
        raise NotImplementedError

    def broadcast(self, obj: Any, what: str, root: int = 0, timeout: float | None = None) -> Any:
        """Return the ``root`` rank's ``obj`` on every rank (the others' ``obj`` is ignored)."""
        return self.allgather(obj if self.rank == root else None, what, timeout)[root]

    def barrier(self, what: str, timeout: float | None = None) -> None:
        """Wait until every rank has arrived here."""
        self.allgather(None, what, timeout)


class SingleGroup(Group):
    """One process alone: every exchange returns at once."""

    def __init__(self) -> None:
        super().__init__()

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        return [obj]


class StoreGroup(Group):
    """A torch.distributed process group, talked to through the job's key-value store."""

    def __init__(self, pg: Any) -> None:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        super().__init__()
        self.rank = dist.get_rank(pg)
        if self.rank < 0:
            raise BadInputError(_NOT_A_MEMBER)
        self.size = dist.get_world_size(pg)
        self.global_ranks = list(dist.get_process_group_ranks(pg))
        self.name = c10d._get_process_group_name(pg) or "default"
        self.identity = ("torch", self.name, tuple(self.global_ranks))
        # a group destroyed and created again (same name and ranks, maybe the same store) talks under a new prefix:
        # every member creates the channels of a group in the same order, so the count agrees
        incarnation = _incarnations[self.identity] = _incarnations.get(self.identity, 0) + 1
        attempt = settings.current().restart_count
        self._prefix = f"triton_dist_tune/attempt{attempt}/{self.name}/{incarnation}/"
        self._seq = 0
        self._lock = threading.Lock()

    @property
    def store(self) -> Any:
        """The job's key-value store, fetched on each use and never kept: it must not outlive the process group
        (a store kept here would keep rank 0's store server thread alive until the interpreter's exit)."""
        return _job_store()

    def _key(self, seq: int, rank: int) -> str:
        return f"{self._prefix}{seq}/{rank}"

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        timeout = default_timeout() if timeout is None else timeout
        with self._lock:
            self._seq += 1
            seq = self._seq
        keys = [self._key(seq, r) for r in range(self.size)]
        self.store.set(keys[self.rank], pickle.dumps(obj))
        started = time.monotonic()
        try:
            wait_in_slices(lambda s: self.store.wait(keys, timedelta(seconds=s)), timeout,
                           lambda waited: self._report(what, keys, waited, timeout))
        except Exception as exc:  # the store raises DistStoreError (or RuntimeError on older torch) on timeout
            waited = time.monotonic() - started
            missing = [r for r in range(self.size) if r != self.rank and not self._arrived(keys[r])]
            message = self._late_message(what, missing, timeout)
            if waited < 0.9 * timeout:  # not a timeout: the store itself went away
                message = (f"triton_dist_tune: rank {self.rank} of group '{self.name}' lost the key-value store "
                           f"after {waited:.1f} s at '{what}' ({type(exc).__name__}): the process hosting it (rank 0 "
                           "without torchrun) has ended")
            raise GroupTimeoutError(message) from exc
        values = self.store.multi_get(keys)
        if seq > 1:
            self.store.delete_key(self._key(seq - 1, self.rank))  # every rank has read round seq - 1 by now
        return [pickle.loads(v) for v in values]

    def _report(self, what: str, keys: Sequence[str], waited: float, timeout: float) -> None:
        missing = [r for r in range(self.size) if r != self.rank and not self._arrived(keys[r])]
        report_waiting(self.rank, self.name, what, missing, self.global_ranks, waited, timeout)

    def _arrived(self, key: str) -> bool:
        try:
            return self.store.check([key])
        except Exception:
            return False

    def _late_message(self, what: str, missing: Sequence[int], timeout: float) -> str:
        globals_ = [self.global_ranks[r] for r in missing]
        return (
            f"triton_dist_tune: rank {self.rank} of group '{self.name}' (global ranks {self.global_ranks}) waited "
            f"{timeout:g} s at '{what}' for group ranks {list(missing)} (global {globals_}), which never arrived: "
            "they crashed, hung, or called the tuned function with another autotune_pg or key."
        )


def _job_store() -> Any:
    """The default group's key-value store (raises :class:`BadInputError` once the process group is destroyed)."""
    from torch.distributed import distributed_c10d as c10d

    try:
        return c10d._get_default_store()
    except (RuntimeError, ValueError) as exc:
        raise BadInputError(f"triton_dist_tune: the process group is gone ({exc}): the tuner needs it to exchange "
                            "with the other ranks") from exc


class MpiGroup(Group):
    """An mpi4py communicator, talked to through a duplicate of it."""

    def __init__(self, comm: Any, timeout: float | None = None) -> None:
        super().__init__()
        self.name = f"mpi:{comm.Get_name() or 'comm'}"
        if not hasattr(comm, "Idup"):
            self.comm = comm.Dup()
        else:  # Dup is collective: a rank that never calls with this communicator must not hang the others
            self.comm, request = comm.Idup()
            self._wait(request, "setting up its control channel (Idup)", timeout, comm.Get_rank())
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.identity = ("mpi", self.name, _world_ranks(comm))

    def _wait(self, request: Any, what: str, timeout: float | None, rank: int) -> None:
        timeout = default_timeout() if timeout is None else timeout
        start = time.monotonic()
        deadline, report_at = start + timeout, start + settings.current().progress_s
        while not request.Test():
            if time.monotonic() > report_at:
                report_waiting(rank, self.name, what, [], None, time.monotonic() - start, timeout)
                report_at += settings.current().progress_s
            if time.monotonic() > deadline:
                raise GroupTimeoutError(
                    f"triton_dist_tune: rank {rank} of MPI group '{self.name}' waited {timeout:g} s at "
                    f"'{what}' for ranks that never arrived: they crashed, hung, or called with another group."
                )
            time.sleep(_POLL_S)

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        self._wait(self.comm.Ibarrier(), what, timeout, self.rank)
        return self.comm.allgather(obj)


def _world_ranks(comm: Any) -> tuple:
    """The COMM_WORLD ranks of an mpi4py communicator's members (its size alone where they cannot be found)."""
    try:
        from mpi4py import MPI

        return tuple(comm.Get_group().Translate_ranks(list(range(comm.Get_size())), MPI.COMM_WORLD.Get_group()))
    except Exception:
        return (comm.Get_size(),)


_NOT_A_MEMBER = ("autotune_pg: this rank is not a member of the process group it was called with "
                 "(torch.distributed.new_group returns GroupMember.NON_GROUP_MEMBER, -100, on the ranks outside the "
                 "new group): call the tuned function with autotune_pg only on the group's members")


class GroupIndex:
    """The channels of the groups this process tuned with, found by the group object itself.

    An entry holds a weak reference to its group object and is used only while that very object is alive: a new
    group that Python happens to put at a freed group's address never finds the old group's channel (``id`` is
    used as a dict key for speed, never as an identity). :meth:`find` is cheap enough for the hot path.
    """

    def __init__(self) -> None:
        #: id(group object) -> (weak reference to it, its channel, the channel's identity); read directly by the
        #: hot path, which checks ``entry[0]() is pg`` itself
        self.entries: dict[int, tuple[Any, Group, tuple]] = {}
        self._lock = threading.Lock()

    def find(self, pg: Any) -> Group | None:
        """The channel of ``pg`` when one exists for this very object, else None."""
        entry = self.entries.get(id(pg))
        if entry is not None and entry[0]() is pg:
            return entry[1]
        return None

    def add(self, pg: Any, make: Callable[[], Group]) -> Group:
        """The channel of ``pg``, made by ``make()`` when it has none yet."""
        with self._lock:
            found = self.find(pg)
            if found is not None:
                return found
            group = make()
            key = id(pg)
            try:
                ref: Any = weakref.ref(pg, lambda _, k=key: self._drop(k))
            except TypeError:  # not weakly referenceable: keep it alive instead (its id can then never be reused)
                ref = (lambda obj: lambda: obj)(pg)
            self.entries[key] = (ref, group, group.identity)
            return group

    def _drop(self, key: int) -> None:
        entry = self.entries.get(key)
        if entry is not None and entry[0]() is None:
            del self.entries[key]

    def clear(self) -> None:
        """Forget every channel."""
        with self._lock:
            self.entries.clear()


_groups = GroupIndex()
_incarnations: dict[tuple, int] = {}
_warned_world_size = False


def _is_mpi_comm(obj: Any) -> bool:
    return type(obj).__module__.startswith("mpi4py") and hasattr(obj, "Dup")


def find_group(pg: Any) -> Group | None:
    """The channel already made for ``pg`` (an explicit ``autotune_pg``), or None."""
    return _groups.find(pg)


def channel_entries() -> dict[int, tuple[Any, Group, tuple]]:
    """The hot path's view of the channels: see :attr:`GroupIndex.entries`."""
    return _groups.entries


def resolve_group(pg: Any = None) -> Group:
    """The control channel for ``autotune_pg``: a torch ProcessGroup, an mpi4py communicator, or None.

    None means the default torch.distributed group when it is initialized, else a single process (with a warning
    when a launcher says the job has several ranks). One channel exists per group object and process, so that
    every tuned function on that group shares its sequence numbers.
    """
    global _warned_world_size
    if pg is None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            world = settings.current().world_size
            if world is not None and world > 1 and not _warned_world_size:
                _warned_world_size = True
                log.warning("triton_dist_tune: WORLD_SIZE is %d but torch.distributed is not initialized: each rank "
                            "tunes alone and the ranks may choose differently; call "
                            "triton_dist_tune.init_distributed() (or init_process_group) first, or pass "
                            "autotune_pg=", world)
            return _SINGLE
        pg = dist.group.WORLD
    if isinstance(pg, int) and pg == NON_MEMBER:
        raise BadInputError(_NOT_A_MEMBER)
    found = _groups.find(pg)
    if found is not None:
        return found
    if _is_mpi_comm(pg):
        make: Callable[[], Group] = lambda: MpiGroup(pg)  # noqa: E731
    else:
        from torch.distributed import ProcessGroup

        if not isinstance(pg, ProcessGroup):
            raise BadInputError(
                f"autotune_pg must be a torch.distributed ProcessGroup, an mpi4py communicator or None, "
                f"not {type(pg).__name__}"
            )
        make = lambda: StoreGroup(pg)  # noqa: E731
    return _groups.add(pg, lambda: _single_if_alone(make()))


def _single_if_alone(group: Group) -> Group:
    return _SINGLE if group.size == 1 else group


def forget_groups() -> None:
    """Drop every cached channel (not needed after ``destroy_process_group``: channels follow their group
    objects)."""
    _groups.clear()


_SINGLE = SingleGroup()
