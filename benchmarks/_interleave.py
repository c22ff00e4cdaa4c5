"""Interleaved timing of several collective contenders on every rank (used by ``bench_ag_gemm.py``).

Every rank calls every contender the same number of times in the same order (each call is collective), so all
counts and orders here are derived from values every rank agrees on: a shared seed (the order of a round is a
``random.Random`` shuffle seeded by a string, identical in every process) and call estimates reduced with MAX.

Two regimes, sampled in the same rounds:

* **latency**: a barrier and a device synchronize, then one call timed with CUDA events (the host clock without
  CUDA); the host time until the call returns is recorded too (what a Python wrapper adds shows there);
* **back-to-back**: a barrier and a synchronize, ``settle`` untimed calls queued back to back (the clock and the
  pipelines reach the state steady work sets), then a window of ``calls`` calls timed with events, no
  synchronize between them; ms per call.

A round times every contender once per regime, in a shuffled order shared by all ranks; one contender's samples
are never taken in one block. The SM clock is read with pynvml (when importable) while the device is still busy
with the timed work; without pynvml it is ``None``.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

Contenders = dict[str, Callable[[], Any]]


def cuda() -> bool:
    return torch.cuda.is_available()


def sync() -> None:
    if cuda():
        torch.cuda.synchronize()


def agree(values: list[float], op: dist.ReduceOp = dist.ReduceOp.MAX) -> list[float]:
    """``values`` reduced elementwise over the ranks (one collective)."""
    t = torch.tensor(values, dtype=torch.float64, device="cuda" if cuda() else "cpu")
    dist.all_reduce(t, op=op)
    return [float(v) for v in t.tolist()]


def shared_order(names: list[str], *salt: Any) -> list[str]:
    """``names`` shuffled by a seed made of ``salt``: the same order on every rank, another one per round."""
    order = list(names)
    random.Random("/".join(str(s) for s in salt)).shuffle(order)
    return order


class Clock:
    """The SM clock of this rank's GPU in MHz through pynvml, or ``None`` (no pynvml, no GPU, any NVML error)."""

    def __init__(self, enabled: bool = True) -> None:
        self.handle: Any = None
        self.nvml: Any = None
        if not enabled or not cuda():
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            index = torch.cuda.current_device()
            nvml_index = getattr(torch.cuda, "_get_nvml_device_index", None)
            if nvml_index is not None:  # honours CUDA_VISIBLE_DEVICES
                index = nvml_index(index)
            self.handle, self.nvml = pynvml.nvmlDeviceGetHandleByIndex(index), pynvml
        except Exception:  # optional: the benchmark runs without it
            self.handle = None

    def read(self) -> float | None:
        if self.handle is None:
            return None
        try:
            return float(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
        except Exception:
            return None


class Timer:
    """Times one contender in either regime; ``clock`` is read before waiting for the timed work."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def _window(self, fn: Callable[[], Any], calls: int, settle: int = 0) -> tuple[float, float, float | None]:
        """(device ms of ``calls`` calls after ``settle`` untimed ones, host ms of the timed calls, SM MHz)."""
        dist.barrier()
        sync()
        for _ in range(settle):
            fn()
        if not cuda():
            start_s = time.perf_counter()
            for _ in range(calls):
                fn()
            elapsed = (time.perf_counter() - start_s) * 1e3
            return elapsed, elapsed, None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        host_s = time.perf_counter()
        for _ in range(calls):
            fn()
        host_ms = (time.perf_counter() - host_s) * 1e3
        end.record()
        mhz = self.clock.read()  # the device is still running the window (or just finished a short one)
        end.synchronize()
        return start.elapsed_time(end), host_ms, mhz

    def latency(self, fn: Callable[[], Any]) -> tuple[float, float, float | None]:
        """One call on an idle, aligned group: (device ms, host us until it returned, SM MHz)."""
        ms, host_ms, mhz = self._window(fn, 1)
        return ms, host_ms * 1e3, mhz

    def steady(self, fn: Callable[[], Any], settle: int, calls: int) -> tuple[float, float | None]:
        """Back to back: (ms per call over the window, SM MHz)."""
        ms, _, mhz = self._window(fn, calls, settle)
        return ms / calls, mhz


def estimate_ms(contenders: Contenders, calls: int = 3) -> dict[str, float]:
    """Per contender, ms per call over ``calls`` back-to-back calls, the max over ranks (for the window sizes)."""
    timer = Timer(Clock(enabled=False))
    local = [timer.steady(fn, 1, calls)[0] for fn in contenders.values()]
    return dict(zip(contenders, agree(local), strict=True))


def window_sizes(est_ms: float, settle_ms: float, window_ms: float, min_calls: int) -> tuple[int, int]:
    """(settling calls, timed calls) for a contender of ``est_ms`` per call (the same on every rank)."""
    per_call = max(est_ms, 1e-3)
    settle = min(200, max(2, math.ceil(settle_ms / per_call)))
    calls = min(400, max(min_calls, math.ceil(window_ms / per_call)))
    return settle, calls


def measure(contenders: Contenders, sizes: dict[str, tuple[int, int]], rounds: int, lat_calls: int,
            timer: Timer, *salt: Any) -> dict[str, dict[str, float | None]]:
    """``rounds`` interleaved rounds over ``contenders``; per contender, the max over ranks of this rank's median
    latency (ms), back-to-back time (ms per call) and host time of a latency call (us), and the min over ranks
    of the median SM clock (MHz) in each regime."""
    names = list(contenders)
    lat: dict[str, list[float]] = {n: [] for n in names}
    host: dict[str, list[float]] = {n: [] for n in names}
    steady: dict[str, list[float]] = {n: [] for n in names}
    mhz: dict[tuple[str, str], list[float]] = {(n, r): [] for n in names for r in ("lat", "steady")}
    for rnd in range(rounds):
        for name in shared_order(names, *salt, rnd, "latency"):
            for _ in range(lat_calls):
                ms, us, clock = timer.latency(contenders[name])
                lat[name].append(ms)
                host[name].append(us)
                if clock is not None:
                    mhz[(name, "lat")].append(clock)
        for name in shared_order(names, *salt, rnd, "steady"):
            ms, clock = timer.steady(contenders[name], *sizes[name])
            steady[name].append(ms)
            if clock is not None:
                mhz[(name, "steady")].append(clock)
    times = agree([statistics.median(d[n]) for n in names for d in (lat, steady, host)])
    clocks = agree([statistics.median(mhz[(n, r)]) if mhz[(n, r)] else 0.0
                    for n in names for r in ("lat", "steady")], dist.ReduceOp.MIN)
    out = {}
    for i, n in enumerate(names):
        lat_mhz, steady_mhz = clocks[2 * i], clocks[2 * i + 1]
        out[n] = {"latency_ms": times[3 * i], "steady_ms": times[3 * i + 1], "host_us": times[3 * i + 2],
                  "latency_mhz": lat_mhz or None, "steady_mhz": steady_mhz or None}
    return out


def summarize(values: list[float]) -> dict[str, Any]:
    """Median and spread (max / min - 1) of one cell's values over the repeats."""
    return {"median": statistics.median(values), "spread": max(values) / min(values) - 1 if min(values) > 0
            else None, "values": values}
