"""Whether a thread waits inside a blocking collective of ``torch.distributed`` now, and on which ranks, read from
its Python stack: a blocking collective (gloo's ``all_reduce``, a ``barrier``, ``send``/``recv``) leaves its thread
in the C call made from the collective's own function in ``distributed_c10d.py``, so the innermost Python frame is
that function, whose ``group`` argument names the ranks it waits for (None: the default group).

The watchdog asks this of a ``contextual_autotune`` run after a peer posted that its run raised
(:meth:`~triton_dist_tune.faults.watchdog.Guard.arm`'s ``waiting``): a rank inside a collective whose group holds
that peer waits for a peer that will never come, and is ended after the grace; one computing, sleeping, waiting for
the device, or in a collective of a group without that peer (which its members complete) goes on to the end of its
run. Not read as waiting (the run's deadline ``T`` then holds, as before this watch): a wait on an asynchronous
collective's work (``async_op=True`` then ``.wait()``: the innermost frame is the caller's), the functional
collectives (``wait_tensor`` dispatches through ``torch._ops``), and NCCL on a GPU, whose host thread waits in a
device synchronization rather than in the collective's call.
"""

from __future__ import annotations

import sys
from typing import Any

#: the module whose functions a thread waits in while it is inside a blocking collective
COLLECTIVE_MODULE = "distributed_c10d.py"


def collective_ranks(thread: int) -> frozenset[int] | None:
    """The global ranks of the collective the thread ``thread`` (its ``threading.get_ident()``) waits in now, or
    None where it is in none (or has ended); an empty set where the collective's group cannot be read."""
    frame = sys._current_frames().get(thread)
    if frame is None:
        return None
    path = frame.f_code.co_filename.replace("\\", "/")
    if "/torch/distributed/" not in path or path.rpartition("/")[2] != COLLECTIVE_MODULE:
        return None
    return _group_ranks(frame.f_locals.get("group"), "group" in frame.f_code.co_varnames)


def waits_for(thread: int, ranks: list[int]) -> bool:
    """Whether the thread ``thread`` waits now inside a blocking collective whose group holds one of the global
    ``ranks``."""
    inside = collective_ranks(thread)
    return bool(inside) and any(rank in inside for rank in ranks)


def _group_ranks(group: Any, named: bool) -> frozenset[int]:
    """The global ranks of a collective's ``group`` argument (None: the default group, where the function has that
    argument: ``named``); empty where they cannot be read."""
    try:
        import torch.distributed as dist

        if group is None and not named:
            return frozenset()
        return frozenset(dist.get_process_group_ranks(group if group is not None else dist.group.WORLD))
    except Exception:  # a group of another kind, or one destroyed meanwhile: not known to hold the peer
        return frozenset()
