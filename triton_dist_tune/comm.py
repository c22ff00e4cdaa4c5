"""The tuner's own control channel between the ranks of a group.

The tuner never issues a collective on the user's process group: its messages could then be matched against the
collectives inside the user's function. Instead every group gets a channel of its own:

- a torch.distributed group (any backend, subgroups included) talks through the job's key-value store, under a
  namespace made of the restart attempt, the group's name, its global ranks, its incarnation and a sequence
  number; each exchange gathers to group rank 0 and broadcasts one combined result, so a rank's requests per
  exchange do not grow with the group;
- an mpi4py communicator talks through a duplicate of it (``Dup`` gives it a separate message context);
- a single process talks to nobody.

All exchanges are one primitive, :meth:`Group.combine` (``allgather``, ``broadcast`` and ``barrier`` are made of
it), with a deadline: a rank that does not show up in time
makes every waiting rank raise :class:`GroupTimeoutError` naming the missing ranks, never hang.
"""

from __future__ import annotations

import hashlib
import logging
import operator
import pickle
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from . import settings
from .errors import BadInputError, GroupTimeoutError
from .space import fingerprint

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
    """A group of ranks that tune together. Subclasses implement :meth:`combine`."""

    rank: int = 0
    size: int = 1
    name: str = "single"
    #: what identifies the group in this process's state (decisions, tables): its kind, name and global ranks
    identity: tuple = ("single",)

    def __init__(self) -> None:
        #: held by a thread for a whole tuning on this group, so that two threads never interleave its exchanges
        self.lock = threading.RLock()

    def combine(self, obj: Any, what: str, fn: Callable[[list[Any]], Any], timeout: float | None = None) -> Any:
        """Every rank contributes ``obj``; ``fn`` (run once, on group rank 0) turns the list of contributions, by
        group rank, into one result, which every rank gets back.

        ``what`` names the step in the error raised when some rank does not arrive within ``timeout`` seconds. An
        exception raised by ``fn`` is raised on every rank (as :class:`ExchangeError`). Give a ``fn`` whose result
        does not grow with the group (a maximum, the ranks that failed) to keep the traffic linear in its size.
        """
        raise NotImplementedError

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        """Every rank contributes ``obj``; every rank gets the list of all contributions, by group rank."""
        return self.combine(obj, what, list, timeout)

    def broadcast(self, obj: Any, what: str, root: int = 0, timeout: float | None = None) -> Any:
        """Return the ``root`` rank's ``obj`` on every rank (the others' ``obj`` is ignored and not sent)."""
        return self.combine(obj if self.rank == root else None, what, operator.itemgetter(root), timeout)

    def barrier(self, what: str, timeout: float | None = None) -> None:
        """Wait until every rank has arrived here."""
        self.combine(None, what, _nothing, timeout)


def _nothing(values: list[Any]) -> None:
    return None


class ExchangeError(BadInputError):
    """The combining function of an exchange raised on group rank 0; every rank raises this."""


@dataclass(frozen=True)
class _Failed:
    """What rank 0 sends instead of a result when the combining function raised."""

    message: str


def _run_on_root(fn: Callable[[list[Any]], Any], values: list[Any]) -> Any:
    try:
        return fn(values)
    except Exception as exc:
        return _Failed(f"{type(exc).__name__}: {exc}")


def _unwrap(result: Any, what: str) -> Any:
    if isinstance(result, _Failed):
        raise ExchangeError(f"triton_dist_tune: combining the ranks' messages at '{what}' failed: {result.message}")
    return result


class SingleGroup(Group):
    """One process alone: every exchange returns at once."""

    def __init__(self) -> None:
        super().__init__()

    def combine(self, obj: Any, what: str, fn: Callable[[list[Any]], Any], timeout: float | None = None) -> Any:
        return _unwrap(_run_on_root(fn, [obj]), what)


def namespace(name: str, global_ranks: Sequence[int], attempt: object, incarnation: int = 1) -> str:
    """The store key prefix of a group: its name, a fingerprint of its global ranks, the restart attempt and the
    group's incarnation in this process (a group destroyed and created again talks under a new prefix).

    Two groups share a prefix only if they have the same name *and* the same ranks in the same attempt, so groups
    that two ranks created in different orders (and so named alike) never read each other's keys.
    """
    ranks = hashlib.sha256(",".join(map(str, global_ranks)).encode()).hexdigest()[:8]
    return f"tdt/{attempt}/{name}/{ranks}/{incarnation}/"


