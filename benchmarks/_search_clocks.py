"""The clocks of ``bench_search.py``'s oracles: CUDA graphs replayed and timed with device events (GPU), a wall
clock of eager calls (the CPU smoke test), and the SM clock sampler."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

import torch
from _oracle import ClockSampler

GRAPH_CALLS = 20


def sm_clock() -> Any:
    """A sampler of the SM clock (``_oracle.ClockSampler``, pynvml), or None without pynvml."""
    try:
        import pynvml  # noqa: F401
    except Exception:
        return None
    return ClockSampler()


class GraphClock:
    """Device time of a config: a CUDA graph of ``calls`` launches (:data:`GRAPH_CALLS`), replayed (GPU only)."""

    def __init__(self, calls: int = GRAPH_CALLS) -> None:
        self.stream = torch.cuda.Stream()
        self.calls = calls
        self.label = f"CUDA graph of {calls} launches, replayed; device events"

    def capture(self, call: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """A graph of ``calls`` calls, captured on a side stream with the low-level API (the
        ``torch.cuda.graph`` context empties the allocator's cache at every capture: thousands of captures)."""
        call()  # outside the graph: the first launch (and the MoE alignment for this BLOCK_SIZE_M)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.stream):
            # each graph its own memory pool: a pool shared by graphs that were freed is released with them, and a
            # capture into it then fails an allocator assertion (seen on an H100, torch 2.11)
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                for _ in range(self.calls):
                    call()
            finally:
                graph.capture_end()
        torch.cuda.synchronize()
        return graph

    def screen(self, call: Callable[[], None], min_ms: float = 2.0, cutoff_ms: float = math.inf) -> float:
        """ms per call: one settling replay, then at least ``min_ms`` of replays timed with device events; a
        config whose settling replay takes over ``cutoff_ms`` per call is not timed further (the settling replay's
        time is returned: it is no contender)."""
        graph = self.capture(call)
        s0, s1, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        s0.record()
        graph.replay()
        s1.record()
        torch.cuda.synchronize()
        per_replay = max(s0.elapsed_time(s1), 1e-3)
        if per_replay / self.calls > cutoff_ms:
            return per_replay / self.calls
        reps = min(50, max(1, math.ceil(min_ms / per_replay)))
        s1.record()
        for _ in range(reps):
            graph.replay()
        e.record()
        torch.cuda.synchronize()
        return s1.elapsed_time(e) / (reps * self.calls)

    def rounds(self, calls: dict[str, Callable[[], None]], rounds: int, settle_ms: float = 10.0,
               window_ms: float = 20.0, seed: int = 0) -> dict[str, list[float]]:
        """Shuffled rounds over the finalists' graphs: each settles ``settle_ms`` then is timed over a window of
        ``window_ms`` (device events), no synchronize between configs (one per round). {name: [ms per call]}"""
        graphs = {name: self.capture(call) for name, call in calls.items()}
        per = {name: self.screen_graph(g) for name, g in graphs.items()}
        rng = random.Random(seed)
        out: dict[str, list[float]] = {}
        for _ in range(rounds):
            order = list(graphs)
            rng.shuffle(order)
            marks = []
            for name in order:
                per_replay = per[name] * self.calls
                for _ in range(max(1, math.ceil(settle_ms / per_replay))):
                    graphs[name].replay()
                n = max(1, math.ceil(window_ms / per_replay))
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(n):
                    graphs[name].replay()
                e.record()
                marks.append((name, s, e, n))
            torch.cuda.synchronize()
            for name, s, e, n in marks:
                out.setdefault(name, []).append(s.elapsed_time(e) / (n * self.calls))
        return out

    def screen_graph(self, graph: torch.cuda.CUDAGraph) -> float:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        graph.replay()
        s.record()
        graph.replay()
        e.record()
        torch.cuda.synchronize()
        return max(s.elapsed_time(e), 1e-3) / self.calls


class WallClock:
    """The CPU smoke test's stand-in: wall-clock time of eager calls (the interpreter has no device)."""

    label = "CPU smoke: wall clock of eager calls (no device, no graphs)"

    def screen(self, call: Callable[[], None], min_ms: float = 0.0, cutoff_ms: float = math.inf) -> float:
        call()
        t0 = time.perf_counter()
        call()
        return (time.perf_counter() - t0) * 1e3

    def rounds(self, calls: dict[str, Callable[[], None]], rounds: int, seed: int = 0, **_: Any
               ) -> dict[str, list[float]]:
        rng = random.Random(seed)
        out: dict[str, list[float]] = {}
        for _ in range(rounds):
            order = list(calls)
            rng.shuffle(order)
            for name in order:
                out.setdefault(name, []).append(self.screen(calls[name]))
        return out
