"""How a config's samples are timed: eagerly, or replayed from a CUDA graph of its calls (device time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import breakdown, timing
from .graphs import EAGER, GRAPH, Graphs, device_time_applies, graph_calls


class Sampling:
    """The CUDA-graph part of :class:`~triton_dist_tune.measure.lockstep.Measurer`: whether a tuning times on the
    device, each config's capture, and each steady sample's calls. Uses the measurer's ``trial``, ``plan``,
    ``group``, ``cold``, ``log``, ``label``, ``watch``, and its ``graphs``, ``clock_kind`` and ``_clock_chosen``."""

    def _capture(self, entries: dict[int, tuple[dict[str, Any], str]], per_call: dict[int, float]) -> None:
        """Before the first race of a tuning, decide whether its samples are timed on the device
        (:mod:`~triton_dist_tune.measure.graphs`; from the group's probes); then capture the graph of each config of
        this race. A capture that fails makes the rest of the tuning time eagerly, and is logged."""
        if self.graphs is None and not self._clock_chosen and per_call:
            self._clock_chosen = True
            fastest = min(per_call.values())
            kind = getattr(self.trial.clock, "kind", "host")
            if device_time_applies(self.cold or self.plan.batch is not None, self.group.size, kind, fastest):
                self.graphs = Graphs(graph_calls(fastest))
                self.clock_kind = GRAPH
                self.log.info("%s timing on the device: each config's calls replayed from a CUDA graph of %d "
                              "(the fastest takes %.4f ms per eager call)", self.label, self.graphs.calls, fastest)
        if self.graphs is None:
            return
        with breakdown.part("capture"):
            for index in sorted(entries):
                self.watch.launched(index, 1)  # the warm-up call before the capture (the captured calls do not run)
                if not self.graphs.capture(index, lambda c=entries[index][0]: self.trial.call(c)):
                    self.log.warning("%s the function cannot be captured in a CUDA graph (%s): timing eagerly",
                                     self.label, self.graphs.error)
                    self.graphs = None
                    self.clock_kind = EAGER
                    return

    def round_seconds(self, indices: list[int], configs: dict[int, dict[str, Any]], per_call: dict[int, float],
                      settled: bool) -> float:
        """The predicted length of one steady round of ``indices`` (their calls times the group's time per call, in
        seconds): what a time budget checks before it warms another config or runs a settled block
        (:mod:`~triton_dist_tune.measure.budget`); 0 in cold timing (a sample is one call, as a warm-up run)."""
        return sum(self.sample_seconds(index, configs[index], per_call[index], settled, n == 0)
                   for n, index in enumerate(indices))

    def sample_seconds(self, index: int, config: dict[str, Any], per_call_ms: float, settled: bool,
                       first: bool) -> float:
        """The predicted length of one steady sample of config ``index`` (seconds; 0 in cold timing)."""
        if self.cold:
            return 0.0
        steady, _, per = self._sampler(index, config, per_call_ms, settled, first)
        return ((steady.settle + steady.span + steady.queued) * per * per_call_ms + steady.hold_ms) / 1e3

    def _sampler(self, index: int, config: dict[str, Any], per_call_ms: float, settled: bool,
                 first: bool) -> tuple[timing.Steady, Callable[[], Any], int]:
        """(the calls of a steady sample of config ``index``, the sample to run, the calls per counted call): a
        replay of its graph counts as ``calls`` calls when the tuning times on the device."""
        graphs = self.graphs
        if graphs is not None and index in graphs.graphs:
            steady = timing.steady_calls(self.trial.host_counts, per_call_ms * graphs.calls, settled, first, None)
            replay = graphs.replay(index)
            return steady, lambda: timing.steady_span(self.trial.clock, replay, steady), graphs.calls
        steady = timing.steady_calls(self.trial.host_counts, per_call_ms, settled, first, self.plan.batch)
        return steady, lambda: self.trial.steady(config, steady), 1
