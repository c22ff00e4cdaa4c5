"""An interruption raised while a rank applies a run's exchange result to its call's state, held until the whole
result is applied (:func:`holding`).

Every rank applies the same result alike (:mod:`~.exchange`): new tracks, each track's step, the decisions. A
line of the rank's log (a handler of the user's: Ctrl-C's ``KeyboardInterrupt``, ``sys.exit``'s ``SystemExit``) or
Triton's autotuning listener is the user's code inside that application. Raised on at once, it left the result half
applied on this rank alone: a key its peers decided after that line in the same result stayed undecided here, and
the rank's next call tuned it again alone (and could choose another config than theirs). Held, it is raised once
the whole result is applied, as on every rank. So is a signal whose handler is Python's (Ctrl-C's SIGINT, a
SIGTERM that raises ``SystemExit``, a handler raising a task's ``CancelledError``): on the main thread its handler is
put aside while the result is applied, and the signal is raised again to it once the whole result is applied (before,
found by ``chaos.py --faults interrupt``, job seed 707996490: a SIGTERM sent as the rank waited for the result of the
exchange that decided a key ran its handler in the journal's write of that key's step, and the rank's later calls ran
the key undecided, its peers the group's choice). A wait for another exchange inside the application (a disk-cache
lookup of keys met by ranks other than 0 alone: :func:`undeferred`) takes signals as ever.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


class CallState(Protocol):
    """What :func:`holding` reads of a call's state (:class:`~.state.CallState`)."""

    held: Held | None
    log: logging.Logger

#: the methods of a logger that write a line
_LINES = frozenset({"debug", "info", "warning", "error", "exception", "critical", "log"})


@dataclass
class Held:
    """What :func:`holding` held while a result was applied: the interruptions the user's code raised (the first
    is raised), and the signals whose handlers were put aside (raised again to them first)."""

    errors: list[BaseException] = field(default_factory=list)
    signals: list[int] = field(default_factory=list)
    #: signal -> its handler, put aside while the result is applied (:func:`holding`; empty off the main thread)
    handlers: dict[int, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.errors or self.signals)

    def raise_now(self) -> None:
        """Raise what was held, once the whole result is applied: each signal to its own handler, then the first
        interruption (nothing where neither is, or where the signals' handlers return)."""
        signals, self.signals = self.signals, []
        for signum in signals:
            signal.raise_signal(signum)  # (its handler runs here, on the main thread: it may raise)
        if self.errors:
            raise self.errors[0]

    def defer(self) -> None:
        """On the main thread, put aside every signal handler that is Python's: a signal is noted, not handled."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in signal.valid_signals():
            try:
                handler = signal.getsignal(signum)
                if callable(handler):
                    signal.signal(signum, self._noted)
                    self.handlers[signum] = handler
            except (OSError, ValueError, RuntimeError):  # a signal Python cannot handle here
                continue

    def restore(self) -> None:
        """Put the handlers :meth:`defer` put aside back (a signal noted meanwhile stays in :attr:`signals`)."""
        handlers, self.handlers = self.handlers, {}
        for signum, handler in handlers.items():
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                signal.signal(signum, handler)

    def _noted(self, signum: int, frame: Any) -> None:
        if signum not in self.signals:
            self.signals.append(signum)


class HeldLog:
    """``log`` (the rank's log), whose lines hold an interruption a handler raises in ``held``, instead of raising
    it; any other attribute is the logger's."""

    def __init__(self, log: logging.Logger, held: Held) -> None:
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


def hold(held: Held | None, exc: BaseException) -> None:
    """Hold ``exc`` in ``held`` (the first one is raised: :meth:`Held.raise_now`); with nothing held (outside
    :func:`holding`), or an ``Exception``, raise it."""
    if held is None or isinstance(exc, Exception):
        raise exc
    held.errors.append(exc)


@contextlib.contextmanager
def holding(session: CallState) -> Iterator[Held]:
    """While inside, ``session.log``'s lines and Triton's listener (:mod:`~.decisions`) hold the interruptions they
    raise, and the signals Python handles are noted, not handled (on the main thread), in the :class:`Held` yielded
    (``session.held``), for the caller to raise (:meth:`Held.raise_now`) once the whole result is applied; where
    the application raises instead, they are raised here, as it does."""
    held = Held()
    log = session.log  # (a cached property: its value is in the instance's dict from here on)
    saved, session.held = session.held, held
    session.__dict__["log"] = HeldLog(log, held)
    held.defer()
    try:
        yield held
    except BaseException:  # the application raised (an error every rank raises): what was held is raised with it
        raised = True      # (a signal's handler runs: a graceful shutdown's flag; an interruption replaces the
        raise              # error, which is its context); before, both were lost
    else:
        raised = False
    finally:
        held.restore()
        session.held, session.__dict__["log"] = saved, log
        if raised:
            held.raise_now()


@contextlib.contextmanager
def undeferred(session: CallState) -> Iterator[None]:
    """Inside :func:`holding`, a wait for an exchange: the signals' handlers are back meanwhile (a Ctrl-C is never
    put off for a wait's deadline); a signal noted before stays noted."""
    held = session.held
    if held is None or not held.handlers:
        yield
        return
    held.restore()
    try:
        yield
    finally:
        held.defer()
