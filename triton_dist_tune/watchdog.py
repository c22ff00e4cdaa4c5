"""A watchdog for one measurement at a time: a hung kernel or collective cannot be interrupted in-process, so a
rank whose measurement outlives its deadline records that it hung and ends its process with a clear message.

Under ``torchrun --max-restarts`` the job then restarts and the journal leaves that config out; without restarts
the other ranks stop waiting at their own deadline with :class:`~triton_dist_tune.errors.GroupTimeoutError`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger("triton_dist_tune")

#: exit status of a process ended by the watchdog
EXIT_CODE = 86


class Watchdog:
    """One daemon thread per process; :meth:`guard` arms it around a block."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._what = ""
        self._on_fire: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None

    def arm(self, timeout: float, what: str, on_fire: Callable[[], None]) -> None:
        """Fire ``on_fire`` and end the process unless :meth:`disarm` comes within ``timeout`` seconds."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="triton_dist_tune-watchdog", daemon=True)
                self._thread.start()
            self._deadline = time.monotonic() + timeout
            self._what = what
            self._on_fire = on_fire
            self._cond.notify()

    def disarm(self) -> None:
        """Cancel the deadline set by :meth:`arm`."""
        with self._cond:
            self._deadline = None
            self._on_fire = None
            self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._fire()

    def _fire(self) -> None:
        message = f"triton_dist_tune: watchdog: {self._what} did not finish in time; ending this process"
        try:
            if self._on_fire is not None:
                self._on_fire()
        finally:
            log.error(message)
            print(message, file=sys.stderr, flush=True)
            for handler in logging.getLogger("triton_dist_tune").handlers:
                handler.flush()
            os._exit(EXIT_CODE)


WATCHDOG = Watchdog()
