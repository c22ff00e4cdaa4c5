"""The spans this process stood still (stopped by SIGSTOP or a debugger, its machine paused), as its own threads'
timed waits saw them (:data:`PAUSES`).

A stopped process runs no thread at all, and ``time.monotonic`` (CLOCK_MONOTONIC) counts the stopped time: a thread
that waits ``s`` seconds wakes that much later than it was due. A hung run keeps the other threads running (the
failure board's beat, the watchdog's own wait): they wake on time. So the threads that wait in a loop anyway
(:meth:`~triton_dist_tune.group.store_board.StoreBoard` beats, the watchdog's monitor) wait through
:meth:`Pauses.wait`, which keeps each wait that ended :data:`MIN_S` or more past its due time, and the watchdog asks
(:meth:`Pauses.within`) how long the process stood still in a phase whose deadline passed, and moves that deadline
later by as much (:meth:`~triton_dist_tune.faults.watchdog.Guard.credit_pauses`): a deadline counts the time the
process ran. A board's beat also says so to the peers (:data:`~triton_dist_tune.group.store_board.PAUSE_MARK`).

A thread also wakes late when it cannot have the GIL: another thread holds it in one C call. Where that call works
(a compile holding the GIL, a spinning C loop) the process used CPU meanwhile, and a stopped one used none: a late
wake counts only where the process used less than :data:`CPU_SHARE` CPU seconds per second of it, counted from the
wait's start (a process busy on several cores just before it was stopped is then not read as stopped: its deadline
is taken as a hang's, as before). A C call that holds the GIL while it waits uses no CPU either: that, where it
returns before the faulthandler backstop ends the process, is read as a pause too (a hang among such pauses is then
journaled that much later).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

#: the least lateness of a wait read as the process standing still (seconds): a loaded host's scheduling delays and
#: GIL hand-overs are milliseconds
MIN_S = 1.0
#: the most CPU seconds the process may use per second of a late wake for it to count as standing still
CPU_SHARE = 0.5
#: how many spans are kept (each is a second or more: far more than any one phase needs)
KEPT = 64


def _still(due: float, cpu: float, woke: float, cpu_now: float) -> tuple[float, float] | None:
    """The span a wait due at ``due`` and woken at ``woke`` (the process's CPU time ``cpu`` at its start, ``cpu_now``
    then) shows the process standing still, or None."""
    late = woke - due
    if late >= MIN_S and cpu_now - cpu < CPU_SHARE * late:
        return due, woke
    return None


class Pauses:
    """The spans the process stood still, read from its threads' waits (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: deque[tuple[float, float]] = deque(maxlen=KEPT)
        #: thread id -> (when its wait in progress is due, the process's CPU time at its start)
        self._waiting: dict[int, tuple[float, float]] = {}

    def wait(self, waiter: Callable[[float], bool], seconds: float) -> bool:
        """``waiter(seconds)`` (an ``Event.wait``, a ``Condition.wait``), keeping the span it shows the process stood
        still, if any; returns what it returned."""
        me, due, cpu = threading.get_ident(), time.monotonic() + seconds, time.process_time()
        with self._lock:
            self._waiting[me] = (due, cpu)
        try:
            return waiter(seconds)
        finally:
            span = _still(due, cpu, time.monotonic(), time.process_time())
            with self._lock:
                self._waiting.pop(me, None)
                if span is not None:
                    self._spans.append(span)

    def within(self, since: float, until: float) -> float:
        """Seconds of ``[since, until]`` (``time.monotonic``) the process stood still, counting the waits still in
        progress that are already late (the thread that would keep the span may not have run yet since)."""
        cpu = time.process_time()
        with self._lock:
            spans = list(self._spans) + [span for due, start in self._waiting.values()
                                         if (span := _still(due, start, until, cpu)) is not None]
        total, covered = 0.0, since
        for start, end in sorted(spans):  # their union, within the bounds
            start, end = max(start, covered), min(end, until)
            if end > start:
                total, covered = total + end - start, end
        return total


PAUSES = Pauses()


def ran(since: float, now: float | None = None) -> float:
    """Seconds from ``since`` to ``now`` (default: now; ``time.monotonic``) this process ran: less the spans it stood
    still (:data:`PAUSES`). What a wait for another process measures, so that a machine paused with every rank on it
    (each clock counting the pause) reads no rank silent, and no wait run out, when it is continued."""
    now = time.monotonic() if now is None else now
    return now - since - PAUSES.within(since, now)
