"""A wait for keys of the job's key-value store that prints nothing while nothing is wrong
(:func:`quiet_store_wait`), on a client of the waiting thread's own (:func:`own_waiter`), and the look-up of which
ranks of a wait have set their key (:class:`Arrivals`)."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any

#: a store wait past its first slice looks for its keys this often instead of blocking (:func:`quiet_store_wait`)
POLL_S = 0.05


class StoreWaitTimeout(TimeoutError):
    """A slice of :func:`quiet_store_wait` ran out before its keys were set."""


def quiet_store_wait(store: Any, keys: list[str], seconds: float, block: bool,
                     poll: Callable[[], None] | None = None, alone: bool = False) -> None:
    """Return once every key of ``keys`` is in ``store``; raise :class:`StoreWaitTimeout` after ``seconds``.
    ``block``: one blocking ``wait`` (a key set meanwhile ends it at once: the first slice of a wait, where
    most exchanges end within milliseconds), on this thread's own client of ``store`` (:func:`own_waiter`); else
    ``store.check`` every :data:`POLL_S` seconds. A blocking wait that runs out makes torch's store client print
    two ``waitForInput ... likely a timeout`` warnings on the rank's screen, although nothing is wrong: a wait that
    outlasts its first slice (a peer compiling, a campaign's unit tuning a key alone) goes on quietly. A store
    that is gone raises at once either way. ``poll``: called before each look (not with ``block``). ``alone``: no
    other thread uses ``store`` (the attempt's naming in ``init_distributed``, before any group exists): a blocking
    wait uses ``store`` itself, and the process keeps no connection for it."""
    if block:
        (store if alone else own_waiter(store)).wait(keys, timedelta(seconds=seconds))
        return
    deadline = time.monotonic() + seconds
    while True:
        if poll is not None:
            poll()
        if store.check(keys):
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise StoreWaitTimeout(f"store keys not set within {seconds:.3f} s")
        time.sleep(min(POLL_S, left))


#: what :func:`own_waiter` remembers for a store that is its own client
_ITSELF = object()
#: per thread: the process it ran in (a forked child clones anew) and its own clients, by the store they clone
_WAITERS = threading.local()


def own_waiter(store: Any) -> Any:
    """The calling thread's own client of ``store`` for its blocking waits: a clone (a connection of its own to the
    store's server, made at the thread's first blocking wait on ``store`` and kept while ``store`` and the thread
    live), or ``store`` itself where it cannot be cloned or remembered (a store served in-process, a Python store).

    Torch's TCP store client serves one request at a time, and a blocking ``wait`` holds it until a key comes or
    the wait runs out: every other request of the process on that client (another thread's exchanges, on another
    group: a tensor-parallel and a data-parallel group tuned from two threads) waited behind it, up to the wait's
    whole slice (a second), and their peers behind them. On a client of its own a thread's wait holds nobody's
    requests, whichever thread began first; its other requests (quick: none waits for a key) stay on ``store``.
    Its cost: one connection per thread that waits (a connect and torch's handshake, once), no request per wait.
    A clone connects with ``store``'s timeout, so it is made while the store answered a request a moment before
    (the thread's first exchange has just written its message): made after the store's host has gone, it would
    fail only after that timeout."""
    pid = os.getpid()
    if getattr(_WAITERS, "pid", None) != pid:
        _WAITERS.pid, _WAITERS.clients = pid, weakref.WeakKeyDictionary()
    clients: weakref.WeakKeyDictionary = _WAITERS.clients
    try:
        client = clients.get(store)
    except TypeError:  # (a store that takes no weak reference: not remembered, so not cloned at every wait)
        return store
    if client is None:
        try:
            client = store.clone()
        except Exception:  # (a Python store without clone)
            client = store
        # (a store whose clone is itself, a local one, is remembered as such: a value that held its key would keep it)
        clients[store] = _ITSELF if client is store else client
    return store if client is _ITSELF else client


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
