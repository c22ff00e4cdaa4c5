"""The watchdog: one deadline per tuning (a :class:`Guard`), and the monitor of the group's failure board.

A hung kernel or collective cannot be interrupted in-process, so a rank whose guarded phase outlives its deadline
records that it hung and ends its process with a clear message. Any number of threads may tune at once: each
tuning holds a :class:`Guard` of its own (:meth:`Watchdog.guard`), and one daemon thread watches every guard's
deadline, so one tuning's arm or disarm never touches another's.

A guard can also watch the group's failure board (:class:`~triton_dist_tune.group.channel.Board`): when another
rank posts that its run of config ``i`` raised while this rank is still inside config ``i`` (stuck in a
collective of the function, waiting for the rank that raised), the guard waits :func:`failure_grace` seconds and,
if the rank is still inside, calls its ``on_peer`` (which journals what the report is evidence of: the config
failed with the other rank's error, or, in the compile pass or after an interruption, nothing is blamed; it
returns a sentence saying which), posts that this rank ended, prints one line saying so and how to resume, and
ends the process with :data:`PEER_EXIT_CODE`: a process is the only thing that can leave a collective.

Under ``torchrun --max-restarts`` the job then restarts and the journal leaves that config out; without restarts,
running the job again resumes the same way.

A deadline counts the time the phase's process ran, not the time it stood still (stopped by SIGSTOP or a debugger,
its machine paused): the monitor's waits and the failure board's beats are timed waits whose late wakes say how long
the process stood still (:mod:`~triton_dist_tune.group.pauses`), and a deadline that passes is first moved later by
the seconds the process stood still in the phase (:meth:`Guard.credit_pauses`). A run stopped and continued then
goes on with the whole timeout it was given; one that is still inside the phase once that time has run is hung.

The watchdog is a Python thread, which needs the GIL to run. As a backstop for code that hangs while holding the
GIL, :mod:`faulthandler` is armed too, :data:`BACKSTOP_S` seconds (to 1 s more) after the earliest deadline
(:mod:`~triton_dist_tune.faults.backstop`): it needs no GIL, prints every thread's stack and ends the process with
status 1 (the journal then shows the config as started: a suspect, retried once by the next attempt). This takes
over ``faulthandler.dump_traceback_later`` while a guarded phase runs, and for half a second after the last. When
the watchdog fires, it first holds the backstop a whole window past that moment (:meth:`~triton_dist_tune.faults.
backstop.Backstop.hold`), so that the backstop, due soon after a deadline this process was frozen through, does not
end it in the middle of its last acts.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..group.exits import count_out
from ..group.pauses import PAUSES
from ..group.store_silence import window_of
from .backstop import BACKSTOP_S as BACKSTOP_S
from .backstop import Backstop

log = logging.getLogger("triton_dist_tune")

#: exit status of a process ended by the watchdog (a hang)
EXIT_CODE = 86
#: exit status of a process ended because another rank's run raised while this one was inside a collective
PEER_EXIT_CODE = 87
#: how often the monitor reads the failure board while a guarded phase runs
POLL_S = 0.5
#: the most seconds a rank stays inside a config after another rank posted that this config raised there
GRACE_S = 5.0
#: how far into a guarded phase the monitor first reads the other ranks' beats (:meth:`Guard.next_look`): a phase that
#: ends sooner reads none
FIRST_LOOK_S = 1.0


def exchange_timeout(timeout: float) -> float:
    """How long a rank waits at the exchange after a phase that the watchdog bounds by ``timeout``.

    A little longer than the watchdog, so that a rank whose phase hung is ended by its own watchdog (and
    journals the config as hung) before the ranks waiting for it give up with a ``GroupTimeoutError``
    (``T + max(1, T/10)``: :func:`~triton_dist_tune.group.store_silence.window_of`, the same bound).
    """
    return window_of(timeout)


def failure_grace(timeout: float) -> float:
    """Seconds a rank may stay inside a config after another rank's run of it raised: enough to finish a run that
    is not stuck, far less than the deadline of a hang."""
    return min(GRACE_S, 0.5 * timeout)


class Guard:
    """The deadline of one tuning (one thread): :meth:`arm` and :meth:`disarm` bracket each guarded phase."""

    def __init__(self, dog: Watchdog, board: Any = None, rank: int = 0) -> None:
        self._dog, self.board, self.rank = dog, board, rank
        self.deadline: float | None = None
        self.what = ""
        self.timeout = 0.0
        self.index: int | None = None
        #: the step of the protocol the guarded phase belongs to (see :meth:`arm`)
        self.step = ""
        #: seconds the phase may still take, unstuck, after another rank's report of another config of the step
        self.patience = 0.0
        #: journals the hang; may return what it journaled instead (the watchdog's message then says that)
        self.on_fire: Callable[[], str | None] | None = None
        self.on_peer: Callable[[Any], str] | None = None
        self.seen: dict[int, float] = {}  # rank -> when its failure in the current config was first seen
        #: the peers' reports of the phase last read on the board: their grace goes on where the board cannot be read
        #: any more (the store's host, a peer in the same wait, ended at its own grace's end a moment earlier)
        self.reported: list[Any] = []
        #: whether the phase waits for its peers now (None: taken as always): the grace after a peer's report counts
        #: only while it does (``waiting_since``: since when, None while it does not)
        self.waiting: Callable[[list[int]], bool] | None = None
        self.waiting_since: float | None = None
        #: when the phase (or its current run, :meth:`restart`) began (``time.monotonic``)
        self.began = 0.0
        #: seconds this process stood still in the phase, already added to its deadline (:meth:`credit_pauses`)
        self.credited = 0.0
        #: whether the monitor read the other ranks' beats in this phase: early (:data:`FIRST_LOOK_S` in) and a
        #: span before its deadline (``board.look``; :meth:`next_look`)
        self.first_looked = False
        self.looked = False

    def arm(self, timeout: float, what: str, on_fire: Callable[[], str | None], index: int | None = None,
            on_peer: Callable[[Any], str] | None = None, step: str = "", patience: float = 0.0,
            waiting: Callable[[list[int]], bool] | None = None) -> None:
        """Fire ``on_fire`` and end the process unless :meth:`disarm` comes within ``timeout`` seconds; with
        ``index`` and a board, end it (after ``on_peer``, which journals the report's evidence and returns a
        sentence saying what it journaled, for the message) when another rank posts a failure in this phase's
        ``step`` (any config of it: in a steady round a rank may be inside the next config's collective, waiting
        for a rank that failed in the previous one), or, for reports that name no step, in config ``index``. A
        report of another config of the step ends it only after ``patience`` seconds (at least the grace): the
        time this phase may take when it is not stuck (a rank-local function is never stuck). With ``waiting``
        (whether the phase's thread waits now for one of the reporting peers, by their ranks on the board: a
        contextual run inside a collective of a group that holds one), the grace counts only while it does: a rank
        that goes on with other work after a peer's report, or waits on other peers, is not stuck on that peer."""
        with self._dog.cond:
            self.began = time.monotonic()
            self.waiting, self.waiting_since = waiting, None
            self.deadline = self.began + timeout
            self.what, self.timeout, self.index, self.step = what, timeout, index, step
            self.patience = patience
            self.on_fire, self.on_peer = on_fire, on_peer
            self.seen, self.credited, self.first_looked, self.looked = {}, 0.0, False, False
            self.reported = []
        self._dog.watch(self)

    def restart(self) -> None:
        """Give the armed phase its whole timeout again from now (the next run of a phase of several runs: each
        run has the deadline, so a phase of healthy runs that together outlast it is not taken for a hang)."""
        with self._dog.cond:
            if self.deadline is None:
                return
            self.began = time.monotonic()
            self.deadline = self.began + self.timeout
            self.credited, self.first_looked = 0.0, False
            self.looked = False  # the beats a fire compares with are read again, a span before the new deadline
        # the deadline only moves later: the thread, which wakes at the earlier one and reads them again, is left
        # asleep (a wake per run cost the tuner's thread the GIL on a host whose CPUs compile); the backstop follows
        self._dog.backstop.keep(self._dog._earliest)

    def disarm(self) -> None:
        """Cancel the deadline set by :meth:`arm`."""
        with self._dog.cond:
            self.deadline = None
            self.on_fire = self.on_peer = None
        self._dog.unwatch(self)

    def close(self) -> None:
        """The tuning is over: forget this guard."""
        self.disarm()
        self._dog.forget(self)

    @property
    def watches_board(self) -> bool:
        """Whether the monitor reads the board's reports for this phase (twice a second)."""
        return self.deadline is not None and self.index is not None and self.board is not None

    def credit_pauses(self, now: float) -> bool:
        """Move the deadline later by the seconds this process stood still in the phase (:mod:`~triton_dist_tune.
        group.pauses`) that it was not moved by yet; whether it moved. (Called under the watchdog's lock, by the
        monitor, as the deadline passes: a phase stopped and continued had its ``timeout`` of running time only when
        it is still inside after it.)"""
        stood = PAUSES.within(self.began, now)
        if stood <= self.credited or self.deadline is None:
            return False
        self.deadline += stood - self.credited
        self.credited = stood
        return True

    def next_look(self) -> tuple[float, bool] | None:
        """When the monitor reads the other ranks' beats next in this phase (``board.look``), and whether that is
        its first look (:data:`FIRST_LOOK_S` into the phase, where the phase's last look comes later: a peer stopped
        after it and continued before that last look is still read stopped, by the mark its beat took:
        :meth:`~triton_dist_tune.group.store_board.StoreBoard.stopped`), or the last, a span before the deadline (the
        beats a fire compares with); None: no look is due (no board that beats, or both done)."""
        span = getattr(self.board, "beats_span", 0.0)
        if self.deadline is None or not span or self.looked:
            return None
        last = self.deadline - span
        if not self.first_looked and last > self.began + FIRST_LOOK_S + POLL_S:
            return self.began + FIRST_LOOK_S, True
        return last, False


