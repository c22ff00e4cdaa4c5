"""The sustained oracle's timing on one GPU, shared by ``bench_fidelity.py`` (which describes the oracle),
``bench_choice.py`` and ``bench_search.py``.

- :func:`sustained`: shuffled rounds in which every config runs ``settle_ms`` of its own calls, then a window of
  ``window_ms`` of its calls timed with device events; no synchronize between configs, one per round (the device
  never idles inside a round, so each config runs at the clock its own power draw sets);
- :func:`scores`: each config's median over rounds of its time relative to the round's median config (drift-free),
  and :func:`all_even_odd` the same over every round, the even rounds and the odd ones (the oracle's repeatability);
- :func:`host_launch_ms`: the host's time to enqueue one call (a config whose host time reaches its device time is
  host-bound);
- :func:`paired`: each config in the layer it sits in, after a partner call (a model's previous layer) back to back,
  ranked by the pair's time: a config that draws more power slows its partner too (the MLP regime);
- :class:`ClockSampler`: the SM clock (pynvml) sampled in a thread while a measurement runs.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import threading
import time

import torch


def run_for(call, ms: float, per_call: float) -> None:
    for _ in range(max(1, int(ms / per_call))):
        call()


def per_call_ms(call) -> float:
    call()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(5):
        call()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 5


def host_launch_ms(call, n: int = 50) -> float:
    """The host's time to enqueue one call, from an empty queue (``n`` calls, far fewer than the queue holds)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    seconds = time.perf_counter() - t0
    torch.cuda.synchronize()
    return seconds * 1e3 / n


def windows(calls: dict[str, object], rounds: int, lead_in, window_ms: float, min_calls: int,
            seed: int, block: bool = False) -> dict[str, list[float]]:
    """Shuffled rounds of timed windows: in each round every config runs ``lead_in(name, per_call_ms)`` (untimed),
    then a window of ``window_ms`` of its calls (at least ``min_calls``) timed with device events; no synchronize
    between configs, one per round (``block``: one after the last round alone, as the tuner's settled block runs).
    {name: [ms per call, one per round]}."""
    per = {name: per_call_ms(call) for name, call in calls.items()}
    times: dict[str, list[float]] = {}
    rng = random.Random(seed)
    marks = []
    for r in range(rounds):
        order = list(calls)
        rng.shuffle(order)
        for name in order:
            lead_in(name, per[name])
            n = max(min_calls, int(window_ms / per[name]))
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(n):
                calls[name]()
            e.record()
            marks.append((name, s, e, n))
        if not block or r == rounds - 1:
            torch.cuda.synchronize()
            for name, s, e, n in marks:
                times.setdefault(name, []).append(s.elapsed_time(e) / n)
            marks = []
    return times


def sustained(calls: dict[str, object], rounds: int = 8, settle_ms: float = 100, window_ms: float = 250,
              seed: int = 0) -> dict[str, list[float]]:
    """The sustained oracle's samples (see the module docstring): each window follows ``settle_ms`` of the config's
    own calls. {name: [ms per call, one per round]}."""
    return windows(calls, rounds, lambda name, per: run_for(calls[name], settle_ms, per), window_ms, 1, seed)


def paired(calls: dict[str, object], partner, total_ms: float = 400, repeats: int = 3, seed: int = 7,
           sampler: ClockSampler | None = None) -> dict[str, dict[str, list[float]]]:
    """Each config in its layer: for ``total_ms`` the ``partner`` call then the config's, back to back, the pairs
    timed with device events (the last half of them), ``repeats`` times in shuffled order, a synchronize before each
    config. {name: {"ms": [the pair's ms, one per repeat], "own_ms": [the config's share], and with ``sampler``
    "mhz" and "w": the SM clock's and the power's medians}}."""
    pair = per_call_ms(partner) + max(per_call_ms(call) for call in calls.values())
    out: dict[str, dict[str, list[float]]] = {n: {"ms": [], "own_ms": [], "mhz": [], "w": []} for n in calls}
    rng = random.Random(seed)
    for _ in range(repeats):
        order = list(calls)
        rng.shuffle(order)
        for name in order:
            torch.cuda.synchronize()
            marks = []
            with sampler if sampler is not None else contextlib.nullcontext():
                for _ in range(max(4, int(total_ms / pair))):
                    first, own, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                    first.record()
                    partner()
                    own.record()
                    calls[name]()
                    end.record()
                    marks.append((first, own, end))
                torch.cuda.synchronize()
            half = marks[len(marks) // 2:]
            out[name]["ms"].append(sum(f.elapsed_time(e) for f, _, e in half) / len(half))
            out[name]["own_ms"].append(sum(o.elapsed_time(e) for _, o, e in half) / len(half))
            if sampler is not None:
                mhz, watts = sampler.medians()
                out[name]["mhz"].append(mhz)
                out[name]["w"].append(watts)
    return out


def scores(samples: dict[str, list[float]], names: list[str], rounds: list[int]) -> dict[str, float]:
    """Each config's median over ``rounds`` of its time relative to the round's median config: a drift of the
    machine between rounds (the host's speed, the limiter's phase) cancels out."""
    out = {}
    for n in names:
        rel = [samples[n][r] / statistics.median(samples[m][r] for m in names) for r in rounds]
        out[n] = statistics.median(rel)
    return out


def all_even_odd(samples: dict[str, list[float]], names: list[str]) -> list[dict[str, float]]:
    """:func:`scores` over every round, the even rounds and the odd ones (two independent halves)."""
    rounds = len(samples[names[0]])
    return [scores(samples, names, list(r)) for r in (range(rounds), range(0, rounds, 2), range(1, rounds, 2))]


class ClockSampler:
    """SM clock samples (MHz) every ~2 ms in a thread, while active; with ``power``, the board's power (W) too."""

    def __init__(self, power: bool = False) -> None:
        from _interleave import Clock  # the GPU this process runs on (CUDA_VISIBLE_DEVICES honoured)

        self.clock = Clock()
        self.power = power
        self.samples: list[float] = []
        self.watts: list[float] = []
        self.active = False

    def __enter__(self) -> ClockSampler:
        self.samples, self.watts, self.active = [], [], True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.active = False
        self.thread.join()

    def _loop(self) -> None:
        while self.active and (mhz := self.clock.read()) is not None:
            self.samples.append(mhz)
            if self.power and (watts := self.clock.watts()) is not None:
                self.watts.append(watts)
            time.sleep(0.002)

    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    def medians(self) -> tuple[float | None, float | None]:
        """(the SM clock's median MHz, the power's median W) while last active; None where nothing was read."""
        return self.median(), statistics.median(self.watts) if self.watts else None
