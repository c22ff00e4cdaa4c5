"""A wait for keys of the job's key-value store that prints nothing while nothing is wrong
(:func:`quiet_store_wait`), and the look-up of which ranks of a wait have set their key (:class:`Arrivals`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .threads import others_in_turns

#: a store wait past its first slice looks for its keys this often instead of blocking (:func:`quiet_store_wait`)
POLL_S = 0.05
#: the first pause of a wait that looks instead of blocking because another thread tunes: doubled after each look
#: up to :data:`POLL_S` (an exchange usually ends within milliseconds)
QUICK_POLL_S = 0.001


class StoreWaitTimeout(TimeoutError):
    """A slice of :func:`quiet_store_wait` ran out before its keys were set."""


def quiet_store_wait(store: Any, keys: list[str], seconds: float, block: bool,
                     poll: Callable[[], None] | None = None) -> None:
    """Return once every key of ``keys`` is in ``store``; raise :class:`StoreWaitTimeout` after ``seconds``.
    ``block``: one blocking ``store.wait`` (a key set meanwhile ends it at once: the first slice of a wait, where
    most exchanges end within milliseconds); else ``store.check`` every :data:`POLL_S` seconds. A blocking wait
    that runs out makes torch's store client print two ``waitForInput ... likely a timeout`` warnings on the
    rank's screen, although nothing is wrong: a wait that outlasts its first slice (a peer compiling, a campaign's
    unit tuning a key alone) goes on quietly. A store that is gone raises at once either way. ``poll``: called
    before each look (not with ``block``).

    Where another thread of this process tunes too (:func:`~triton_dist_tune.group.threads.others_in_turns`: two
    groups' tunings on two threads, a tensor-parallel and a data-parallel one), the wait only looks, ``block`` or
    not: the job store's client serves one request at a time, so a blocking wait held every request of the other
    thread (its exchanges, on another group) for up to its whole slice, and the two threads' peers, each waiting
    for the other's held request, stalled each other a second per exchange (6.7 s for two tunings of 0.8 s each
    on 4 CPU ranks, and two store warnings per stall). Such a wait looks after 1 ms first, then twice as long after
    each look, up to :data:`POLL_S`."""
    if block and not others_in_turns():
        store.wait(keys, timedelta(seconds=seconds))
        return
    deadline, pause = time.monotonic() + seconds, QUICK_POLL_S if block else POLL_S
    while True:
        if poll is not None:
            poll()
        if store.check(keys):
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise StoreWaitTimeout(f"store keys not set within {seconds:.3f} s")
        time.sleep(min(pause, left))
        pause = min(POLL_S, 2 * pause)


class Arrivals:
    """Which ranks of a wait have set their key, looked up once per slice of the wait (a request per rank looked at),
    remembering what the looks before found.

    A key set stays set while the wait lasts (a message stays until the exchange's result is written, a round's
    mark until every unit has passed the round): after the first look, the ranks found there are confirmed in one
    request (``check`` of all their keys), and only the ranks still missing are looked at one by one. A look costs
    ``1 + m`` requests for ``m`` ranks still missing, not ``N - 1`` for a group of ``N``: ``N`` ranks waiting
    for one late rank sent about ``N²`` requests a second to the store's server, and now about ``2 N`` after their
    first look. Where a confirmed key is gone (a rank took its message back: its wait ended on a late rank's note),
    every rank is looked at again, as in a first look."""

    def __init__(self, keys: dict[int, str], check: Callable[[list[str]], bool]) -> None:
        #: rank -> its key; ``check(keys)``: whether every key of ``keys`` is set (one store request)
        self.keys, self._check = keys, check
        #: the ranks whose key the last look did not find (None: no look yet)
        self._missing: list[int] | None = None

    def missing(self) -> list[int]:
        """The ranks whose key is not set now, in the order of :attr:`keys`."""
        missing = self._missing
        if missing is not None:
            arrived = [key for rank, key in self.keys.items() if rank not in missing]
            if arrived and not self._check(arrived):
                missing = None  # (a key found before has gone: look at every rank again)
        looked = list(self.keys) if missing is None else missing
        self._missing = [rank for rank in looked if not self._check([self.keys[rank]])]
        return list(self._missing)