class StoreGroup(Group):
    """A torch.distributed process group, talked to through the job's key-value store.

    One exchange (sequence number ``s``) is a gather to group rank 0 and a broadcast of one combined result:

    - rank ``r > 0`` sets ``s/r`` to its message, waits for ``s/all``, reads it and deletes ``s/r``;
    - rank 0 waits for every ``s/r``, reads them in one request, sets ``s/all`` to ``fn`` of the list and deletes
      ``s-1/all`` (every rank has read it: each has arrived at ``s``).

    Every rank makes four store requests per exchange whatever the group size, and the server moves each message
    once in and the result once out to each rank: linear in the group size when the result does not grow with it.
    """


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
        self._prefix = namespace(self.name, self.global_ranks, attempt, incarnation)
        self._seq = 0
        self._lock = threading.Lock()

    @property
    def store(self) -> Any:
        """The job's key-value store, fetched on each use and never kept: it must not outlive the process group
        (a store kept here would keep rank 0's store server thread alive until the interpreter's exit)."""
        return _job_store()

    def _key(self, seq: int, rank: int | str) -> str:
        return f"{self._prefix}{seq}/{rank}"

    def combine(self, obj: Any, what: str, fn: Callable[[list[Any]], Any], timeout: float | None = None) -> Any:
        timeout = default_timeout() if timeout is None else timeout
        with self._lock:
            self._seq += 1
            seq = self._seq
        if self.rank == 0:
            result = self._gather_and_send(seq, obj, fn, what, timeout)
        else:
            result = self._send_and_receive(seq, obj, what, timeout)
        return _unwrap(result, what)

    def _gather_and_send(self, seq: int, obj: Any, fn: Callable[[list[Any]], Any], what: str,
                         timeout: float) -> Any:
        keys = [self._key(seq, r) for r in range(1, self.size)]
        self._wait(keys, what, timeout, lambda: [r for r in range(1, self.size) if not self._arrived(keys[r - 1])])
        values = [obj, *(pickle.loads(v) for v in self.store.multi_get(keys))]
        result = _run_on_root(fn, values)
        try:
            payload = pickle.dumps(result)
        except Exception as exc:  # the others must still get an answer, not wait out the deadline
            result = _Failed(f"the result cannot be pickled ({type(exc).__name__}: {exc})")
            payload = pickle.dumps(result)
        self.store.set(self._key(seq, "all"), payload)
        if seq > 1:
            self.store.delete_key(self._key(seq - 1, "all"))
        return result

    def _send_and_receive(self, seq: int, obj: Any, what: str, timeout: float) -> Any:
        mine, combined = self._key(seq, self.rank), self._key(seq, "all")
        self.store.set(mine, pickle.dumps(obj))
        self._wait([combined], what, timeout, lambda: self._missing_seen_from(seq))
        result = pickle.loads(self.store.get(combined))
        self.store.delete_key(mine)  # rank 0 has read it: it wrote the result
        return result

    def _missing_seen_from(self, seq: int) -> list[int]:
        """On a timeout at a rank other than 0: the ranks whose message is not in the store, or rank 0 when every
        other rank's is (then rank 0 never came to combine them)."""
        late = [r for r in range(1, self.size) if r != self.rank and not self._arrived(self._key(seq, r))]
        return late or [0]

    def _wait(self, keys: list[str], what: str, timeout: float, missing: Callable[[], list[int]]) -> None:
        started = time.monotonic()
        try:
            wait_in_slices(lambda seconds: self.store.wait(keys, timedelta(seconds=seconds)), timeout,
                           lambda waited: report_waiting(self.rank, self.name, what, missing(), self.global_ranks,
                                                         waited, timeout))
        except Exception as exc:  # the store raises DistStoreError (or RuntimeError on older torch) on timeout
            waited = time.monotonic() - started
            if waited < 0.9 * timeout:  # not a timeout: the store itself went away
                message = (f"triton_dist_tune: rank {self.rank} of group '{self.name}' lost the key-value store "
                           f"after {waited:.1f} s at '{what}' ({type(exc).__name__}): the process hosting it (rank 0 "
                           "without torchrun) has ended")
            else:
                message = self._late_message(what, missing(), timeout)
            raise GroupTimeoutError(message) from exc

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

    def combine(self, obj: Any, what: str, fn: Callable[[list[Any]], Any], timeout: float | None = None) -> Any:
        self._wait(self.comm.Ibarrier(), what, timeout, self.rank)  # every rank is here: the rest cannot hang
        values = self.comm.gather(obj, root=0)
        return _unwrap(self.comm.bcast(_run_on_root(fn, values) if self.rank == 0 else None, root=0), what)

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        self._wait(self.comm.Ibarrier(), what, timeout, self.rank)
        return self.comm.allgather(obj)


@dataclass(frozen=True)
class Agreement:
    """What :func:`agree` found: the ranks' notes, and for each field where ranks differ, the groups of ranks that
    hold each value (with the start of that value's text)."""

    notes: list[tuple[int, str]]
    differ: dict[str, list[tuple[list[int], str]]]


def agree(group: Group, fields: Mapping[str, str], what: str, timeout: float | None = None,
          note: str | None = None) -> Agreement:
    """Check that every rank holds the same text in each of ``fields``, sending fingerprints, not the texts.

    One exchange carries each rank's fingerprints and ``note`` (a local problem to report, or None). Only where
    ranks differ, a second exchange (on every rank, since all learn of the difference together) carries the start
    of the text from one rank per distinct value, for the error message. ``fields`` must have the same names, in
    the same order, on every rank.
    """
    names = list(fields)
    mine = (tuple(fingerprint(fields[n]) for n in names), note)

    def summarize(values: list[Any]) -> tuple[list[tuple[int, str]], dict[int, list[list[int]]]]:
        notes = [(r, n) for r, (_, n) in enumerate(values) if n]
        split: dict[int, list[list[int]]] = {}
        for i in range(len(names)):
            holders: dict[str, list[int]] = {}
            for r, (prints, _) in enumerate(values):
                holders.setdefault(prints[i], []).append(r)
            if len(holders) > 1:
                split[i] = sorted(holders.values())
        return notes, split

    notes, split = group.combine(mine, what, summarize, timeout)
    if not split:
        return Agreement(notes, {})
    sample = {i: fields[names[i]][:200] for i, groups in split.items() if any(g[0] == group.rank for g in groups)}
    texts = group.combine(sample, f"{what} (details of the difference)", list, timeout)
    differ = {names[i]: [(ranks, texts[ranks[0]][i]) for ranks in groups] for i, groups in split.items()}
    return Agreement(notes, differ)


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
