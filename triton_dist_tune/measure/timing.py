"""Clocks and samples: how both tuners time the calls they measure.

A **clock** times a span of work: on an accelerator with torch's device-generic events on the current stream
(``torch.Event``; ``torch.cuda.Event`` on torch builds without it), so that a CUDA, ROCm or NPU job times on its
device alike; on CPU ranks and under Triton's interpreter with the host clock.

A **sample** (:func:`time_sample`) is one timed span of ``batch`` calls, reported in ms per call:

- ``steady`` (the default timing mode): the calls run back to back, with no host synchronize and no exchange
  between them, as a model layer runs them, timed from an idle device to the end of the last call (so a
  host-bound function is timed as host-bound, and the first call's launch gap counts once per batch, as it does
  for a layer). One untimed lead-in call and a device synchronize come first: the lead-in's own collectives line
  the ranks up far more closely than the host-side exchange before it can. The batch length follows from a
  measured probe (:func:`batch_length`), never from a guess;
- ``cold``: one call after the L2 cache is flushed (and, by the caller, the ranks aligned): for functions that run
  alone after idle time.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from .. import settings
from ..errors import BadInputError

log = logging.getLogger("triton_dist_tune")

TIMING_MODES = ("steady", "cold")
_L2_FLUSH_BYTES = 256 * 1024 * 1024
#: a steady batch spans about this long (enough calls to average out per-call jitter), within the bounds below
TARGET_SPAN_MS = 5.0
#: bounds on the steady batch length, in calls
MIN_BATCH, MAX_BATCH = 1, 32
#: timed calls in the probe that :func:`batch_length` reads
PROBE_CALLS = 4


def timing_mode(option: str | None) -> str:
    """The timing mode: ``TRITON_DIST_AUTOTUNE_TIMING`` when set (it overrides every function of the job), else
    ``option``, else ``steady``."""
    if option is not None and option not in TIMING_MODES:
        raise BadInputError(f"timing must be one of {TIMING_MODES}, not {option!r}")
    return settings.current().timing or option or "steady"


class Clock(Protocol):
    """Times spans of work: ``start()``, ``stop(start)``, then ``read(token)`` after ``synchronize()``."""

    kind: str

    def start(self) -> Any: ...

    def stop(self, start: Any) -> Any: ...

    def read(self, token: Any) -> float: ...

    def synchronize(self) -> None: ...

    def flush(self) -> None: ...


class HostClock:
    """Wall-clock time, for CPU ranks and Triton's interpreter (work is done when a call returns)."""

    kind = "host"

    def start(self) -> float:
        """A token marking the start of a span."""
        return time.perf_counter()

    def stop(self, start: float) -> float:
        """A token for the span since ``start``."""
        return (time.perf_counter() - start) * 1e3

    def read(self, token: float) -> float:
        """Milliseconds of a span."""
        return float(token)

    def synchronize(self) -> None:
        """Wait for outstanding device work (none on the host)."""

    def flush(self) -> None:
        """Nothing to flush on the host."""


class DeviceClock:
    """Device events recorded on the current stream; read after :meth:`synchronize`."""

    def __init__(self, device_type: str) -> None:
        import torch

        self.kind = device_type
        self._torch = torch
        self._event = getattr(torch, "Event", None) or torch.cuda.Event
        self._flush_buffer: Any = None
        self._flush_failed = False
        self.stop(self.start())  # fail here, at once, if events do not work on this device
        self.synchronize()

    def _record(self) -> Any:
        event = self._event(enable_timing=True)
        event.record()
        return event

    def start(self) -> Any:
        return self._record()

    def stop(self, start: Any) -> Any:
        return start, self._record()

    def read(self, token: Any) -> float:
        return float(token[0].elapsed_time(token[1]))

    def synchronize(self) -> None:
        accelerator = getattr(self._torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "synchronize"):
            accelerator.synchronize()
        else:
            self._torch.cuda.synchronize()

    def flush(self) -> None:
        """Evict the device's L2 cache by writing a buffer larger than it (allocated on first use)."""
        if self._flush_failed:
            return
        if self._flush_buffer is None:
            try:
                self._flush_buffer = self._torch.empty(_L2_FLUSH_BYTES, dtype=self._torch.int8, device=self.kind)
            except Exception as exc:  # out of memory: cold samples without the flush, and say so
                self._flush_failed = True
                log.warning("triton_dist_tune: cannot allocate the %d MiB L2 flush buffer (%s): cold samples are "
                            "timed without flushing L2", _L2_FLUSH_BYTES >> 20, exc)
                return
        self._flush_buffer.zero_()


_clocks: dict[str, Any] = {}


def _accelerator() -> str | None:
    """The device type torch computes on here ("cuda", "xpu", "npu"...), or None on CPU ranks."""
    try:
        import torch

        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "is_available"):
            if accelerator.is_available():
                return str(accelerator.current_accelerator().type)
            return None
        return "cuda" if torch.cuda.is_available() else None
    except Exception:
        return None


def make_clock() -> HostClock | DeviceClock:
    """The clock for this process: device events where torch has an accelerator (unless Triton's interpreter
    runs the kernels on the host), the host clock otherwise. A device job that cannot use events gets the host
    clock with a warning."""
    device = _accelerator()
    if device is None or settings.current().interpret:
        return HostClock()
    clock = _clocks.get(device)
    if clock is None:
        try:
            clock = _clocks[device] = DeviceClock(device)
        except Exception as exc:
            log.warning("triton_dist_tune: cannot time with %s events (%s); falling back to the host clock, which "
                        "times launches, not device work", device, exc)
            return HostClock()
    return clock


def time_sample(clock: Any, call: Callable[[], Any], batch: int, cold: bool) -> float:
    """One sample, in ms per call. Steady: an untimed lead-in call and a device synchronize, then ``batch``
    back-to-back calls timed as one span. Cold: one call after an L2 flush. The device is synchronized again
    after the span."""
    if cold:
        clock.flush()
    else:
        call()
        clock.synchronize()
    start = clock.start()
    for _ in range(batch):
        call()
    token = clock.stop(start)
    clock.synchronize()
    return clock.read(token) / batch


def batch_length(per_call_ms: float) -> int:
    """The steady batch length for a function that takes ``per_call_ms`` per call in steady state (measured by a
    probe sample): about :data:`TARGET_SPAN_MS` of calls, within [MIN_BATCH, MAX_BATCH]."""
    if not per_call_ms > 0:
        return MAX_BATCH
    return max(MIN_BATCH, min(MAX_BATCH, math.ceil(round(TARGET_SPAN_MS / per_call_ms, 6))))
