"""Which channel a call talks through: one per group object and process, found by the object itself."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .. import settings
from ..errors import BadInputError
from .calls import joined
from .channel import NON_MEMBER, Group, SingleGroup, not_a_member
from .mpi import MpiGroup, is_communicator, not_a_communicator
from .store import StoreGroup
from .unresolved import NOTES

log = logging.getLogger("triton_dist_tune")


class GroupIndex:
    """The channels of the groups this process tuned with, found by the group object itself.

    An entry holds a weak reference to its group object and is used only while that very object is alive: a new
    group that Python happens to put at a freed group's address never finds the old group's channel (``id`` is
    used as a dict key for speed, never as an identity). :meth:`find` is cheap enough for the hot path.
    """

    def __init__(self) -> None:
        #: id(group object) -> (weak reference to it, its channel); read through :meth:`find`, which checks
        #: ``entry[0]() is pg``
        self.entries: dict[int, tuple[Any, Group]] = {}
        self._lock = threading.Lock()
        #: id(group object) -> the lock its channel is made under (an mpi4py channel's setup waits up to the timeout
        #: for its peers: under :attr:`_lock`, another thread's setup on another communicator waited behind it, and
        #: where the ranks' threads came in another order both setups ran out)
        self._making: dict[int, threading.Lock] = {}

    def find(self, pg: Any) -> Group | None:
        """The channel of ``pg`` when one exists for this very object, else None."""
        entry = self.entries.get(id(pg))
        if entry is not None and entry[0]() is pg:
            return entry[1]
        return None

    def add(self, pg: Any, make: Callable[[], Group]) -> Group:
        """The channel of ``pg``, made by ``make()`` when it has none yet."""
        with self._lock:
            making = self._making.setdefault(id(pg), threading.Lock())  # (pg is alive: its id is its own)
        with making:
            found = self.find(pg)
            if found is not None:
                return found
            group = make()
            key = id(pg)
            try:
                ref: Any = weakref.ref(pg, lambda _, k=key: self._drop(k))
            except TypeError:  # not weakly referenceable: keep it alive instead (its id can then never be reused)
                ref = (lambda obj: lambda: obj)(pg)
            with self._lock:
                self.entries[key] = (ref, group)
            return group

    def _drop(self, key: int) -> None:
        entry = self.entries.get(key)
        if entry is not None and entry[0]() is None:
            del self.entries[key]
            self._making.pop(key, None)

    def clear(self) -> None:
        """Forget every channel."""
        with self._lock:
            self.entries.clear()
            self._making.clear()


_groups = GroupIndex()
_warned_world_size = False


def find_group(pg: Any) -> Group | None:
    """The channel already made for ``pg`` (an explicit ``autotune_pg``), or None."""
    return _groups.find(pg)


def resolve_group(pg: Any = None, option: str = "autotune_pg") -> Group:
    """The control channel for ``autotune_pg`` (or the option named ``option``, which errors name): a torch
    ProcessGroup, an mpi4py communicator, or None.

    None means the default torch.distributed group when it is initialized, else a single process (with a warning
    when a launcher says the job has several ranks). One channel exists per group object and process, so that
    every tuned function on that group shares its sequence numbers. A wrong group raises
    :class:`BadInputError` and tells the job (:mod:`.unresolved`), so that the peers waiting for this rank raise it
    too, at once.
    """
    try:
        group = _resolve(pg, option)
    except BadInputError as exc:
        NOTES.post(str(exc))
        raise
    ranks = getattr(group, "global_ranks", None)
    NOTES.withdraw(None if ranks is None else (group.name, tuple(ranks)))
    if ranks is not None:  # a group whose waits read notes: a note this call passes on names it (.unresolved)
        joined(group.name, ranks)
    return group


def _resolve(pg: Any, option: str) -> Group:
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
        raise BadInputError(not_a_member(option))
    found = _groups.find(pg)
    if found is not None:
        return found
    if is_communicator(pg):
        from mpi4py import MPI

        if pg == MPI.COMM_NULL:  # a rank outside a Split/Create: its calls would raise MPI_ERR_COMM
            raise BadInputError(not_a_member(option, mpi=True))
        if pg.Is_inter():  # its collectives move data between its two sides: no group of ranks to agree in
            raise BadInputError(f"{option} must be a torch.distributed ProcessGroup, an mpi4py communicator or None, "
                                f"not an intercommunicator (it links two groups of ranks; tune on one group: "
                                f"inter.Merge(), on both sides)")
        make: Callable[[], Group] = lambda: MpiGroup(pg)  # noqa: E731
    else:
        from torch.distributed import ProcessGroup

        if not isinstance(pg, ProcessGroup):
            what = not_a_communicator(pg) if type(pg).__module__.startswith("mpi4py") else type(pg).__name__
            raise BadInputError(f"{option} must be a torch.distributed ProcessGroup, an mpi4py communicator or None, "
                                f"not {what}")
        make = lambda: StoreGroup(pg, option)  # noqa: E731
    group = _groups.add(pg, lambda: _single_if_alone(make()))
    if isinstance(group, MpiGroup):  # a setup that ran out: its channel is kept broken, the call raises
        group.raise_setup_error()
    return group


def _single_if_alone(group: Group) -> Group:
    return _SINGLE if group.size == 1 else group


def forget_groups() -> None:
    """Drop every cached channel (not needed after ``destroy_process_group``: channels follow their group
    objects)."""
    _groups.clear()


_SINGLE = SingleGroup()


def alone() -> Group:
    """The channel of this process alone (no torch.distributed, ``is_dist=False``, a group of one rank): one for
    both tuners, so that their tunings alone take turns on one lock, as tunings on any group do."""
    return _SINGLE
