"""An interruption raised while a rank applies a run's exchange result to its call's state, held until the whole
result is applied (:func:`holding`).

Every rank applies the same result alike (:mod:`~.exchange`): new tracks, each track's step, the decisions. A
line of the rank's log (a handler of the user's: Ctrl-C's ``KeyboardInterrupt``, ``sys.exit``'s ``SystemExit``) or
Triton's autotuning listener is the user's code inside that application. Raised on at once, it left the result half
applied on this rank alone: a key its peers decided after that line in the same result stayed undecided here, and
the rank's next call tuned it again alone (and could choose another config than theirs). Held, it is raised once
the whole result is applied, as on every rank.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .state import CallState

#: the methods of a logger that write a line
_LINES = frozenset({"debug", "info", "warning", "error", "exception", "critical", "log"})


class HeldLog:
    """``log`` (the rank's log), whose lines hold an interruption a handler raises in ``held``, instead of raising
    it; any other attribute is the logger's."""

    def __init__(self, log: logging.Logger, held: list[BaseException]) -> None:
        self._log, self._held = log, held

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._log, name)
        if name not in _LINES:
            return attr

        def line(*args: Any, **kwargs: Any) -> None:
            try:
                attr(*args, **kwargs)
            except Exception:
                raise
            except BaseException as exc:  # Ctrl-C, sys.exit in a handler: raised once the result is applied
                hold(self._held, exc)

        return line


def hold(held: list[BaseException] | None, exc: BaseException) -> None:
    """Hold ``exc`` in ``held`` (the first one is raised: :func:`holding`); with nothing held (outside
    :func:`holding`), or an ``Exception``, raise it."""
    if held is None or isinstance(exc, Exception):
        raise exc
    held.append(exc)


@contextlib.contextmanager
def holding(session: CallState) -> Iterator[list[BaseException]]:
    """While inside, ``session.log``'s lines and Triton's listener (:mod:`~.decisions`) hold the interruptions they
    raise in the list yielded (``session.held``), for the caller to raise once the whole result is applied."""
    held: list[BaseException] = []
    log = session.log  # (a cached property: its value is in the instance's dict from here on)
    saved, session.held = session.held, held
    session.__dict__["log"] = HeldLog(log, held)
    try:
        yield held
    finally:
        session.held, session.__dict__["log"] = saved, log
