"""A stock ``@triton.autotune`` kernel that tunes itself inside an :func:`~triton_dist_tune.autotune` function's
undecided call: said once per function and kernel, never changed.

Such a kernel is Triton's: at its first launch of a key each rank benchmarks its configs alone and keeps its own
choice, so ranks may launch different configs of it (a kernel that signals other ranks then computes wrong results
or hangs). :func:`watching` lends the call's launches to a :class:`StockWatch` (through the contextual module's
interception, :mod:`~.intercept`), which runs each launch exactly as Triton would and warns when the launch chose a
config (the wrapper's cache grew: benchmarked here, or read from Triton's own disk cache). A launch inside a
``contextual_autotune`` function nested in the call goes to that function's handler, which the group tunes; a call
made inside a ``contextual_autotune`` function is left to that function's handler (nothing is watched). Decided
calls (the hot path) are not watched.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ..disk import logs
from . import intercept

#: (function, kernel) pairs already warned about in this process
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


class StockWatch:
    """The launches of one undecided call of an ``autotune`` function (:class:`~.intercept.Handler`)."""

    def __init__(self, function: str) -> None:
        self.function = function

    def launch(self, autotuner: intercept.Autotuner, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Run the launch as Triton would; warn when it made the wrapper choose a config on this rank alone."""
        cache = getattr(autotuner, "cache", None)
        before = len(cache) if isinstance(cache, dict) else None
        result = intercept.original_run()(autotuner, *args, **kwargs)
        if before is not None and len(cache) > before:
            self._warn(intercept.jit_id(autotuner))
        return result

    def _warn(self, kernel: str) -> None:
        with _warned_lock:
            if (self.function, kernel) in _warned:
                return
            _warned.add((self.function, kernel))
        text = (f"{self.function}: the @triton.autotune kernel {kernel} chose its config on this rank alone (Triton's "
                "own tuning, inside this call): ranks may launch different configs of it, and a kernel that signals "
                "other ranks can then compute wrong results or hang; to tune it with the group, launch it from a "
                "contextual_autotune function that this function calls, or make its configs this function's "
                "(docs/autotune.md)")
        logs.warn(text, RuntimeWarning, stacklevel=2)


@contextlib.contextmanager
def watching(function: str) -> Iterator[None]:
    """Watch the stock ``@triton.autotune`` launches of an undecided call of ``function`` (see the module
    docstring); a call inside a ``contextual_autotune`` function's context is left to its handler, and nothing is
    watched before Triton's autotuner is imported (no stock kernel exists yet)."""
    if intercept.active_handler() is not None or "triton.runtime.autotuner" not in sys.modules:
        yield
        return
    with intercept.intercepting(StockWatch(function)):
        yield
