"""A key-value store whose host does not answer: noticed by a board's beats, and this process's connections to it
cut, so that every request waiting on it raises instead of waiting for ever.

torch's store client (2.13) puts no time limit on a reply: a request to a host that is frozen (SIGSTOP, a debugger,
a paused VM) or whose replies are lost waits without end, whatever the client's timeout (``set_timeout`` bounds a
connect and a server-side wait, not the read of the reply; a blocking ``wait`` that runs out then waits for its
cancel's reply the same way), while the host's kernel keeps the connection open. Measured here: ``check``, ``add``,
``get`` and a 1 s ``wait`` on a clone with a 2 s timeout were all still blocked 15 s after the host was stopped.
Every waiting rank then hung at its exchange (found by ``benchmarks/chaos.py``: 52 s, until the host was continued),
or, inside a guarded run, its watchdog's read of the beats blocked and the faulthandler backstop ended it.

A board's beat thread adds to its counter every ``window / 5`` s: a beat in flight for ``window`` seconds (the bound
after which a waiting rank gives up on a silent peer, ``T + max(1, T/10)``) means the store's host is not answering.
:class:`Silence` then shuts down (``shutdown(SHUT_RDWR)``, not close: the file descriptors stay torch's) every
socket of this process connected to the store's port (read from ``/proc``: torch gives no handle on them), so the
requests blocked on them raise a transport error, which the exchanges report as a lost store
(:func:`lost_reason` says how it was lost), and later requests on those clients fail at once.

Where no beat is watched (an exchange before a tuning's board opens or after it closes: a campaign's agreement on its
keys, a tuned function's first exchange; ``init_distributed``, before any group exists; the count-out at exit; a
wrong-group note's posting and withdrawal, ``unresolved.py``), the requests run in a section (:func:`answering`).
While one is open and no watched beat of this process (a board's, a progress watch's) began on the store's port
within :data:`BEATEN_S` s, the process's prober (:class:`_Answering`: two daemon threads per port, idle between
sections) asks the store one quick question every ``window / 5`` s (at most 1 s; none in sections shorter than
that) on a client of its own, watched as a beat is. Before, a rank at such
an exchange waited without end for a frozen host (``test_frozen_host.py``).
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from .. import settings
from ..errors import AutotuneError
from .clients import SHORT_WAIT_S, side_client
from .pauses import PAUSES, ran

log = logging.getLogger("triton_dist_tune")

#: why this process cut its connections to the store (None: it has not): said by the errors of a lost store
_CUT: list[str] = []


def lost_reason() -> str:
    """How the store was lost, for an error that says so: it ended, or it stopped answering (this process cut it)."""
    return _CUT[-1] if _CUT else "has ended"


def was_cut() -> bool:
    """Whether this process cut its connections to the store because its host stopped answering."""
    return bool(_CUT)


def store_address(store: Any) -> tuple[str, int] | None:
    """The host and port of the TCP store under ``store`` (prefix stores unwrapped); None where there is none."""
    for _ in range(16):
        port = getattr(store, "port", None)
        if isinstance(port, int):
            host = getattr(store, "host", None)
            return (host if isinstance(host, str) else "", port)
        store = getattr(store, "underlying_store", None)
        if store is None:
            return None
    return None


def store_port(store: Any) -> int | None:
    """The port of the TCP store under ``store`` (prefix stores unwrapped); None where there is none."""
    address = store_address(store)
    return None if address is None else address[1]


def _sockets(port: int) -> list[tuple[int, str]]:
    """This process's sockets whose peer's port is ``port``: (file descriptor, TCP state: ``01`` established)."""
    inodes: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes[link[8:-1]] = int(fd)
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) >= 10 and fields[9] in inodes and int(fields[2].rsplit(":", 1)[1], 16) == port:
                found.append((inodes[fields[9]], fields[3]))
    return found


def _established(port: int) -> bool:
    """Whether a connection of this process to ``port`` is established (the host accepted it)."""
    return any(state == "01" for _, state in _sockets(port))


def cut_connections(port: int) -> int:
    """Shut down every socket of this process whose peer's port is ``port``; return how many."""
    cut = 0
    for fd, _ in _sockets(port):
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(socket.SHUT_RDWR)
            cut += 1
        except OSError:
            pass
        finally:
            sock.detach()
    return cut


class Silence:
    """The watch over one board's beats: :meth:`beating` around each beat, :meth:`start` once; a beat in flight for
    ``window`` seconds cuts this process's connections to the store (once)."""

    def __init__(self, store: Any, window: float, stop: threading.Event) -> None:
        self.port, self.window, self._stop = store_port(store), window, stop
        #: ``time.monotonic()`` when the beat in flight began (None: none in flight)
        self.since: float | None = None

    def start(self) -> None:
        if self.port is not None:
            threading.Thread(target=self._watch, name="tdt-store-silence", daemon=True).start()

    def beating(self) -> None:
        self.since = time.monotonic()
        if self.port is not None:
            _watched_at[self.port] = self.since

    def beaten(self) -> None:
        self.since = None

    def _watch(self) -> None:
        while not PAUSES.wait(self._stop.wait, every(self.window)):
            since = self.since  # (in flight while this process ran: a paused machine's seconds are not silence)
            if since is not None and self.port is not None and ran(since) >= self.window:
                _cut(self.port, time.monotonic() - since)
                return


