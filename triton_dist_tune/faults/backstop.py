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

When the watchdog fires (a deadline passed, or another rank's report ends this one) its last acts take seconds: a
look at the other ranks' beats waits a span of them (3.5 s), and the journal and the board are written. The timer,
due a window after the deadline, could then end the process in the middle of them (exit 1, the config only
``started``) instead of the watchdog (exit 86, the config journaled): the watchdog holds it (:meth:`~Backstop.hold`)
first, a whole window (:data:`BACKSTOP_S` + :data:`SLACK_S`) past that moment, where nothing moves it again, so that
last acts stuck with the GIL still end there. That happened where a rank was frozen (SIGSTOP) past its deadline and
continued before its timer was due: the watchdog fired on waking and looked at the beats, and the overdue timer ended
it in that look (two of the three jobs of 190 of ``benchmarks/chaos.py`` that a backstop ended; ``test_faults.py::
test_a_rank_continued_after_its_deadline_blames_no_config_and_is_ended_by_its_watchdog``). A rank continued after its
timer was due (the third) is still ended by the timer, at once: faulthandler's timer counts the frozen seconds too,
and its thread, which needs no GIL, runs before the watchdog's can (no timer of a frozen process can be moved).

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
        #: the watchdog fired: the timer stays where :meth:`hold` put it
        self.held = False
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
            if self.held:
                return
            first = earliest()
            if first is None:
                return
            due = first + BACKSTOP_S
            if self.at is not None and due <= self.at <= due + SLACK_S:
                return
            self._arm(due + SLACK_S)

    def hold(self) -> None:
        """The watchdog fires (its last acts, then the end of the process): fire a whole window
        (:data:`BACKSTOP_S` + :data:`SLACK_S`) from now, and move no more (see the module docstring). The caller
        holds no lock of the watchdog's (:meth:`keep` takes this object's lock, then the watchdog's)."""
        with self._lock:
            self.held = True
            self._arm(time.monotonic() + BACKSTOP_S + SLACK_S)

    def let_go(self, earliest: Callable[[], float | None]) -> None:
        """The phase the watchdog fired for was disarmed before it could act (its run ended just then): the timer
        follows the armed deadlines again (:meth:`keep`)."""
        with self._lock:
            self.held = False
        self.keep(earliest)

    def idle_left(self) -> float | None:
        """Seconds until the monitor should cancel an armed timer once no phase is armed (None: none is)."""
        return None if self.at is None else self._used + IDLE_S - time.monotonic()

    def cancel_if_idle(self, armed: Callable[[], bool]) -> None:
        """Cancel the timer unless ``armed()`` (read under this object's lock: a phase armed meanwhile keeps it)."""
        with self._lock:
            if self.at is not None and not self.held and not armed():
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
