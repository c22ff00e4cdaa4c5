"""The clients of the job's key-value store that a process makes beside the job's own: the side client that its
failure boards and progress watches share (:func:`side_client`), the clients its threads' blocking waits borrow
(:func:`waiter`), and a client of a caller's own with a short timeout (:func:`own_client`; :class:`Connecting`
where the caller must not wait for its connect).

Each is a clone of the job's store: a TCP connection of its own to the store's host, which torch opens with a
reverse DNS lookup of the host's address, which a slow resolver holds for seconds (docs/operations.md: 1 connect in
25 took 5 s on this project's CPU machines), and which a host that has gone holds until the store's timeout, twice.
The side client and the waiters' clients therefore connect on a helper thread (:class:`_Cloning`), never on the
thread of a tuning: until one is made, its user goes on without it (a failure board reads and beats on the job's
client, a progress watch reads the beats in requests that never wait, a blocking wait looks for its keys instead).
Before, the first tuning's failure board made the side client on the tuning's thread (its first exchange, and every
rank's with it, waited for the connect), and a thread's blocking wait waited up to 1 s for its client's connect,
again at each of its blocking waits until the connect ended.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any

#: the timeout of the clients made by :func:`own_client` and of the side client (s): a store whose host is gone
#: holds their connects and server-side waits no longer. (Not a frozen host's: torch's client bounds no reply, so a
#: request to a frozen host waits until :mod:`~.store_silence` cuts the connection)
SHORT_WAIT_S = 2.0


def own_client(store: Any, timeout_s: float = SHORT_WAIT_S) -> Any:
    """A client of ``store`` of the caller's own, with ``timeout_s`` for its timeout, which holds no store host's
    server alive (``store`` itself where it cannot be cloned: a local store, which nothing else serves). It
    connects on the caller's thread: for paths off a tuning's (a beat thread's, a count-out's thread)."""
    try:
        client = store.clone()
        client.set_timeout(timedelta(seconds=timeout_s))
        return client
    except Exception:
        return store


#: what a clone that cannot be made for good comes to: the store is used itself (a store served in-process, a Python
#: store whose ``clone`` is not implemented)
_ITSELF = object()


class Connecting:
    """A client of ``store`` of the caller's own with ``timeout_s`` for its timeout, as :func:`own_client` makes,
    connected on a helper thread (:class:`_Cloning`) for a caller that must not wait for the connect (a rank about
    to raise its error). Only the helper holds ``store``, until its connect ends; this object holds it weakly, so
    that, as a clone, it keeps no store host's server alive afterwards (a store that takes no weak reference is
    held)."""

    def __init__(self, store: Any, timeout_s: float) -> None:
        try:
            self._store: Callable[[], Any] = weakref.ref(store)
        except TypeError:
            self._store = lambda: store
        self._made: Any = None
        if not _Cloning(store, timeout_s, self._done).start():
            self._done(None)

    def _done(self, made: Any) -> None:
        self._made = self._store() if made is _ITSELF else made

    def now(self) -> tuple[Any, bool]:
        """The client now, and whether its requests are bounded by ``timeout_s``: the clone once made (``store``
        itself where it cannot be cloned: served in-process); else ``store`` itself while it lives (still
        connecting: the helper holds it; a connect that failed), its own timeout bounding its requests, False; else
        (None, False)."""
        if self._made is not None:
            return self._made, True
        return self._store(), False


class _Cloning:
    """A clone of a store being made on a helper thread, which holds the store only until its connect ends, then
    hands ``done`` the client (with ``timeout_s``, where given), :data:`_ITSELF`, or None: a connect that failed
    (torch's ``DistError``: the host gone, or slower than the store's timeout), to be tried again."""

    def __init__(self, store: Any, timeout_s: float | None, done: Callable[[Any], None]) -> None:
        self._store, self._timeout_s, self._done = store, timeout_s, done

    def start(self) -> bool:
        """Start connecting; False where no thread can start (the interpreter's exit)."""
        try:
            threading.Thread(target=self._clone, name="triton_dist_tune-store-clone", daemon=True).start()
            return True
        except RuntimeError:
            self._store = None
            return False

    def _clone(self) -> None:
        store, self._store = self._store, None
        try:
            client = store.clone()
            if client is not store and self._timeout_s is not None:
                client.set_timeout(timedelta(seconds=self._timeout_s))
            made = _ITSELF if client is store else client
        except Exception as exc:  # tried again where torch's connect failed; anything else is for good
            made = None if any(c.__name__ == "DistError" for c in type(exc).__mro__) else _ITSELF
        del store
        self._done(made)


class _Side:
    """The side client of one store in one process: made, or being made."""

    def __init__(self) -> None:
        self.client: Any = None
        self.cloning = False


#: per store (weakly): its side client in this process (:func:`side_client`), and its waiters' clients (:class:`_Pool`)
_sides: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _forked() -> None:
    """In a forked child: forget the parent's clients (their connections are the parent's) and take a lock of its
    own. The child has only the thread that forked: a copy of :data:`_lock` that another thread of the parent held
    at the fork (a connect's helper thread handing over its client, a tuning thread taking a waiter's client) is
    never released there, and the child's first board, watch or blocking wait on the store blocked on it for good
    (``test_store_wait.py::test_a_child_forked_while_another_thread_holds_the_clients_lock_makes_its_own_clients``;
    before, the child found the parent's clients by a change of ``os.getpid()``, under that lock)."""
    global _lock
    _lock = threading.Lock()
    _sides.clear()
    _pools.clear()


os.register_at_fork(after_in_child=_forked)


def side_client(store: Any) -> Any | None:
    """This process's one client of ``store`` (the job's) for the side traffic of its tunings (a failure board's
    beats and reads, a progress watch's reads of beats), with :data:`SHORT_WAIT_S` for its timeout; None while it is
    being made: the first call starts its connect on a helper thread and returns at once, the caller uses ``store``
    meanwhile (in requests that never wait), and a connect that failed is tried again at the next call. Kept while
    ``store`` lives, weakly: a job that destroys its process group and starts another gets a new one. Boards and
    watches use it from several threads, as one board did from its beat thread before: torch's client serves one
    request at a time. ``store`` itself where it cannot be cloned (nothing else serves a local store)."""
    with _lock:
        try:
            side = _sides.get(store)
            if side is None:
                side = _sides[store] = _Side()
        except TypeError:  # a store no weak reference can point at: its own client
            return store
        if side.client is not None:
            return store if side.client is _ITSELF else side.client
        if side.cloning:
            return None
        side.cloning = True

    def made(client: Any) -> None:
        with _lock:
            side.client, side.cloning = client, False

    if not _Cloning(store, SHORT_WAIT_S, made).start():
        made(None)
    return None


class _Pool:
    """The clients of one store that its blocking waits borrow, one wait at a time each: those free now, how many
    are connecting, and how many waits in progress have none (a wait starts a connect only where those under way
    are fewer: a thread's waits one after another while a slow connect goes on start no other)."""

    def __init__(self) -> None:
        self.free: list[Any] = []
        self.connecting = 0
        self.needing = 0
        #: the store cannot be cloned (served in-process): its waits use it itself
        self.itself = False


def _made(pool: _Pool, client: Any) -> None:
    """A connect for ``pool`` has ended: its client is free (see :class:`_Cloning`)."""
    with _lock:
        pool.connecting -= 1
        if client is _ITSELF:
            pool.itself = True
        elif client is not None:
            pool.free.append(client)


class Waiter:
    """One blocking wait's loan of a client of its own of ``store`` (:func:`waiter`): :meth:`take` gives it the
    client once there is one free (never one another wait holds), :meth:`close` gives it back."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.client: Any = None
        self._pool: _Pool | None = None
        with _lock:
            try:
                pool = _pools.get(store)
                if pool is None:
                    pool = _pools[store] = _Pool()
            except TypeError:  # (a store that takes no weak reference: its waits use it itself)
                self.client = store
                return
            self._pool = pool
            pool.needing += 1

    def take(self) -> Any | None:
        """This wait's client: one free now, this wait's alone until :meth:`close` (``store`` itself where it
        cannot be cloned); None while none is free (the wait looks for its keys meanwhile). Where none is free and
        the connects under way are fewer than the waits without a client, this wait starts one: never more connects
        at once than waits that need them (a connect that failed is tried again at a later look, as a free client
        another wait took first is made up for)."""
        pool = self._pool
        if self.client is not None or pool is None:
            return self.client
        with _lock:
            if pool.itself or pool.free:
                self.client = self.store if pool.itself else pool.free.pop()
                pool.needing -= 1
                return self.client
            start = pool.connecting < pool.needing
            if start:
                pool.connecting += 1
        if start and not _Cloning(self.store, None, lambda client: _made(pool, client)).start():
            _made(pool, None)
        return None

    def close(self, broken: bool = False) -> None:
        """The wait is over: its client goes back to the pool (``broken``: its connection was lost; dropped)."""
        pool, client = self._pool, self.client
        if pool is None:
            return
        self._pool = None
        with _lock:
            if client is None:
                pool.needing -= 1
            elif client is not self.store and not broken:
                pool.free.append(client)


def waiter(store: Any) -> Waiter:
    """A loan, for one blocking wait, of a client of ``store`` of its own (see :class:`Waiter`).

    Torch's TCP store client serves one request at a time, and a blocking ``wait`` holds it until a key comes or
    the wait runs out: every other request of the process on that client (another thread's exchanges, on another
    group: a tensor-parallel and a data-parallel group tuned from two threads) waited behind it, up to the wait's
    whole slice (a second), and their peers behind them. On a client that no other request uses, a wait holds
    nobody's requests; its other requests (quick: none waits for a key) stay on ``store``. The clients are the
    process's, per store (weakly: kept while the store lives), lent one wait at a time: as many as there were waits
    at once (one per group tuned at once: the threads tuning on one group take turns), not one per thread that ever
    waited (before, a thread-local clone: four threads tuning on one group made four). A wait that finds none free
    starts a connect (where none under way is free for it) and looks for its keys until one is (see the module
    docstring)."""
    return Waiter(store)
