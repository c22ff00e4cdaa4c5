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

A round times every contender once per regime, in a shuffled order shared by all ranks (or, with ``fixed_order``,
the same order every round: to show what the order does); one contender's samples are never taken in one block.
The SM clock is read with pynvml (when importable) twice per sample: after the barrier and synchronize, before the
timed work (the idle clock), and while the device is still busy with it; with it the clock-event (throttle)
reasons. Without pynvml they are ``None``.

Every sample can be logged raw (``measure(..., log=[])``): its round, regime, position in the round's order and
the contender before it, its times, clocks and the host's monotonic time at its start (one clock for every process
on a host, so the ranks' arrival skew can be computed afterwards: ``benchmarks/_ag_diagnose.py``).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
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

    def watts(self) -> float | None:
        """The board's power draw in W (NVML's reading, averaged by the driver), or ``None``."""
        if self.handle is None:
            return None
        try:
            return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000
        except Exception:
            return None

    def reasons(self) -> int | None:
        """The clock-event (throttle) reasons bitmask (power cap 0x4, thermal 0x20/0x40, idle 0x1, ...)."""
        if self.handle is None:
            return None
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            try:
                return int(getattr(self.nvml, name)(self.handle))
            except Exception:
                continue
        return None


@dataclass
class Sample:
    """One timed window: device ms of its calls, host ms until they were queued, the SM clock after the barrier
    (idle) and during the window, the clock-event reasons during it, the host's monotonic ns at its start."""

    ms: float
    host_ms: float
    mhz: float | None = None
    idle_mhz: float | None = None
    reasons: int | None = None
    start_ns: int = 0


class Timer:
    """Times one contender in either regime; ``clock`` is read before waiting for the timed work."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def window(self, fn: Callable[[], Any], calls: int, settle: int = 0) -> Sample:
        """``calls`` calls after ``settle`` untimed ones, after a barrier and a synchronize."""
        dist.barrier()
        sync()
        idle_mhz = self.clock.read()
        for _ in range(settle):
            fn()
        start_ns = time.monotonic_ns()
        if not cuda():
            start_s = time.perf_counter()
            for _ in range(calls):
                fn()
            elapsed = (time.perf_counter() - start_s) * 1e3
            return Sample(elapsed, elapsed, start_ns=start_ns)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        host_s = time.perf_counter()
        for _ in range(calls):
            fn()
        host_ms = (time.perf_counter() - host_s) * 1e3
        end.record()
        mhz = self.clock.read()  # the device is still running the window (or just finished a short one)
        reasons = self.clock.reasons()
        end.synchronize()
        return Sample(start.elapsed_time(end), host_ms, mhz, idle_mhz, reasons, start_ns)

    def steady(self, fn: Callable[[], Any], settle: int, calls: int) -> tuple[float, float | None]:
        """Back to back: (ms per call over the window, SM MHz)."""
        s = self.window(fn, calls, settle)
        return s.ms / calls, s.mhz


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
            timer: Timer, *salt: Any, log: list[dict[str, Any]] | None = None,
            fixed_order: bool = False) -> dict[str, dict[str, float | None]]:
    """``rounds`` interleaved rounds over ``contenders``; per contender, the max over ranks of this rank's median
    latency (ms), back-to-back time (ms per call) and host time of a latency call (us), and the min over ranks
    of the median SM clock (MHz) in each regime. ``log``: every sample appended raw (:class:`Sample`'s fields,
    with its round, regime, position in the round's order and the contender timed just before it)."""
    names = list(contenders)
    lat: dict[str, list[float]] = {n: [] for n in names}
    host: dict[str, list[float]] = {n: [] for n in names}
    steady: dict[str, list[float]] = {n: [] for n in names}
    mhz: dict[tuple[str, str], list[float]] = {(n, r): [] for n in names for r in ("lat", "steady")}

    def order(*more: Any) -> list[str]:
        return list(names) if fixed_order else shared_order(names, *salt, *more)

    def note(sample: Sample, rnd: int, regime: str, pos: int, prev: str | None, name: str, per_call: int) -> None:
        if log is not None:
            log.append({"salt": [str(s) for s in salt], "round": rnd, "regime": regime, "pos": pos, "prev": prev,
                        "name": name, **asdict(sample), "ms": sample.ms / per_call})

    for rnd in range(rounds):
        prev = None
        for pos, name in enumerate(order(rnd, "latency")):
            for _ in range(lat_calls):
                s = timer.window(contenders[name], 1)
                lat[name].append(s.ms)
                host[name].append(s.host_ms * 1e3)
                if s.mhz is not None:
                    mhz[(name, "lat")].append(s.mhz)
                note(s, rnd, "latency", pos, prev, name, 1)
                prev = name
        prev = None
        for pos, name in enumerate(order(rnd, "steady")):
            settle, calls = sizes[name]
            s = timer.window(contenders[name], calls, settle)
            steady[name].append(s.ms / calls)
            if s.mhz is not None:
                mhz[(name, "steady")].append(s.mhz)
            note(s, rnd, "steady", pos, prev, name, calls)
            prev = name
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
