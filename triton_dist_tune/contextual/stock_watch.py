"""A stock ``@triton.autotune`` kernel that tunes itself inside an :func:`~triton_dist_tune.autotune` function's
call: said once per function and kernel, never changed.

Such a kernel is Triton's: at its first launch of a key each rank benchmarks its configs alone and keeps its own
choice, so ranks may launch different configs of it (a kernel that signals other ranks then computes wrong results
or hangs). :func:`watching` lends the call's launches to a :class:`StockWatch` (through the contextual module's
interception, :mod:`~.intercept`), which runs each launch exactly as Triton would and warns when the launch chose a
config (the wrapper's cache grew: benchmarked here, or read from Triton's own disk cache). A launch inside a
``contextual_autotune`` function nested in the call goes to that function's handler, which the group tunes; a call
made inside a ``contextual_autotune`` function is left to that function's handler (nothing is watched).

A decided call (the hot path) sets no handler: its launches reach :func:`launched_unhandled`, which the
interception calls for every launch outside a handler's context (from the first undecided call on) and which looks
for an enclosing decided call only when the kernel's cache grew, by the hot path's frame on the thread's stack
(:func:`watch_decided_calls` names its code). A decided call pays nothing for it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from types import CodeType
from typing import Any

from ..disk import logs
from . import intercept

#: (function, kernel) pairs already warned about in this process
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()
#: the code of the ``autotune`` hot path, whose frame marks a decided call (:func:`watch_decided_calls`)
_hot_path_code: CodeType | None = None


class StockWatch:
    """The launches of one undecided call of an ``autotune`` function (:class:`~.intercept.Handler`)."""

    def __init__(self, function: str) -> None:
        self.function = function

    def launch(self, autotuner: intercept.Autotuner, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Run the launch as Triton would; warn when it made the wrapper choose a config on this rank alone."""
        result, chose = _run_counting(autotuner, args, kwargs)
        if chose:
            _warn(self.function, intercept.jit_id(autotuner))
        return result


def _run_counting(autotuner: intercept.Autotuner, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, bool]:
    """(the launch's result as Triton's own ``run`` returns it, whether the wrapper's cache grew: a choice made)."""
    cache = getattr(autotuner, "cache", None)
    before = len(cache) if isinstance(cache, dict) else None
    result = intercept.original_run()(autotuner, *args, **kwargs)
    return result, before is not None and len(cache) > before


def launched_unhandled(autotuner: intercept.Autotuner, args: tuple, kwargs: dict[str, Any]) -> Any:
    """A launch outside every handler's context (:func:`~.intercept.observe_unhandled`): run as Triton would; when
    it chose a config inside a decided call of an ``autotune`` function, warn as for an undecided call."""
    result, chose = _run_counting(autotuner, args, kwargs)
    if chose and _hot_path_code is not None:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not _hot_path_code:
            frame = frame.f_back
        tuner = frame.f_locals.get("tuner") if frame is not None else None
        if tuner is not None:
            _warn(tuner.name, intercept.jit_id(autotuner))
    return result


def watch_decided_calls(hot_path: CodeType) -> None:
    """Name the code of the ``autotune`` hot path (the decorated function's wrapper, its ``tuner`` a local), whose
    frame on a launch's stack marks a decided call, and observe the launches outside a handler's context."""
    global _hot_path_code
    _hot_path_code = hot_path
    intercept.observe_unhandled(launched_unhandled)


def _warn(function: str, kernel: str) -> None:
    with _warned_lock:
        if (function, kernel) in _warned:
            return
        _warned.add((function, kernel))
    text = (f"{function}: the @triton.autotune kernel {kernel} chose its config on this rank alone (Triton's own "
            "tuning, inside this call): ranks may launch different configs of it, and a kernel that signals other "
            "ranks can then compute wrong results or hang; to tune it with the group, launch it from a "
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
