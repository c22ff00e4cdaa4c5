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
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from .clients import side_client

log = logging.getLogger("triton_dist_tune")

#: why this process cut its connections to the store (None: it has not): said by the errors of a lost store
_CUT: list[str] = []


def lost_reason() -> str:
    """How the store was lost, for an error that says so: it ended, or it stopped answering (this process cut it)."""
    return _CUT[-1] if _CUT else "has ended"


def was_cut() -> bool:
    """Whether this process cut its connections to the store because its host stopped answering."""
    return bool(_CUT)


def store_port(store: Any) -> int | None:
    """The port of the TCP store under ``store`` (prefix stores unwrapped); None where there is none."""
    for _ in range(16):
        port = getattr(store, "port", None)
        if isinstance(port, int):
            return port
        store = getattr(store, "underlying_store", None)
        if store is None:
            return None
    return None


def cut_connections(port: int) -> int:
    """Shut down every socket of this process whose peer's port is ``port``; return how many."""
    inodes: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes[link[8:-1]] = int(fd)
    cut = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[9] not in inodes or int(fields[2].rsplit(":", 1)[1], 16) != port:
                continue
            sock = socket.socket(fileno=inodes[fields[9]])
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

    def beaten(self) -> None:
        self.since = None

    def _watch(self) -> None:
        every = max(0.05, min(1.0, self.window / 5))
        while not self._stop.wait(every):
            since = self.since
            if since is None or time.monotonic() - since < self.window or self.port is None:
                continue
            waited = time.monotonic() - since
            _CUT.append(f"did not answer for {waited:.0f} s (frozen, or cut off from this host): this rank closed "
                        "its connections to it")
            log.warning("triton_dist_tune: the key-value store (port %d) did not answer a request for %.1f s: its "
                        "host is frozen or cut off; %d connection(s) to it closed", self.port, waited,
                        cut_connections(self.port))
            return


def beat(silence: Silence | None, job: Any, key: str) -> None:
    """One beat (an ``add`` of 1 to ``key``): on the process's side client of ``job`` once it is made, watched there
    by ``silence`` (on the job's client a user's blocking request can hold a beat while the host is well), else on
    the job's client, unwatched. A progress watch beats so: before, a unit waiting at a campaign's round for a frozen
    host (SIGSTOP, a paused VM) waited without end (``test_frozen_host.py``)."""
    side = side_client(job)
    if side is None or silence is None:
        job.add(key, 1)
        return
    silence.beating()
    side.add(key, 1)
    silence.beaten()
