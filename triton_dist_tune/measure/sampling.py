"""How a config's samples are timed: eagerly, or replayed from a CUDA graph of its calls (device time); and which
configs a search screens by their warm-up probe alone (:meth:`Sampling.far_behind`,
:mod:`~triton_dist_tune.measure.probe_screen`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..records import Outcome
from . import breakdown, probe_screen, timing
from .combine import Combined
from .graphs import EAGER, GRAPH, Graphs, device_time_applies, graph_calls
from .race import Race

#: a capture that failed for want of device memory: before any capture worked, no evidence against the config (the
#: tuning times eagerly)
OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError", re.IGNORECASE)


def uncapturable(error: str | None) -> str:
    """A config's error when its calls cannot be captured while other configs' can."""
    return (f"its calls cannot be captured in a CUDA graph, which the tuning times on the device from (other configs' "
            f"can: it would break a CUDA-graph capture of the caller's too): {error}")


class Sampling:
    """The CUDA-graph part of :class:`~triton_dist_tune.measure.lockstep.Measurer`: whether a tuning times on the
    device, each config's capture, and each steady or cold sample. Uses the measurer's ``trial``, ``plan``,
    ``group``, ``cold``, ``log``, ``label``, ``watch``, ``per_call``, ``budget``, ``_final``, ``journal``, and its
    ``graphs``, ``clock_kind``, ``_clock_chosen``, ``device_time``, ``journaled_clock`` and ``probes``."""

    def _capture(self, entries: dict[int, tuple[dict[str, Any], str]], per_call: dict[int, float]) -> dict[int, str]:
        """Before the first race of a tuning, decide whether its samples are timed on the device
        (:mod:`~triton_dist_tune.measure.graphs`; from the group's probes); then capture the graph of each config of
        this race, each under the tuning's deadline like any run of the function (a capture runs the config once,
        and its timed replay runs it again: a call that hangs there ends the rank through the watchdog, the config
        journaled as hung). When no config of the tuning's first race can be captured (every one is tried), the
        tuning times eagerly, and it is logged: the function cannot be captured. A config whose capture fails where
        another's worked cannot be captured itself, and fails alone (:func:`uncapturable`), wherever it comes in
        the order: before, the tuning switched to eager timing at it, and a search then ranked its later stages'
        eager times against its earlier stages' device times. A capture that fails for want of device memory
        before any capture worked blames no config, and the tuning times eagerly (:data:`OUT_OF_MEMORY`); after
        one worked, that config fails alone.
        Returns the configs whose capture met their own error at its synchronize, or that cannot be captured (the
        caller fails them; one rank: no other rank needs to agree)."""
        if self.graphs is None and not self._clock_chosen and per_call:
            self._clock_chosen = True
            fastest = min(per_call.values())
            kind = getattr(self.trial.clock, "kind", "host")
            if self.device_time and device_time_applies(self.cold or self.plan.batch is not None, self.group.size,
                                                         kind, fastest, self.journaled_clock):
                self.graphs = Graphs(graph_calls(fastest))
                self.clock_kind = GRAPH
                self.log.info("%s timing on the device: each config's calls replayed from a CUDA graph of %d "
                              "(the fastest takes %.4f ms per eager call)", self.label, self.graphs.calls, fastest)
            if self.journaled_clock is not None:
                self.log.info("%s timing %s, as the earlier attempts' journaled times were", self.label,
                              "on the device" if self.clock_kind == GRAPH else "eagerly")
            self.journal.clock = self.clock_kind
        failed: dict[int, str] = {}
        if self.graphs is None:
            return failed
        #: configs whose capture failed while no capture of this tuning has worked yet: the function's, or theirs
        pending: dict[int, str] = {}
        with breakdown.part("capture"):
            for index in sorted(entries):
                config, desc = entries[index]
                # the call before the capture, where one runs (the captured calls do not run)
                self.watch.launched(index, 1 if self.graphs.warms_next else 0)
                self.started(index, desc, "capture")
                # the synchronize after it: the device is idle from here (timing.may_have_idled)
                captured, error = self._guarded(index, desc, "capture",
                                                lambda i=index, c=config: self._capture_one(i, c))
                if error is not None:
                    failed[index] = error
                elif not captured and not self.graphs.works and OUT_OF_MEMORY.search(self.graphs.error or ""):
                    pending[index] = self.graphs.error or ""  # no evidence against a config: time eagerly
                    break
                elif not captured and self.graphs.works:
                    failed[index] = uncapturable(self.graphs.error)
                elif not captured:
                    pending[index] = uncapturable(self.graphs.error)
                elif pending:  # the function can be captured: those configs cannot
                    failed.update(pending)
                    pending.clear()
        if pending:
            self.log.warning("%s the function cannot be captured in a CUDA graph (%s, %s): timing eagerly", self.label,
                             "out of memory" if OUT_OF_MEMORY.search(self.graphs.error or "") else "no config could",
                             self.graphs.error)
            self.graphs.close()
            self.graphs = None
            self.clock_kind = self.journal.clock = EAGER
        return failed

    def step_rounds(self, race: Race, entries: dict[int, tuple[dict[str, Any], str]],
                    per_call: dict[int, float]) -> int:
        """The rounds the race's next step runs: :meth:`Race.block`, a settled block cut to the rounds the time budget
        leaves it (predicted from the leaders' :meth:`round_seconds`; at least one). The group's agreed clock and
        probes: every rank cuts alike."""
        block = race.block()
        if block > 1 and self.budget.bounded:
            running = race.running
            block = self.budget.rounds(block, self.round_seconds(running, {i: entries[i][0] for i in running},
                                                                 per_call, True))
        return block

    def _place_leaders(self, race: Race, entries: dict[int, tuple[dict[str, Any], str]],
                       rounds: int | None = None) -> dict[int, str]:
        """Before a race's settled block of ``rounds`` rounds (timed on the device; default :meth:`step_rounds`, the
        rounds the time budget leaves it): each leader's graphs at the output placements it lacks of those the
        rounds replay (:meth:`Graphs.place`; the sift's one round replays the first alone, and stops most of its
        leaders; a block the budget cuts short replays no placement past its last round), each capture under the
        tuning's deadline; returns the leaders whose capture met their own error at its synchronize (the caller
        fails them). A placement that fails to capture, or the placements' memory bound, ends the placing; a race
        whose leaders could not all be placed then times every leader at its one first placement (a leader judged on
        fewer placements than the others is not judged alike)."""
        failed: dict[int, str] = {}
        graphs = self.graphs
        if rounds is None:
            rounds = self.step_rounds(race, entries, self.per_call)
        # settled round j replays placement j mod placements (Race.placement): this block's reach 0 .. wanted - 1
        wanted = min(race.plan.placements, race.rounds - (race.settled_from or 0) + rounds)
        if graphs is None or wanted < 2 or not graphs.placing:
            return failed
        with breakdown.part("capture"):
            for index in race.running:
                config, desc = entries[index]
                while 0 < graphs.placements(index) < wanted:
                    self.started(index, desc, "capture")
                    placed, error = self._guarded(index, desc, "capture",
                                                  lambda i=index, c=config: graphs.place(i, lambda: self.trial.call(c)))
                    if error is not None:
                        failed[index] = error
                    if error is not None or not placed:
                        break
                if not graphs.placing:
                    break  # a placement that cannot be captured, or the memory bound: no more placements
        if any(graphs.placements(i) < wanted for i in race.running if i not in failed):
            # a leader short of placements would be judged on fewer than the others: every leader at one
            self.log.info("%s output placements dropped for this race: not every leader could be placed", self.label)
            graphs.placed.clear()
            race.plan = replace(race.plan, placements=1)
        return failed

    def close_graphs(self) -> None:
        """The tuning ends: its graphs and their memory go (:meth:`Graphs.close`)."""
        if self.graphs is not None:
            self.graphs.close()

    def _capture_one(self, index: int, config: dict[str, Any]) -> bool:
        """Capture config ``index``'s graph (:meth:`Graphs.capture`)."""
        assert self.graphs is not None
        return self.graphs.capture(index, lambda: self.trial.call(config))

    def far_behind(self, per_call: dict[int, float]) -> list[int]:
        """The configs of ``per_call`` (this stage's, warmed up) over
        :data:`~triton_dist_tune.measure.probe_screen.FAR_BEHIND` times the tuning's fastest probe (every probe of
        this measurer: earlier stages' too): the candidates a search may screen by their probe alone once this
        stage's others are raced (:meth:`probed_outcomes`). Only on one rank timing on a device clock
        (:meth:`_probes_screen`). The group's probes: agreed."""
        if not self._probes_screen():
            return []
        self.probes.probed(per_call)
        return self.probes.far(per_call)

    def _probes_screen(self) -> bool:
        """Whether probes may screen configs: on one rank timing on a device clock, where a probe carries the
        device's small noise. A collective's one-sided delays (or a loaded host's stalls) can make a probe read
        twice a config's time, and a config screened by such a probe would be lost to the search."""
        return self.group.size == 1 and not self.cold and self.plan.batch is None and not self.trial.host_counts

    def probes_raced(self, raced: Sequence[Outcome]) -> None:
        """Note how the samples of configs raced after their probe read those probes (where probes may screen)."""
        if self._probes_screen():
            for outcome in raced:
                if outcome.usable and outcome.time:
                    self.probes.raced(self.per_call.get(outcome.index, 0.0), outcome.time, outcome.index)

    def probed_outcomes(self, far: Sequence[int], todo: Sequence[tuple[int, dict[str, Any], str]],
                        per_call: dict[int, float], raced: Sequence[Outcome]) -> dict[int, Outcome]:
        """After a search's screening round: first the evidence of ``raced`` (this round's outcomes: sample /
        probe); then the outcomes (journaled) of the candidates ``far`` behind (:meth:`far_behind`) that are
        behind the measured bar (:meth:`~.probe_screen.ProbeScreen.stand_ins`), each its probe's stand-in time.
        The caller races the other candidates."""
        self.probes_raced(raced)
        if not far or not self._probes_screen():
            return {}
        stand_in = self.probes.stand_ins(per_call, far)
        descriptions = {index: desc for index, _, desc in todo}
        self.log.info("%s %d of %d config(s) over %gx the fastest probe screened by their probe alone (%s)",
                      self.label, len(stand_in), len(far), probe_screen.FAR_BEHIND, self.probes.text())
        return {i: self._final(Outcome(i, descriptions[i], "measured", time=t, per_rank=[t], samples=1, own=t,
                                       probed=True)) for i, t in stand_in.items()}

    def _cold_sample(self, index: int, config: dict[str, Any], desc: str, race: Race) -> Combined:
        """One cold sample of ``index``, right after the previous exchange, then its own exchange."""
        self.started(index, desc, f"round {race.rounds}")
        value, error = self._guarded(index, desc, "sample", lambda: self.trial.cold(config))
        if error is None:
            self.watch.launched(index, 1)
            self.watch.timed(index, value)
            self.watch.sampled(value / 1e3)
        return self._exchange(index, desc, (error or value, self.budget.now()), error, f"round {race.rounds}")

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
        if self.graphs is not None and index in self.graphs.graphs:
            per_call_ms = self.graphs.replay_ms(index, per_call_ms) / per
        return ((steady.settle + steady.span + steady.queued) * per * per_call_ms + steady.hold_ms) / 1e3

    def _sampler(self, index: int, config: dict[str, Any], per_call_ms: float, settled: bool,
                 first: bool, placement: int = 0) -> tuple[timing.Steady, Callable[[], Any], int]:
        """(the calls of a steady sample of config ``index``, the sample to run, the calls per counted call): a
        replay of its graph counts as ``calls`` calls when the tuning times on the device, and the sample is sized
        by a replay's device time, not by ``per_call_ms`` (the eager probe's: a host-bound call's eager time is many
        times its device time, and samples sized by it settle and span too little of the device's time; on one
        H200, MoE calls of 0.1 ms whose eager calls took 0.5 ms got 0.4 ms of settling and 1 ms of span, which read
        a config 9% slower than the one they chose where 5 ms of settling, and the host's judge, read it 2-4%
        faster: ``benchmarks/regime_check.py``; the span: :data:`~.timing.GRAPH_SCREEN_SPAN_MS`). ``placement``: the
        output placement whose graph a settled sample replays (:meth:`~.race.Race.placement`)."""
        graphs = self.graphs
        if graphs is not None and index in graphs.graphs:
            replay_ms = graphs.replay_ms(index, per_call_ms)
            steady = timing.steady_calls(self.trial.host_counts, replay_ms, settled, first, None, self.group.size,
                                          graph=True, call_ms=replay_ms / graphs.calls)
            replay = graphs.replay(index, placement)
            return steady, lambda: timing.steady_span(self.trial.clock, replay, steady), graphs.calls
        steady = timing.steady_calls(self.trial.host_counts, per_call_ms, settled, first, self.plan.batch,
                                      self.group.size)
        return steady, lambda: self.trial.steady(config, steady), 1
