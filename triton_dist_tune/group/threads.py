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
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Turns:
    """The turns of one group's threads: its lock, and who holds or waits for it."""

    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock
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
        me = threading.get_ident()
        with self._guard:
            mine = self._turns.get(me)
            if mine is None:
                mine = self._turns[me] = [0, 1]
                crowd = len(self._turns)
                for other in self._turns.values():
                    other[1] = max(other[1], crowd)
            mine[0] += 1
        try:
            with self.lock:
                yield
        except errors as exc:
            if mine[1] > 1:
                threads_note(exc, mine[1], title)
            raise
        finally:
            with self._guard:
                mine[0] -= 1
                if not mine[0]:
                    del self._turns[me]


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
