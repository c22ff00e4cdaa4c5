"""The watchdog's backstop: :mod:`faulthandler`'s GIL-free timer, for code that hangs while holding the GIL (which
the watchdog's own thread then cannot outrun).

While any guarded phase is armed, the timer fires between :data:`BACKSTOP_S` and ``BACKSTOP_S +``
:data:`SLACK_S` seconds after the earliest armed deadline: it prints every thread's stack and ends the process with
status 1. Re-arming faulthandler's timer starts and joins a thread each time, which made a guard's arm and disarm
cost 30-50 times their own work (0.08-0.3 ms against 2-5 us on a 2-core VM, ``benchmarks/journal_cost.py``) for
each of the thousands of phases a tuning guards (its warm-ups, captures and samples). So the timer is moved only
when it would fire before that window or after it (about once per :data:`SLACK_S` of back-to-back phases), and when
the last phase ends it is left for the watchdog's monitor to cancel :data:`IDLE_S` seconds later, unless a phase
is armed again meanwhile (the next phase of a tuning usually is, within milliseconds).

A process forked while the timer is armed would inherit it half-made (the timer's thread does not survive a fork,
and cancelling it in the child then waits forever): the timer is cancelled before every ``os.fork`` and armed again
after it in the parent.
"""

from __future__ import annotations

import faulthandler
import math
import os
import threading
import time
from collections.abc import Callable

#: seconds after the earliest armed deadline at which the backstop ends the process (at the soonest)
BACKSTOP_S = 5.0
#: how much later than that it may fire instead: the window within which the timer is not moved
SLACK_S = 1.0
#: seconds after the last guarded phase ends before the monitor cancels the timer
IDLE_S = 0.5

#: what faulthandler raises for a timer it cannot arm: no usable stderr, or a time past the platform's time_t
#: (refused when checked: settings.MAX_SECONDS)
_REFUSED = (AttributeError, OSError, RuntimeError, ValueError, OverflowError)


class Backstop:
    """faulthandler's timer for one process (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: when the timer fires (``time.monotonic``), None when it is not armed
        self.at: float | None = None
        #: when a phase last armed or disarmed it
        self._used = 0.0
        self._resume: float | None = None
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=self._before_fork, after_in_parent=self._after_fork_in_parent,
                                after_in_child=self._after_fork_in_child)

    def keep(self, earliest: Callable[[], float | None]) -> None:
        """After a guard was armed or disarmed: keep the timer within its window of ``earliest()`` (the earliest
        armed deadline, read under this object's lock; None: none is armed, and the monitor cancels the timer
        after :data:`IDLE_S`)."""
        with self._lock:
            self._used = time.monotonic()
            first = earliest()
            if first is None:
                return
            due = first + BACKSTOP_S
            if self.at is not None and due <= self.at <= due + SLACK_S:
                return
            self._arm(due + SLACK_S)

    def idle_left(self) -> float | None:
        """Seconds until the monitor should cancel an armed timer once no phase is armed (None: none is)."""
        return None if self.at is None else self._used + IDLE_S - time.monotonic()

    def cancel_if_idle(self, armed: Callable[[], bool]) -> None:
        """Cancel the timer unless ``armed()`` (read under this object's lock: a phase armed meanwhile keeps it)."""
        with self._lock:
            if self.at is not None and not armed():
                self._cancel()

    def stop(self) -> None:
        """Cancel the timer (the interpreter exits)."""
        with self._lock:
            self._cancel()

    def _arm(self, at: float) -> None:
        """Fire at ``at`` (faulthandler's timer counts from its call, a little after: never sooner)."""
        left = math.ceil(max(0.001, at - time.monotonic()) * 1000) / 1000
        try:
            faulthandler.dump_traceback_later(left, exit=True)
            self.at = at
        except _REFUSED:
            self.at = None  # no backstop

    def _cancel(self) -> None:
        try:
            faulthandler.cancel_dump_traceback_later()
        except _REFUSED:
            pass
        self.at = None

    def _before_fork(self) -> None:
        self._lock.acquire()
        self._resume = self.at
        if self.at is not None:
            self._cancel()

    def _after_fork_in_parent(self) -> None:
        try:
            if self._resume is not None:
                self._arm(self._resume)
        finally:
            self._resume = None
            self._lock.release()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self.at = self._resume = None
