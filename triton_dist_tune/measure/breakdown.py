"""Where a tuning's seconds go: cheap accumulators at the phase boundaries, read into a
:class:`~triton_dist_tune.records.TimeBreakdown` at the end of the tuning.

A :class:`Stopwatch` keeps a stack of parts: entering a part charges the time since the last boundary to the part
on top of the stack (its parent), so the parts are exclusive and sum to the wall time they cover; leaving charges
the part itself. A boundary costs two ``perf_counter`` calls and a list operation. The stopwatch of the tuning in
progress on this thread is :func:`current` (the tuner's thread: compile threads see none), so that the group's
exchanges (:mod:`~triton_dist_tune.group.channel`, through :mod:`~triton_dist_tune.group.meter`) and the argument
restores (:mod:`~triton_dist_tune.measure.arguments`) charge it without being handed it.

The rounds of a search's stages and of the race are parts of their own (``screening``, ``race``); the samples in
them report their device time (:meth:`Stopwatch.sampled`: the sample's calls times the time per call its clock
measured), and :meth:`Stopwatch.result` splits each part into that time and ``host``, the rest of the rounds' wall
time. The device-time floor counts every call launched per config (:meth:`Stopwatch.launched`) times the config's
own time per call (:meth:`Stopwatch.timed`).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from ..group import meter
from ..records import TIME_PARTS, TimeBreakdown
from ..stats import median

#: the parts whose samples report their device time, split into that time and ``host`` by :meth:`Stopwatch.result`
ROUNDS = ("screening", "race")

_local = threading.local()


class Stopwatch:
    """The accumulators of one tuning on one rank (see the module docstring)."""

    def __init__(self, started: float | None = None) -> None:
        #: when the tuning started (``perf_counter``); now by default
        self.started = self._mark = time.perf_counter() if started is None else started
        self._stack: list[str] = []
        self.spent: dict[str, float] = defaultdict(float)
        #: device seconds of the samples of each of :data:`ROUNDS`
        self.measured: dict[str, float] = defaultdict(float)
        #: which of :data:`ROUNDS` the rounds being run belong to (a search sets ``screening`` for its stages)
        self.rounds = "race"
        self.compiled = 0
        self.exchanges = 0
        #: calls launched of each config, and its own times per call (ms)
        self.calls: dict[int, int] = defaultdict(int)
        self.own: dict[int, list[float]] = defaultdict(list)
        self.probed: dict[int, float] = {}

    def enter(self, part: str) -> None:
        """Start ``part`` (nested in the part in progress, which pauses)."""
        now = time.perf_counter()
        self._charge(now)
        self._stack.append(part)

    def leave(self) -> None:
        """End the innermost part."""
        now = time.perf_counter()
        self._charge(now)
        self._stack.pop()

    def _charge(self, now: float) -> None:
        if self._stack:
            self.spent[self._stack[-1]] += now - self._mark
        self._mark = now

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """The time inside the block, less the parts nested in it, is charged to ``name``."""
        self.enter(name)
        try:
            yield
        finally:
            self.leave()

    def sampled(self, seconds: float) -> None:
        """A sample of the current rounds took ``seconds`` of device time (its calls times its measured time per
        call)."""
        self.measured[self.rounds] += seconds

    def launched(self, index: int, calls: int) -> None:
        """``calls`` calls of config ``index`` were launched (warm-ups, samples, captures)."""
        self.calls[index] += calls

    def timed(self, index: int, ms_per_call: float, probe: bool = False) -> None:
        """Config ``index`` took ``ms_per_call`` on this rank (a sample's time, or its probe's with ``probe``)."""
        if ms_per_call > 0:
            if probe:
                self.probed[index] = ms_per_call
            else:
                self.own[index].append(ms_per_call)

    def floor(self) -> float:
        """The device-time floor, seconds: every config's calls times its own time per call (the median of its
        samples, else its probe; a config with neither counts nothing)."""
        total = 0.0
        for index, calls in self.calls.items():
            per_call = median(self.own[index]) if self.own.get(index) else self.probed.get(index, 0.0)
            total += calls * per_call / 1e3
        return total

    def result(self) -> TimeBreakdown:
        """The breakdown so far: every part's time, the rounds split into measured and host time, ``other`` the
        rest of the wall time since the stopwatch started."""
        now = time.perf_counter()
        self._charge(now)
        parts = {name: self.spent.get(name, 0.0) for name in TIME_PARTS if name != "other"}
        for name in ROUNDS:
            measured = min(self.measured.get(name, 0.0), parts[name])
            parts["host"] += parts[name] - measured
            parts[name] = measured
        wall = now - self.started
        return TimeBreakdown(wall=wall, other=max(0.0, wall - sum(parts.values())), compiled=self.compiled,
                             exchanges=self.exchanges, floor=self.floor(), **parts)


def current() -> Stopwatch | None:
    """The stopwatch of the tuning in progress on this thread, if any."""
    return getattr(_local, "watch", None)


@contextmanager
def watching(watch: Stopwatch) -> Iterator[Stopwatch]:
    """Make ``watch`` this thread's :func:`current` stopwatch inside the block, and the meter its exchanges are
    charged to (:mod:`~triton_dist_tune.group.meter`)."""
    before = current()
    _local.watch = watch
    try:
        with meter.metered(watch):
            yield watch
    finally:
        _local.watch = before


@contextmanager
def part(name: str) -> Iterator[None]:
    """Charge the block to ``name`` on this thread's stopwatch (nothing when no tuning is watched)."""
    watch = current()
    if watch is None:
        yield
        return
    watch.enter(name)
    try:
        yield
    finally:
        watch.leave()