def window_of(timeout: float) -> float:
    """The silence after which a request reads as unanswered, for a group whose step waits ``timeout`` (``T``):
    ``T + max(1, T/10)``, the bound after which a waiting rank gives up on a silent peer (the watchdog's
    ``exchange_timeout`` is this)."""
    return timeout + max(1.0, 0.1 * timeout)


def tuner_timeout() -> float:
    """The tuner's ``T`` (``TRITON_DIST_AUTOTUNE_TIMEOUT``) for a section's window where the caller has none, never
    raising: a variable malformed on one rank is an error the tuner agrees at its first exchange, on every rank alike
    (``test_reliability.py``); read here, it raised on that rank alone, before the exchange, and the others waited
    for it (five tests ran out of their 100 s). The default ``T`` then."""
    try:
        return settings.current().timeout
    except AutotuneError:
        return settings.DEFAULT_TIMEOUT_S


def every(window: float) -> float:
    """The pause between two beats (or probes) watched with ``window``: a fifth of it, from 0.05 to 1 s."""
    return max(0.05, min(1.0, window / 5))


def cut_store(store: Any, waited: float) -> None:
    """A request to ``store`` (a TCP store, prefix stores unwrapped; nothing else is cut) was left unanswered for
    ``waited`` s where the caller can wait no longer (the exit's mark of a wrong-group note, ``unresolved.py``): cut
    this process's connections to it, as a section's prober does after its window, so that the threads whose
    requests wait on them raise and end."""
    port = store_port(store)
    if port is not None:
        _cut(port, waited)


def _cut(port: int, waited: float) -> None:
    """The store at ``port`` did not answer a request for ``waited`` s: say so, and cut this process's connections."""
    with _lock:
        first = not _CUT
        if first:
            _CUT.append(f"did not answer for {waited:.0f} s (frozen, or cut off from this host): this rank closed "
                        "its connections to it")
    cut = cut_connections(port)
    if first:
        log.warning("triton_dist_tune: the key-value store (port %d) did not answer a request for %.1f s: its host "
                    "is frozen or cut off; %d connection(s) to it closed", port, waited, cut)


_lock = threading.Lock()
#: per store port: ``time.monotonic()`` when this process's last watched beat began (:meth:`Silence.beating`: a
#: board's or a progress watch's, on the side client): one within :data:`BEATEN_S` watches the store already
_watched_at: dict[int, float] = {}
#: a watched beat this recent stands for the prober's question (beats come at most 1 s apart)
BEATEN_S = 2.0
#: per store port: this process's prober (:class:`_Answering`), made at its first section
_answering: dict[int, _Answering] = {}


