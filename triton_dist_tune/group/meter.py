"""What the group's exchanges are charged to: the meter of the tuning in progress on this thread, if any.

The channel (:mod:`~triton_dist_tune.group.channel`) charges every exchange's time to it without knowing what it
is; the tuner makes its stopwatch (:class:`~triton_dist_tune.measure.breakdown.Stopwatch`) this thread's meter for
the tuning (:func:`metered`), so that the group layer never imports the layer above it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

_local = threading.local()


class Meter(Protocol):
    """Counts the exchanges and times them as a part named ``exchange``."""

    exchanges: int

    def enter(self, name: str) -> None:
        """Start the part ``name``."""

    def leave(self) -> None:
        """End the innermost part."""


def current() -> Meter | None:
    """This thread's meter, if a tuning in progress set one."""
    return getattr(_local, "meter", None)


@contextmanager
def metered(meter: Meter) -> Iterator[None]:
    """Charge this thread's exchanges inside the block to ``meter``."""
    before = current()
    _local.meter = meter
    try:
        yield
    finally:
        _local.meter = before
