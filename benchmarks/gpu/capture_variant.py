"""A measurement, not a mode: imported first in a campaign's process (the prelude of ``_campaign.sh``), it replaces
:meth:`triton_dist_tune.measure.graphs.Graphs.capture` with captures that skip ``torch.cuda.graph``'s
``empty_cache`` before each capture: one capture stream per device, made once, and one memory pool shared by the
graphs of one :class:`Graphs` (one lock-step's race: its graphs replay one at a time on one stream). At exit it
prints the caching allocator's peak and current reserved memory, which the arm without it prints too
(``memory_report()``)."""

from __future__ import annotations

import atexit

import torch

from triton_dist_tune.errors import describe_error
from triton_dist_tune.measure import graphs as graphs_module

_streams: dict[int, torch.cuda.Stream] = {}


def _capture_stream() -> torch.cuda.Stream:
    device = torch.cuda.current_device()
    if device not in _streams:
        _streams[device] = torch.cuda.Stream()
    return _streams[device]


def capture(self, index, call) -> bool:  # the replacement of Graphs.capture (same contract)
    try:
        stream = _capture_stream()
        stream.wait_stream(torch.cuda.current_stream())
        pool = getattr(self, "_pool", None)
        if pool is None:
            pool = self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            call()  # the warm-up torch asks for before a capture
            graph.capture_begin(pool=pool)
            try:
                for _ in range(self.calls):
                    call()
            finally:
                graph.capture_end()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
    except Exception as exc:
        self.error = describe_error(exc)
        self.release()
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        return False
    self.graphs[index] = graph
    if index not in self.device_ms and (ms := graphs_module._replay_ms(graph)) is not None:
        self.device_ms[index] = ms
    return True


def memory_report() -> None:
    atexit.register(lambda: print(f"MEMORY peak reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB, "
                                  f"reserved at exit {torch.cuda.memory_reserved() / 2**30:.2f} GiB", flush=True))


def install() -> None:
    graphs_module.Graphs.capture = capture
    memory_report()
