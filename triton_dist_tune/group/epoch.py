"""The name of this attempt of the job, the same in every process of it and new in each restart, agreed through the
job's key-value store by :func:`~triton_dist_tune.group.dist.init_distributed` (:func:`agree`).

Under ``torchrun --max-restarts`` the store outlives a failed attempt, so the keys of each attempt need a prefix of
its own. torchrun's ``TORCHELASTIC_RESTART_COUNT`` cannot serve on more than one node: each node's agent counts its
own restarts, and an agent that restarts its workers because another node rejoined (a membership change) does not
count it. After node 0's worker failed, node 0's new workers read 1 and node 1's read 0: prefixed by that count, the
ranks of one attempt waited on different keys until their deadline (two agents on one host, ``nnodes=2``:
``tests/test_init_distributed.py``).

:func:`agree`: every process draws a name; global rank 0's is the attempt's. Each other rank writes its own draw
(``hello/<rank>``) and waits for a reply under a key named by that draw (``reply/<draw>``), which no earlier attempt
can have written; rank 0 answers every hello it reads (a stale one, from an earlier attempt, gets an answer nobody
reads) until every rank has confirmed under a key named by rank 0's draw (``done/<name>/<rank>``). Every key of it is
either named by a draw of this attempt or only answered, so an earlier attempt's keys can neither end it early nor
stall it.

:func:`current`: the agreed name once :func:`agree` ran in this process (through ``init_distributed``), else the
launcher's restart count (a job that started torch.distributed itself: right on one node).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from .. import settings
from ..errors import GroupTimeoutError

#: seconds between two looks of rank 0 at the hellos it has not answered for good
POLL_S = 0.02

_agreed: str | None = None


def agree(store: Any, base: str, rank: int, size: int, timeout_s: float) -> str:
    """This attempt's name among ``size`` processes (global ranks) through ``store``, under keys starting with
    ``base``: rank 0's draw, returned on every rank (see the module docstring); raises
    :class:`~triton_dist_tune.errors.GroupTimeoutError` when some rank does not take part within ``timeout_s``."""
    global _agreed
    me = os.urandom(8).hex()
    deadline = time.monotonic() + timeout_s
    if size > 1 and rank == 0:
        _answer_every_hello(store, base, me, size, deadline)
    elif size > 1:
        store.set(f"{base}hello/{rank}", me)
        reply = f"{base}reply/{me}"
        try:
            store.wait([reply], timedelta(seconds=max(0.001, deadline - time.monotonic())))
        except Exception as exc:  # the store's timeout
            raise GroupTimeoutError(f"init_distributed: rank 0 did not name this attempt within {timeout_s:.0f} s "
                                    f"(it has not started, or it has ended): {exc}") from exc
        me = store.get(reply).decode()
        store.set(f"{base}done/{me}/{rank}", "1")
    _agreed = me
    return me


def _answer_every_hello(store: Any, base: str, me: str, size: int, deadline: float) -> None:
    """Rank 0's side of :func:`agree`: reply ``me`` to each rank's latest hello until every rank confirmed it."""
    pending = set(range(1, size))
    answered: dict[int, str] = {}
    while pending:
        for rank in sorted(pending):
            if store.check([f"{base}done/{me}/{rank}"]):
                pending.discard(rank)
                continue
            hello = f"{base}hello/{rank}"
            if store.check([hello]):
                draw = store.get(hello).decode()
                if answered.get(rank) != draw:  # a new draw (or an earlier attempt's, answered for nobody)
                    store.set(f"{base}reply/{draw}", me)
                    answered[rank] = draw
        if pending and time.monotonic() > deadline:
            raise GroupTimeoutError(f"init_distributed: ranks {sorted(pending)} did not take part in naming this "
                                    "attempt in time (not started, or ended)")
        if pending:
            time.sleep(POLL_S)


def current() -> str:
    """This attempt's name: agreed by :func:`agree` in this process, else the launcher's restart count."""
    return _agreed if _agreed is not None else (settings.launcher().restart_count or "0")
