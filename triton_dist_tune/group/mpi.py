"""The channel of an mpi4py communicator: exchanges through a duplicate of it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .. import settings
from ..errors import GroupTimeoutError
from .channel import Group, combine_payloads, default_timeout, pack, report_waiting, unpack

_POLL_S = 0.005


class MpiGroup(Group):
    """An mpi4py communicator, talked to through a duplicate of it.

    Messages are encoded as plain data (:mod:`.codec`) like the key-value store's, so a value that is not plain
    data is refused alike on every launcher. mpi4py's lowercase methods pickle what they move, here only those
    ``bytes``; the peers of a communicator are processes of the job itself (an outsider cannot join one), unlike
    the clients of a key-value store."""

    def __init__(self, comm: Any, timeout: float | None = None) -> None:
        super().__init__()
        self.name = self.title = f"mpi:{comm.Get_name() or 'comm'}"
        if not hasattr(comm, "Idup"):
            self.comm = comm.Dup()
        else:  # Dup is collective: a rank that never calls with this communicator must not hang the others
            self.comm, request = comm.Idup()
            self._wait(request, "setting up its control channel (Idup)", timeout, comm.Get_rank())
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.member_ranks = _world_ranks(comm)
        self.identity = ("mpi", self.name, self.member_ranks or (self.size,))

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
        payloads = self.comm.gather(pack(obj, self.rank, what), root=0)
        payload = self.comm.bcast(combine_payloads(fn, payloads, what) if self.rank == 0 else None, root=0)
        return unpack(payload, what, self.rank)

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        self._wait(self.comm.Ibarrier(), what, timeout, self.rank)
        payloads = self.comm.allgather(pack(obj, self.rank, what))
        return unpack(combine_payloads(list, payloads, what, self.rank), what, self.rank)



def _world_ranks(comm: Any) -> tuple:
    """The COMM_WORLD ranks of an mpi4py communicator's members (none where they cannot be found)."""
    try:
        from mpi4py import MPI

        ranks = comm.Get_group().Translate_ranks(list(range(comm.Get_size())), MPI.COMM_WORLD.Get_group())
    except Exception:
        return ()
    return tuple(int(r) for r in ranks) if all(r is not None and r >= 0 for r in ranks) else ()