class _Answering:
    """This process's prober of the store at ``address`` during the sections of exchanges (:func:`answering`): a
    thread asks the store a quick question (``check``, on a client of its own with :data:`SHORT_WAIT_S` for its
    timeout, connected at its first question once another connection of this process to the store is established)
    every :func:`every` s while a section is open and no watched beat began within :data:`BEATEN_S` s; another reads
    a question in flight for the open sections' window: it then cuts this process's connections to the port, and
    again every :func:`every` s while a section stays open (torch's connect tries again on a new connection within
    its timeout: ``init_distributed``'s)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self._cond = threading.Condition(_lock)
        #: the sections open now: section id -> (window, ``time.monotonic()`` when it opened)
        self._open: dict[int, tuple[float, float]] = {}
        #: ``time.monotonic()`` of the last question due (asked, or skipped: a board beats)
        self._asked_at = 0.0
        self._ids = 0
        #: ``time.monotonic()`` when the question in flight was asked (None: none in flight)
        self._since: float | None = None
        self._client: Any = None
        #: how many questions this prober has asked (for tests and measurements)
        self.asked = 0
        #: set at the interpreter's exit (:func:`_stop_probers`): the threads end
        self.stopping = False
        self._threads = [threading.Thread(target=target, name="tdt-store-answering", daemon=True)
                         for target in (self._ask, self._watch)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """End the threads (at the interpreter's exit): a thread alive at its finalization can abort the process
        after its work is done ("terminate called without an active exception"; ``test_tune_dist.py``). A question
        in flight is waited for at most its client's timeout."""
        with self._cond:
            self.stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=SHORT_WAIT_S + 0.5)

    def open(self, window: float) -> int:
        with self._cond:
            self._ids += 1
            if not self._open:  # (the threads wait for a first section; a later one moves no question sooner)
                self._cond.notify_all()
            self._open[self._ids] = (window, time.monotonic())
            return self._ids

    def close(self, section: int) -> None:
        with self._cond:
            self._open.pop(section, None)

    def _window(self) -> float | None:
        """The shortest window of the open sections, waited for while none is open (call under the lock); None once
        the prober stops."""
        while not self._open and not self.stopping:
            self._cond.wait()
        return None if self.stopping else min(window for window, _ in self._open.values())

    def _due(self) -> float | None:
        """When the next question is due (``time.monotonic()``; call under the lock, waits while no section is
        open): :func:`every` s into the oldest open section and after the last question, so that a section that
        ends sooner, or sections one after another each shorter than that, ask nothing; None once it stops."""
        window = self._window()
        if window is None:
            return None
        return max(min(opened for _, opened in self._open.values()), self._asked_at) + every(window)

    def _ask(self) -> None:
        while True:
            with self._cond:
                due, now = self._due(), time.monotonic()
                if due is None:
                    return
                if due > now:
                    self._cond.wait(due - now)  # (a section opened meanwhile: looked at again)
                    continue
                self._asked_at = now
                if now - _watched_at.get(self.address[1], -BEATEN_S) < BEATEN_S or _CUT:  # (a cut store is lost)
                    continue
            if self._client is None and not _established(self.address[1]):  # (a host that has not started yet:
                continue  # torch prints each failed connect, with its stack)
            self._since = time.monotonic()
            try:
                if self._client is None:
                    self._client = _client(self.address)
                self._client.check(["triton_dist_tune/answering"])
                self.asked += 1
            except Exception as exc:  # the host has gone: the section's own requests say so
                log.debug("triton_dist_tune: the store did not take a question: %s", exc)
                self._client = None
            finally:
                self._since = None

    def _watch(self) -> None:
        while True:
            with self._cond:
                window = self._window()
                if window is None:
                    return
                PAUSES.wait(self._cond.wait, every(window))  # (woken early by a stop: the exit waits for no pause)
                if self.stopping:
                    return
                still = bool(self._open)
            since = self._since
            if still and (_CUT or (since is not None and ran(since) >= window)):
                _cut(self.address[1], time.monotonic() - (since or time.monotonic()))


def _client(address: tuple[str, int]) -> Any:
    """A client of the store at ``address`` of the prober's own."""
    import torch.distributed as dist

    return dist.TCPStore(address[0], address[1], is_master=False, timeout=timedelta(seconds=SHORT_WAIT_S),
                         wait_for_workers=False)


@contextmanager
def answering(store: Any, timeout: float) -> Iterator[None]:
    """A section of requests to ``store`` (a store, or its ``(host, port)``; nothing is watched but a TCP store)
    that no beat may watch, of a group whose step waits ``timeout`` (``T``): a request (or connect) of it in flight
    for :func:`window_of` ``(T)`` seconds reads as a host that does not answer, and this process's connections to
    the store are cut (see the module docstring). Costs no request where the section ends within :func:`every` s
    of its start; the store is not kept (a store kept would keep its host's server running)."""
    address, window = store if isinstance(store, tuple) else store_address(store), window_of(timeout)
    if address is None:
        yield
        return
    try:
        with _lock:
            prober = _answering.get(address[1])
            if prober is None or prober.address != address:
                if _stopped:
                    raise RuntimeError("exiting")
                if not _answering:
                    atexit.register(_stop_probers)  # (after the user's hooks made before the first section)
                prober = _answering[address[1]] = _Answering(address)
        section = prober.open(window)
    except RuntimeError:  # no thread at the interpreter's exit: unwatched, as before
        yield
        return
    try:
        yield
    finally:
        prober.close(section)


#: set at the interpreter's exit: no prober starts again
_stopped: list[bool] = []


def _stop_probers() -> None:
    """At the interpreter's exit, after the exit hooks registered later (the count-out at exit among them, which
    runs in a section): end every prober's threads."""
    with _lock:
        _stopped.append(True)
        probers = list(_answering.values())
    for prober in probers:
        prober.stop()


def _forked() -> None:
    """In a forked child: the parent's probers' threads are not there; its own are made at its first section."""
    global _lock
    _lock = threading.Lock()
    _answering.clear()
    _watched_at.clear()


os.register_at_fork(after_in_child=_forked)


def beat(silence: Silence | None, job: Any, key: str, amount: int = 1) -> None:
    """One beat (an ``add`` of ``amount`` to ``key``): on the process's side client of ``job`` once it is made,
    watched there by ``silence`` (on the job's client a user's blocking request can hold a beat while the host is
    well), else on the job's client, unwatched. A progress watch beats so: before, a unit waiting at a campaign's
    round for a frozen host (SIGSTOP, a paused VM) waited without end (``test_frozen_host.py``)."""
    side = side_client(job)
    if side is None or silence is None:
        job.add(key, amount)
        return
    silence.beating()
    side.add(key, amount)
    silence.beaten()
