"""Threads of one process tuning on one group: one at a time (the group's lock), counted, so that an exchange error
that threads reaching tunings in different orders on different ranks cause says so.

Every tuning on a group (an ``autotune`` tuning or serving of an undecided key, with ``autotune_replicas`` on the
replicas' group too, a campaign's key, a ``contextual_autotune`` tuning call or agreement) holds the group's
re-entrant lock through :meth:`Turns.turn` from its first exchange to its end; a decided call takes none. Threads
that reach tunings in the same order on every rank therefore tune them one after another, alike everywhere. Threads
that reach them in different orders pair one tuning's exchange with another's on the other ranks: every rank raises
:class:`~triton_dist_tune.errors.MismatchError` or :class:`~triton_dist_tune.group.channel.ExchangeError` at once,
and such an error raised in a turn during which another thread of the process was tuning on the group too (waiting
for the lock or holding it) says so (:func:`threads_note`).

A tuning nested in another on a second group takes that group's lock while it holds the first's. Two threads that
nest tunings on two groups in opposite orders would then wait for each other for ever: a thread that waits for a
group's lock while it holds another's looks for such a cycle of waits among the process's threads (:class:`_Waits`),
and every thread of a cycle found raises :class:`~triton_dist_tune.errors.CrossedTurnsError`, which blames no config.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import CrossedTurnsError

#: how often a thread waiting for a group's lock while it holds another group's looks for a cycle of waits (s)
POLL_S = 0.05


class _Waits:
    """Which thread holds each group's lock and which lock each thread waits for, across the process's groups: a
    thread that holds one group's turn and waits for another's finds a cycle of such waits (two threads nesting
    tunings on two groups in opposite orders), and every thread of the cycle then raises
    :class:`~triton_dist_tune.errors.CrossedTurnsError` instead of waiting for ever."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        #: a group's turns -> the thread holding its lock, and how many times (nested)
        self.owner: dict[Turns, list[int]] = {}
        #: a thread -> the group's turns it waits for
        self.wanted: dict[int, Turns] = {}
        #: a thread -> the groups' titles of the cycle it was found in (it raises at its next look)
        self.crossed: dict[int, list[str]] = {}

    def holds_other(self, me: int, turns: Turns) -> bool:
        return any(owner[0] == me for other, owner in self.owner.items() if other is not turns)

    def cycle(self, me: int, turns: Turns) -> list[tuple[int, Turns]] | None:
        """The waits from ``me`` (waiting for ``turns``) back to ``me``: [(thread, the turns it waits for)], or
        None."""
        path, wanted = [(me, turns)], turns
        while True:
            owner = self.owner.get(wanted)
            if owner is None:
                return None
            if owner[0] == me:
                return path
            wanted = self.wanted.get(owner[0])
            if wanted is None or any(thread == owner[0] for thread, _ in path):
                return None
            path.append((owner[0], wanted))


_WAITS = _Waits()


class Turns:
    """The turns of one group's threads: its lock, and who holds or waits for it."""

    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock
        #: the group's title, for messages (set at each turn)
        self.title = ""
        #: thread id -> [its turns in progress (nested), the most threads in a turn at once since its outermost
        #: turn began]
        self._turns: dict[int, list[int]] = {}
        self._guard = threading.Lock()

    def count(self) -> int:
        """How many threads are in a turn now (holding the lock or waiting for it)."""
        return len(self._turns)

    @contextmanager
    def turn(self, title: str, errors: tuple[type[Exception], ...]) -> Iterator[None]:
        """Hold the lock (re-entrant: a tuning nested in another on the same thread takes it again); an error of
        ``errors`` raised inside, while another thread was in a turn too at some point of this thread's, gets
        :func:`threads_note` (``title``: the group's)."""
        me, self.title = threading.get_ident(), title
        with self._guard:
            mine = self._turns.get(me)
            if mine is None:
                mine = self._turns[me] = [0, 1]
                crowd = len(self._turns)
                for other in self._turns.values():
                    other[1] = max(other[1], crowd)
            mine[0] += 1
        try:
            self._acquire(me)
            try:
                yield
            finally:
                self._release(me)
        except errors as exc:
            if mine[1] > 1:
                threads_note(exc, mine[1], title)
            raise
        finally:
            with self._guard:
                mine[0] -= 1
                if not mine[0]:
                    del self._turns[me]

    def _acquire(self, me: int) -> None:
        """Take the lock. A thread that holds another group's turn meanwhile looks for a cycle of waits every
        :data:`POLL_S` (see :class:`_Waits`): found, every thread of it raises :class:`CrossedTurnsError`."""
        waits = _WAITS
        if not self.lock.acquire(blocking=False):
            with waits.guard:
                nested = waits.holds_other(me, self)
                waits.wanted[me] = self
            try:
                while not self.lock.acquire(timeout=POLL_S if nested else -1):
                    with waits.guard:
                        titles = waits.crossed.pop(me, None)
                        found = waits.cycle(me, self) if titles is None else None
                        if found is not None:
                            titles = [t.title for _, t in found]
                            for thread, _ in found[1:]:
                                waits.crossed[thread] = titles
                    if titles is not None:
                        raise CrossedTurnsError(crossed_message(self.title, titles))
            finally:
                with waits.guard:
                    waits.wanted.pop(me, None)
                    titles = waits.crossed.pop(me, None)  # found in a cycle by another thread, which then left it
            if titles is not None:  # every thread of the cycle raises, whichever found it, so that every rank's
                self.lock.release()  # threads end alike
                raise CrossedTurnsError(crossed_message(self.title, titles))
        with waits.guard:
            owner = waits.owner.setdefault(self, [me, 0])
            owner[1] += 1

    def _release(self, me: int) -> None:
        with _WAITS.guard:
            owner = _WAITS.owner[self]
            owner[1] -= 1
            if not owner[1]:
                del _WAITS.owner[self]
        self.lock.release()


def holds_a_turn() -> bool:
    """Whether this thread holds some group's turn now (it is inside a tuning, on any group)."""
    me = threading.get_ident()
    with _WAITS.guard:
        return any(owner[0] == me for owner in _WAITS.owner.values())


def threads_note(exc: Exception, threads: int, title: str) -> None:
    """Add to ``exc`` (an exchange error raised in a turn) that ``threads`` threads of this process were tuning on
    the group ``title`` at once: the likely cause (once; an error whose arguments are not one text is left as it
    is)."""
    if getattr(exc, "threads_note", False) or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return
    exc.args = (f"{exc.args[0]}. {threads} threads of this process were tuning on group '{title}' at once, the "
                "likely cause: tunings from several threads run one at a time per process, so every rank must reach "
                "them in the same order, else their exchanges pair different tunings; tune from one thread, or "
                "call each key once from one thread, in the same order on every rank, before the threads start "
                "(a warm-up)",)
    exc.threads_note = True  # type: ignore[attr-defined]


def crossed_message(title: str, titles: list[str]) -> str:
    """The error of a thread of a cycle of waits for groups' turns (:class:`_Waits`)."""
    groups = " -> ".join(f"'{t}'" for t in [*titles, titles[0]])
    return (f"triton_dist_tune: threads of this process nest tunings on several groups in opposite orders: each "
            f"holds one group's turn and waits for the next one's ({groups}), so none would ever go on. Every thread "
            f"of the cycle raises this (on every rank where the same cycle formed), and no config is blamed (this "
            f"thread waited for group '{title}'). Nest tunings on several groups in one order in every thread, or "
            "tune from one thread first (a warm-up call per key)")