class Watchdog:
    """One daemon thread per process that watches the deadline of every armed :class:`Guard`."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self._guards: list[Guard] = []
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._registered = False
        self.backstop = Backstop()

    def guard(self, board: Any = None, rank: int = 0) -> Guard:
        """A new guard for one tuning (watching ``board``, the group's failure board, when given)."""
        guard = Guard(self, board, rank)
        with self.cond:
            self._guards.append(guard)
        return guard

    def forget(self, guard: Guard) -> None:
        with self.cond:
            if guard in self._guards:
                self._guards.remove(guard)

    def watch(self, guard: Guard) -> None:
        """A guard was armed: start the thread if need be, wake it, and move the backstop."""
        with self.cond:
            if guard not in self._guards:
                self._guards.append(guard)
            if self._thread is None:
                if not self._registered:
                    atexit.register(self.stop)
                    self._registered = True
                self._stopping = False
                self._thread = threading.Thread(target=self._watch, name="triton_dist_tune-watchdog", daemon=True)
                self._thread.start()
            self.cond.notify()
        self.backstop.keep(self._earliest)

    def unwatch(self, guard: Guard) -> None:
        self.backstop.keep(self._earliest)  # first: the monitor, woken next, counts the backstop's idle time from now
        with self.cond:
            self.cond.notify()

    def _earliest(self) -> float | None:
        """The earliest armed deadline (None: none is armed)."""
        with self.cond:
            return min((g.deadline for g in self._guards if g.deadline is not None), default=None)

    def _armed(self) -> bool:
        return self._earliest() is not None

    def stop(self) -> None:
        """End the watchdog thread (at interpreter exit), so that no thread of ours outlives the interpreter."""
        self.backstop.stop()
        with self.cond:
            self._stopping = True
            thread, self._thread = self._thread, None
            self.cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def _watch(self) -> None:
        with self.cond:
            while not self._stopping:
                armed = [g for g in self._guards if g.deadline is not None]
                now = time.monotonic()
                if [g for g in armed if g.deadline <= now and g.credit_pauses(now)]:  # it stood still: a later one
                    self._unlocked(lambda: self.backstop.keep(self._earliest))  # (the backstop follows, unless held)
                    continue
                late = [g for g in armed if g.deadline <= now]
                if self.backstop.held != bool(late):  # the backstop held before a fire, let go if the phase ended first
                    self._unlocked(self.backstop.hold if late else lambda: self.backstop.let_go(self._earliest))
                    continue  # (out of the lock: keep takes the backstop's, then this one; read the deadlines again)
                if not armed:
                    idle_left = self.backstop.idle_left()
                    if idle_left is None:
                        self.cond.wait()
                    elif idle_left > 0:
                        self.cond.wait(idle_left)
                    else:  # no phase armed again meanwhile: cancel the backstop, outside the lock (as arm does)
                        self._unlocked(lambda: self.backstop.cancel_if_idle(self._armed))
                    continue
                if late:
                    self._fire(late[0])
                wait = min(g.deadline for g in armed) - now
                if any(g.watches_board or g.next_look() is not None for g in armed):
                    self.cond.release()
                    try:  # the board is read outside the lock: a slow store must not block arm and disarm
                        for g in armed:
                            self._check_board(g)
                    finally:
                        self.cond.acquire()
                    now = time.monotonic()
                    wait = min([wait, *(POLL_S for g in armed if g.watches_board),
                                *(look[0] - now for g in armed if (look := g.next_look()) is not None)])
                PAUSES.wait(self.cond.wait, max(0.001, wait))  # (late: the process stood still, pauses.py)

    def _unlocked(self, act: Callable[[], None]) -> None:
        """Run ``act`` on the monitor's thread, which holds :attr:`cond`, without it."""
        self.cond.release()
        try:
            act()
        finally:
            self.cond.acquire()

    def _check_board(self, guard: Guard) -> None:
        look = guard.next_look()
        if look is not None and time.monotonic() >= look[0]:
            first = look[1]
            if first:
                guard.first_looked = True
            else:
                guard.looked = True  # the beats a fire compares with (a frozen peer's stays still): once per phase
            guard.board.look(first=first)
        index = guard.index
        if not guard.watches_board or index is None:
            return
        try:
            reports = guard.reported = [r for r in guard.board.read() if r.rank != guard.rank and
                                        (not r.ended or r.interrupted) and
                                        (r.step == guard.step if r.step and guard.step else r.index == index)]
        except Exception:  # the store is going away: the deadline holds, and the grace of the reports read before
            reports = guard.reported
        now = time.monotonic()
        if guard.waiting is not None and reports:
            waiting = guard.waiting([report.rank for report in reports])
            guard.waiting_since = (guard.waiting_since or now) if waiting else None
            if guard.waiting_since is None:
                return
        for report in reports:
            first = max(guard.seen.setdefault(report.rank, now), guard.waiting_since or 0.0)
            wait = failure_grace(guard.timeout)
            if report.index != index:  # another config of this step: this rank may be inside its own, unstuck
                wait = max(wait, guard.patience)
            if now - first >= wait and guard.index == index and guard.deadline is not None:
                self._peer_fire(guard, report)

    def _fire(self, guard: Guard) -> None:
        from ..disk.logs import global_rank

        told: str | None = None
        try:
            if guard.on_fire is not None:
                told = guard.on_fire()
        finally:
            _end(f"triton_dist_tune: watchdog: rank {global_rank()}: {guard.what} did not finish within "
                 f"{guard.timeout:g} s (autotune timeout / TRITON_DIST_AUTOTUNE_TIMEOUT); "
                 f"{told or 'recorded as hung in the journal'}; ending this process with exit status {EXIT_CODE}; "
                 "resume with torchrun --max-restarts or by running the job again"
                 f"{'' if told else ' (the config is left out)'}", EXIT_CODE)

    def _peer_fire(self, guard: Guard, report: Any) -> None:
        from ..disk.logs import global_rank

        what, journaled = guard.what, "Nothing was journaled"
        self.backstop.hold()  # its last acts are not cut short (faults/backstop.py; this thread holds no lock here)
        try:
            if guard.on_peer is not None:
                journaled = guard.on_peer(report)
            guard.board.post_ended(guard.rank, report)
        except Exception:
            pass
        finally:
            waiting = "" if report.interrupted else ", waiting for that rank"  # (one that lost a peer too: not it)
            _end(f"triton_dist_tune: rank {global_rank()}: {report.describe()}, while this rank was still inside "
                 f"{what} (in a collective of the function{waiting}): a process can only leave a "
                 f"collective by ending, so this one ends now with exit status {PEER_EXIT_CODE}. {journaled}: resume "
                 "with torchrun --max-restarts or by running the job again", PEER_EXIT_CODE)


def _end(message: str, code: int) -> None:
    """Print ``message`` (with no handler configured, logging's last resort prints it on stderr), count this rank
    out of the job (``os._exit`` runs no exit hook: the process hosting the store would otherwise wait for it at its
    own exit; :func:`~triton_dist_tune.group.exits.count_out`, within a second) and exit."""
    log.critical(message)
    for handler in logging.getLogger("triton_dist_tune").handlers:
        handler.flush()
    sys.stderr.flush()
    count_out(f"was ended by its watchdog (exit status {code}: "
              f"{'a hang' if code == EXIT_CODE else 'another rank failed while it was inside a collective'})")
    os._exit(code)


WATCHDOG = Watchdog()
