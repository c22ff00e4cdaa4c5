"""A watchdog for one measurement at a time: a hung kernel or collective cannot be interrupted in-process, so a
rank whose measurement outlives its deadline records that it hung and ends its process with a clear message.

Under ``torchrun --max-restarts`` the job then restarts and the journal leaves that config out; without restarts
the other ranks stop waiting at their own deadline with :class:`~triton_dist_tune.errors.GroupTimeoutError`.

The watchdog is a Python thread, which needs the GIL to run. As a backstop for code that hangs while holding the
GIL, :mod:`faulthandler` is armed too, :data:`BACKSTOP_S` seconds later: it needs no GIL, prints every thread's
stack and ends the process with status 1 (the journal then shows the config as started, which the next attempt
leaves out as crashed). This takes over ``faulthandler.dump_traceback_later`` while a measurement runs.
"""

from __future__ import annotations

import atexit
import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger("triton_dist_tune")

#: exit status of a process ended by the watchdog
EXIT_CODE = 86
#: seconds after the deadline at which the GIL-free faulthandler backstop ends the process
BACKSTOP_S = 5.0


def exchange_timeout(timeout: float) -> float:
    """How long a rank waits at the exchange after a phase that the watchdog bounds by ``timeout``.

    A little longer than the watchdog, so that a rank whose phase hung is ended by its own watchdog (and
    journals the config as hung) before the ranks waiting for it give up with a ``GroupTimeoutError``.
    """
    return timeout + max(1.0, 0.1 * timeout)


class Watchdog:
    """One daemon thread per process; :meth:`arm` and :meth:`disarm` bracket one measurement phase."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._what = ""
        self._timeout = 0.0
        self._on_fire: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._registered = False

    def arm(self, timeout: float, what: str, on_fire: Callable[[], None]) -> None:
        """Fire ``on_fire`` and end the process unless :meth:`disarm` comes within ``timeout`` seconds."""
        with self._cond:
            if self._thread is None:
                if not self._registered:
                    atexit.register(self.stop)
                    self._registered = True
                self._stopping = False
                self._thread = threading.Thread(target=self._watch, name="triton_dist_tune-watchdog", daemon=True)
                self._thread.start()
            self._deadline = time.monotonic() + timeout
            self._what = what
            self._timeout = timeout
            self._on_fire = on_fire
            self._cond.notify()
        try:
            faulthandler.dump_traceback_later(timeout + BACKSTOP_S, exit=True)
        except (AttributeError, OSError, RuntimeError, ValueError):  # no usable stderr: no backstop
            pass

    def disarm(self) -> None:
        """Cancel the deadline set by :meth:`arm`."""
        self._cancel(stopping=False)

    def stop(self) -> None:
        """End the watchdog thread (at interpreter exit), so that no thread of ours outlives the interpreter."""
        thread = self._cancel(stopping=True)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def _cancel(self, stopping: bool) -> threading.Thread | None:
        """Cancel the deadline and the backstop, and wake the thread; when ``stopping``, tell the thread to end and
        return it (for the caller to join outside the lock)."""
        faulthandler.cancel_dump_traceback_later()
        with self._cond:
            self._deadline = None
            thread = None
            if stopping:
                self._stopping = True
                thread, self._thread = self._thread, None
            else:
                self._on_fire = None
            self._cond.notify()
        return thread

    def _watch(self) -> None:
        with self._cond:
            while not self._stopping:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._fire()

    def _fire(self) -> None:
        from ..disk.logs import global_rank

        message = (f"triton_dist_tune: watchdog: rank {global_rank()}: {self._what} did not finish within "
                   f"{self._timeout:g} s (autotune timeout / TRITON_DIST_AUTOTUNE_TIMEOUT); recorded as hung in "
                   f"the journal; ending this process with exit status {EXIT_CODE}")
        try:
            if self._on_fire is not None:
                self._on_fire()
        finally:
            # with no handler configured, logging's last resort prints this on stderr
            log.critical(message)
            for handler in logging.getLogger("triton_dist_tune").handlers:
                handler.flush()
            sys.stderr.flush()
            os._exit(EXIT_CODE)


WATCHDOG = Watchdog()
