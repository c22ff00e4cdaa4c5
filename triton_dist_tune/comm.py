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

import math
import os
import pickle
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from .errors import BadInputError, GroupTimeoutError

DEFAULT_TIMEOUT_S = 300.0
_POLL_S = 0.005


def default_timeout() -> float:
    """Seconds a rank waits for the others at one step (``TRITON_DIST_AUTOTUNE_TIMEOUT``, default 300)."""
    value = os.environ.get("TRITON_DIST_AUTOTUNE_TIMEOUT", "")
    try:
        seconds = float(value) if value else DEFAULT_TIMEOUT_S
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise BadInputError(f"TRITON_DIST_AUTOTUNE_TIMEOUT must be a positive number of seconds, not {value!r}")
    return seconds


class Group:
    """A group of ranks that tune together. Subclasses implement :meth:`allgather`."""

    rank: int = 0
    size: int = 1
    name: str = "single"

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

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        return [obj]


class StoreGroup(Group):
    """A torch.distributed process group, talked to through the job's key-value store."""

    def __init__(self, pg: Any) -> None:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        self.rank = dist.get_rank(pg)
        if self.rank < 0:
            raise BadInputError("autotune_pg: this rank is not a member of the process group it was called with")
        self.size = dist.get_world_size(pg)
        self.global_ranks = list(dist.get_process_group_ranks(pg))
        self.name = c10d._get_process_group_name(pg) or "default"
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self._prefix = f"triton_dist_tune/attempt{attempt}/{self.name}/"
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
            self.store.wait(keys, timedelta(seconds=timeout))
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
        self.name = f"mpi:{comm.Get_name() or 'comm'}"
        if not hasattr(comm, "Idup"):
            self.comm = comm.Dup()
        else:  # Dup is collective: a rank that never calls with this communicator must not hang the others
            self.comm, request = comm.Idup()
            self._wait(request, "setting up its control channel (Idup)", timeout, comm.Get_rank())
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def _wait(self, request: Any, what: str, timeout: float | None, rank: int) -> None:
        timeout = default_timeout() if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while not request.Test():
            if time.monotonic() > deadline:
                raise GroupTimeoutError(
                    f"triton_dist_tune: rank {rank} of MPI group '{self.name}' waited {timeout:g} s at "
                    f"'{what}' for ranks that never arrived: they crashed, hung, or called with another group."
                )
            time.sleep(_POLL_S)

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        self._wait(self.comm.Ibarrier(), what, timeout, self.rank)
        return self.comm.allgather(obj)


_groups: dict[Any, Group] = {}
_groups_lock = threading.Lock()


def _is_mpi_comm(obj: Any) -> bool:
    return type(obj).__module__.startswith("mpi4py") and hasattr(obj, "Dup")


def resolve_group(pg: Any = None) -> Group:
    """The control channel for ``autotune_pg``: a torch ProcessGroup, an mpi4py communicator, or None.

    None means the default torch.distributed group when it is initialized, else a single process. One channel
    exists per group and process, so that every tuned function on that group shares its sequence numbers.
    """
    if pg is None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return _SINGLE
        pg = dist.group.WORLD
    with _groups_lock:
        if _is_mpi_comm(pg):
            cache_key: Any = ("mpi", pg.py2f())
        else:
            from torch.distributed import ProcessGroup

            if not isinstance(pg, ProcessGroup):
                raise BadInputError(
                    f"autotune_pg must be a torch.distributed ProcessGroup, an mpi4py communicator or None, "
                    f"not {type(pg).__name__}"
                )
            cache_key = ("torch", id(pg))
        group = _groups.get(cache_key)
        if group is None:
            group = MpiGroup(pg) if cache_key[0] == "mpi" else StoreGroup(pg)
            if group.size == 1:
                group = _SINGLE
            _groups[cache_key] = group
        return group


def forget_groups() -> None:
    """Drop every cached channel (call after ``destroy_process_group`` before initializing a new one)."""
    with _groups_lock:
        _groups.clear()


_SINGLE = SingleGroup()
