"""How a rank waits at a step of the protocol: in slices, with a progress line between them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import settings
from .pauses import ran

log = logging.getLogger("triton_dist_tune")


def wait_in_slices(wait: Callable[[float], Any], timeout: float, on_progress: Callable[[float], None],
                   every: float | None = None) -> None:
    """Call ``wait(seconds)`` (which raises when its time runs out) in slices of ``every`` seconds (default
    ``TRITON_DIST_AUTOTUNE_PROGRESS_S``, 30) until it returns, calling ``on_progress(seconds waited so far)`` after
    each slice that ran out, the last one too (what it learns then, such as a failure posted during that slice, is
    raised instead of the timeout). Re-raises when ``timeout`` seconds have passed (the seconds this process stood
    still not counted: :func:`~.pauses.ran`), or at once when a slice failed before its time was up (not a timeout:
    e.g. the store went away)."""
    start, left = time.monotonic(), timeout
    every = settings.current().progress_s if every is None else every
    while True:
        chunk, began = max(0.001, min(every, left)), time.monotonic()
        try:
            wait(chunk)
            return
        except Exception:
            if time.monotonic() - began < 0.9 * chunk:
                raise
            on_progress(waited := ran(start))  # (a paused machine's seconds are not waited)
            if (left := timeout - waited) <= 0.05 * chunk:
                raise


def report_waiting(rank: int, name: str, what: str, missing: Sequence[int], global_ranks: Sequence[int] | None,
                   waited: float, timeout: float) -> None:
    """The progress line of a rank that waits for others at a step of the protocol."""
    globals_ = f" (global {[global_ranks[r] for r in missing]})" if global_ranks else ""
    log.warning("triton_dist_tune: rank %d of group '%s' has waited %.0f s at '%s' for group ranks %s%s; giving up "
                "after %g s", rank, name, waited, what, list(missing), globals_, timeout)
