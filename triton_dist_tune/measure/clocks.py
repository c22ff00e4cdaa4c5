"""The clocks that time a tuning's samples: device events on the current stream where torch has an accelerator
(``torch.Event``; ``torch.cuda.Event`` on torch builds without it), so that a CUDA, ROCm or NPU job times on its
device alike; the host clock on CPU ranks and under Triton's interpreter. What a sample is:
:mod:`~triton_dist_tune.measure.timing`."""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Protocol

from .. import settings

log = logging.getLogger("triton_dist_tune")

_L2_FLUSH_BYTES = 256 * 1024 * 1024
#: cycles of the device's hold kernel per microsecond (an SM clock near 2 GHz; a slower clock holds longer)
_HOLD_CYCLES_PER_US = 2000


class Clock(Protocol):
    """Times spans of work: ``start()``, ``stop(start)``, then ``read(token)`` after ``synchronize()``
    (:class:`HostClock`, :class:`DeviceClock`)."""

    kind: str

    def start(self) -> Any:
        """A token marking the start of a span."""

    def stop(self, start: Any) -> Any:
        """A token for the span since ``start``."""

    def read(self, token: Any) -> float:
        """Milliseconds of a span (after :meth:`synchronize`)."""

    def synchronize(self) -> None:
        """Wait for outstanding device work."""

    def flush(self) -> None:
        """Evict the device's L2 cache (cold samples)."""

    def mark(self) -> Any:
        """A point in the work enqueued so far."""

    def wait(self, mark: Any) -> None:
        """Wait until the device has reached ``mark``."""

    def hold(self, ms: float) -> bool:
        """Keep the device busy for ``ms``; False where it cannot."""

    def idle_ms(self) -> float:
        """At most how long the device has idled."""


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

    def mark(self) -> None:
        """A point in the work enqueued so far (none on the host: work is done when a call returns)."""

    def wait(self, mark: None) -> None:
        """Wait until the device has reached ``mark`` (nothing to wait for on the host)."""

    def hold(self, ms: float) -> bool:
        """Keep the device busy for ``ms`` (impossible on the host: work is done when a call returns)."""
        return False

    def idle_ms(self) -> float:  # how long the device may have idled: no device here, no bound
        return math.inf


class DeviceClock:
    """Device events recorded on the current stream of one device (``index``); read after :meth:`synchronize`."""

    def __init__(self, device_type: str, index: int = 0) -> None:
        import torch

        self.kind = device_type
        #: the device this clock flushes and waits for: a process that tunes on two devices in turn has a clock for
        #: each (:func:`make_clock`), so that a cold sample on the second flushes the second's L2, not the first's
        self.index = index
        self._torch = torch
        self._event = getattr(torch, "Event", None) or torch.cuda.Event
        self._flush_buffer: Any = None
        self._flush_failed = False
        #: the device's spin kernel, for :meth:`hold` (CUDA and ROCm builds of torch; None elsewhere)
        self._spin = getattr(torch.cuda, "_sleep", None) if device_type == "cuda" else None
        #: when the host last waited for the device (``time.perf_counter``): the device cannot have idled longer
        self.waited = 0.0
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

    def mark(self) -> Any:
        """An event at this point of the current stream."""
        return self._record()

    def wait(self, mark: Any) -> None:
        """Block the host until the device has reached ``mark`` (the work enqueued after it goes on)."""
        mark.synchronize()
        self.waited = time.perf_counter()

    def hold(self, ms: float) -> bool:
        """Enqueue a spin kernel that keeps the current stream busy for about ``ms``, so that the calls enqueued
        next are all queued before the device reaches them; False where this device has none."""
        if self._spin is None:
            return False
        self._spin(int(ms * 1e3 * _HOLD_CYCLES_PER_US))
        return True

    def synchronize(self) -> None:
        accelerator = getattr(self._torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "synchronize"):
            accelerator.synchronize()
        else:
            self._torch.cuda.synchronize()
        self.waited = time.perf_counter()

    def idle_ms(self) -> float:
        """At most how long the device has idled: since the host last waited for it (work enqueued since then
        only shortens the gap)."""
        return (time.perf_counter() - self.waited) * 1e3

    def flush(self) -> None:
        """Evict the device's L2 cache by writing a buffer larger than it (allocated on first use)."""
        if self._flush_failed:
            return
        if self._flush_buffer is None:
            try:
                self._flush_buffer = self._torch.empty(_L2_FLUSH_BYTES, dtype=self._torch.int8,
                                                       device=f"{self.kind}:{self.index}")
            except Exception as exc:  # out of memory: cold samples without the flush, and say so
                self._flush_failed = True
                log.warning("triton_dist_tune: cannot allocate the %d MiB L2 flush buffer (%s): cold samples are "
                            "timed without flushing L2", _L2_FLUSH_BYTES >> 20, exc)
                return
        self._flush_buffer.zero_()


#: the device clocks of this process, by (device type, device index)
_clocks: dict[tuple[str, int], Any] = {}


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


def _current_index(device: str) -> int:
    """The index of the current device of type ``device`` (the one ``torch.cuda.set_device`` chose)."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "current_device_index"):
        return int(accelerator.current_device_index())
    return int(getattr(torch, device).current_device())


def make_clock() -> HostClock | DeviceClock:
    """The clock for this process: device events where torch has an accelerator (unless Triton's interpreter
    runs the kernels on the host), the host clock otherwise. A device job that cannot use events gets the host
    clock with a warning."""
    device = _accelerator()
    if device is None or settings.current().interpret:
        return HostClock()
    try:
        index = _current_index(device)
    except Exception:  # a device module without a current device: its first
        index = 0
    clock = _clocks.get((device, index))
    if clock is None:
        try:
            clock = _clocks[device, index] = DeviceClock(device, index)
        except Exception as exc:
            log.warning("triton_dist_tune: cannot time with %s events (%s); falling back to the host clock, which "
                        "times launches, not device work", device, exc)
            return HostClock()
    return clock
