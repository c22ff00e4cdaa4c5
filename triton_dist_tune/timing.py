"""Timing one run of a function: CUDA events with an L2 flush on GPUs, a host clock elsewhere."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

_L2_FLUSH_BYTES = 256 * 1024 * 1024


class HostTimer:
    """Wall-clock time of a call, for CPU ranks (and Triton's interpreter)."""

    kind = "host"

    def time_call(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        """Run ``fn`` once; return (milliseconds, its result)."""
        start = time.perf_counter()
        out = fn()
        return (time.perf_counter() - start) * 1e3, out

    def synchronize(self) -> None:
        """Wait for outstanding device work (none on the host)."""


class CudaTimer:
    """CUDA-event time of a call on the current stream, after flushing L2 so every run starts cold."""

    kind = "cuda"

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._flush = torch.empty(_L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")

    def time_call(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        torch = self._torch
        self._flush.zero_()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end), out

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()


_cuda_timer: CudaTimer | None = None


def make_timer() -> HostTimer | CudaTimer:
    """CUDA events where torch sees a GPU, the host clock otherwise."""
    global _cuda_timer
    try:
        import torch

        if torch.cuda.is_available():
            if _cuda_timer is None:
                _cuda_timer = CudaTimer()
            return _cuda_timer
    except Exception:  # no usable CUDA: fall back to the host clock
        pass
    return HostTimer()


def median(samples: list[float]) -> float:
    """The median of a non-empty list of times."""
    return float(statistics.median(samples))
