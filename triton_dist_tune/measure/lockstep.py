"""Measuring configs in lock-step with the group: warm-up, then a race of interleaved rounds.

For one key, on every rank, with the configs left after pruning and the journal:

1. **Warm up** each config in the agreed order (under the watchdog, every run started by all ranks together): one
   checked run when ``ref_prog`` is given, ``n_warmup`` runs, and in steady timing one probe of its time per call
   (:func:`~triton_dist_tune.measure.timing.probe`), which sizes its samples. One exchange then shares "ok or
   error" and the probe: a config that failed anywhere is failed everywhere, and its time per call is the group's
   maximum.
2. **Race** (:mod:`triton_dist_tune.measure.race`): rounds over the configs still running, in an order the group
   shares and changes every round. In ``steady`` timing a round's samples (each: settling calls, then a timed span;
   see :mod:`~triton_dist_tune.measure.timing`) run back to back with no host synchronize and no exchange
   between them; one synchronize and **one exchange per round** then share every rank's times (or its error). The
   leaders end with a block of settled rounds, run the same way (one synchronize, one exchange for the block). In
   ``cold`` timing each sample (one call after an L2 flush) starts right after an exchange, so the ranks start it
   together, and is followed by one exchange. After each round the group removes the configs that are clearly
   slower than the leader; the race ends when one is left, after ``max_rounds`` rounds (or the settled rounds), or
   at the time budget.
3. Every sample (and every config's compile pass) is preceded by a journal ``started`` record, and every config's
   final outcome (``failed``, ``stopped`` or ``measured``) is journaled as soon as the group knows it, so a
   restarted job resumes without the configs that crashed, hung or failed, without measuring stopped ones again,
   and without the compile pass of a config whose pass ended the attempt. A failure whose error says the GPU
   context is unusable (:data:`~.guarding.POISONED`) stops every rank with ``DevicePoisonedError``.

A failure inside a steady round cannot stop the other ranks mid-round (the failing rank stops its round there and
goes to the round's exchange): when the function has collectives, the others may wait in one, of that config or
of the next one of the round. The failing rank posts its failure on the board, naming the round (its step); a
rank whose guard is in that round ends after the board's grace (or, inside another config, after 4x that
config's expected sample time) and journals its own config ``interrupted`` unless it is the one that failed: only
the failing rank's record is evidence, so the resume leaves out the config at fault and nothing else (failures
almost always show in the aligned warm-up runs, which stop every rank at the same run). When the others are not
stuck (no collective in the samples after it), they finish the round; the samples the failing rank did not take
are **missing, not failed** (a config is failed only by an error of its own run): they are taken again in a
make-up step of the same round, over just those samples, before the round closes, so a one-round race (the
search's screening) or a last round loses no config to another config's failure.

Sharded (rank-local functions only): each rank warms up and samples its share of the configs alone, and one
exchange at the end shares every outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import CompileFailed, WrongResult, describe_error
from ..faults.journal import Journal
from ..faults.watchdog import WATCHDOG, Guard, exchange_timeout
from ..group.channel import Board, Group
from ..records import COMPILE_PASS, FROM_THE_FILL, WARMUP, WARMUP_AGAIN, Outcome
from ..stats import median
from . import breakdown, timing
from .budget import Budget, clocked
from .combine import PER_RANK_LIMIT as PER_RANK_LIMIT
from .combine import Combined as Combined
from .combine import combine_phase as combine_phase
from .graphs import EAGER, GRAPH, PLACEMENTS, Graphs
from .guarding import Guarding
from .late import LateChecks
from .once import Once
from .precompile import Compiles
from .probe_screen import ProbeScreen
from .race import Race, RacePlan, sift_note
from .sampling import Sampling
from .sharded import Sharding
from .standings import levels_note
from .steps import SteadySteps
from .trial import Trial
from .warm_order import WarmOrder

#: (index, config, description) of a config to measure
Todo = tuple[int, dict[str, Any], str]


@dataclass(frozen=True)
class Plan:
    """How the configs are measured; identical on every rank."""

    n_warmup: int
    timeout: float
    race: RacePlan
    #: "steady" or "cold" (see :mod:`triton_dist_tune.measure.timing`)
    timing: str = "steady"
    #: timed calls per steady sample; None: from a probe per config
    batch: int | None = None


def _raise(exc: Exception) -> None:
    raise exc


def settled_text(race: Race) -> str:
    """How a race's log line says where its settled rounds began: ``settled from 3``, or ``no settled rounds`` for
    a race that never settled (it reached its round cap, or had too few configs to race; the line said 'settled
    from None')."""
    return f"settled from {race.settled_from}" if race.settled_from is not None else "no settled rounds"


class Measurer(Sampling, Sharding, Guarding, SteadySteps, Once, LateChecks):
    """Runs the measurement of one tuning call of one key (see the module docstring)."""

    def __init__(self, group: Group, trial: Trial, plan: Plan, journal: Journal, log: logging.Logger,
                 label: str, guard: Guard | None = None) -> None:
        self.group, self.trial, self.plan, self.journal, self.log, self.label = group, trial, plan, journal, log, label
        self.cold = plan.timing == "cold"
        #: this tuning's deadline and failure board (see :mod:`~triton_dist_tune.faults.watchdog`)
        self.guard = guard if guard is not None else WATCHDOG.guard(Board(), group.rank)
        self._posted: dict[tuple[int, str], str] = {}
        self._current: tuple[int, str] | None = None  # the config in flight
        self._step = ""  # the step of the protocol the config in flight belongs to (its board reports name it)
        #: waiting at the exchange that starts a run together, inside a guarded phase (:meth:`_aligned`)
        self.waiting = False
        #: this rank's error in the aligned phase in progress, while it waits to stop with the others (:meth:`_aligned`)
        self.own_failure: str | None = None
        self._deferred: str | None = None  # sharded: a poisoning failure, raised on every rank after the exchange
        #: the compiles started ahead (:mod:`~triton_dist_tune.measure.precompile`), waited for config by config
        self.compiles = Compiles()
        #: how the samples are timed: eagerly, or by replaying CUDA graphs (:mod:`~triton_dist_tune.measure.graphs`)
        self.clock_kind = EAGER
        self.graphs: Graphs | None = None
        self._clock_chosen = False
        #: whether this tuning may time on the device at all: not one of ``autotune_replicas`` (a one-rank replica
        #: would choose from its own share of the configs, and the leaders' times across replicas mix kinds)
        self.device_time = True
        #: the clock the earlier attempts' times were taken with, which a resumed tuning keeps (None: choose)
        self.journaled_clock: str | None = None
        #: the group's time per call of every config warmed up so far (the MAX over ranks: the same everywhere)
        self.per_call: dict[int, float] = {}
        #: pauses a search's screening made to measure what it had warmed up before waiting for compiles
        self.pauses = 0
        #: where this tuning's time goes (:mod:`~triton_dist_tune.measure.breakdown`)
        self.watch = breakdown.current() or breakdown.Stopwatch()
        #: the time budget, on the group's agreed clock (:mod:`~triton_dist_tune.measure.budget`)
        self.budget = Budget(plan.race.budget_s)
        #: the configs a search screened by their probe alone (:mod:`~triton_dist_tune.measure.probe_screen`)
        self.probes = ProbeScreen()
        self._filled_here = False
        #: how many times each config was warmed up (names each warm-up's step: :meth:`_warm`)
        self._warmups: dict[int, int] = {}
        #: the configs found wrong after their own check, and those whose warm-up passed (:mod:`~.late`)
        self.late_failed: dict[int, Outcome] = {}
        self._passed: dict[int, str] = {}

    # -- guarded and aligned runs ------------------------------------------------------------------------------------

    def _aligned(self, runs: Sequence[Callable[[], Any]], index: int | None, phase: str) -> list[Any]:
        """Call each of ``runs`` in turn, each with the phase's whole deadline (the guard restarts before it). With
        ``index`` (lock-step), the ranks start every run together and all stop at the same run once any of them
        failed (so that nobody is left alone inside a collective of the function, and the exchanges stay matched);
        the failure is then re-raised. Under a time budget each run's exchange carries the group's clock
        (:func:`~.budget.clocked`)."""
        results: list[Any] = []
        if index is None:  # sharded: nobody to align with
            for run in runs:
                self.guard.restart()
                results.append(run())
            return results
        failure: Exception | None = None
        self.own_failure = None
        for t, run in enumerate(runs):
            self.guard.restart()
            self.waiting = True  # at the tuner's exchange, not in a run: a deadline here is no hang of this rank's
            try:
                stop = clocked(self.group, self.budget, failure is not None,
                               f"{self.label} config {index} {phase} {t}", any, exchange_timeout(self.plan.timeout))
            finally:
                self.waiting = False
            if stop:
                break
            try:
                results.append(run())
            except Exception as exc:  # reported after the loop, once every rank has stopped; posted at once
                failure = exc
                self.own_failure = self._post(index, self._current[1] if self._current else "", describe_error(exc))
        self.own_failure = None
        if failure is not None:
            raise failure
        return results

    def aligned_run(self, index: int, desc: str, run: Callable[[], Any]) -> str | None:
        """Run ``run`` once on every rank together, under the watchdog, like a warm-up run (the compile pass);
        returns this rank's error or None. Once the ranks are aligned, its ``started`` record names the pass: an
        attempt that ends before the next record (a rank raised there while another waits in a collective, a hang,
        a crash) ended in this config's pass, which the next attempt then leaves out."""
        def started_run() -> Any:
            self.started(index, desc, COMPILE_PASS)
            return run()

        return self._guarded(index, desc, COMPILE_PASS, lambda: self._aligned([started_run], index, COMPILE_PASS))[1]

    # -- warm-up ---------------------------------------------------------------------------------------------------

    def _warmup_runs(self, index: int, config: dict[str, Any], probe_calls: int) -> list[Callable[[], Any]]:
        """The runs of a config's warm-up: the checked run, ``n_warmup`` runs, and the steady probe (``probe_calls``
        timed calls)."""
        def checked() -> None:
            wrong = self.trial.checked_run(config, index)
            if wrong:
                raise WrongResult(wrong)

        def plain() -> None:
            self.trial.call(config, warmup=True)

        runs: list[Callable[[], Any]] = [checked] if self.trial.reference is not None else []
        runs += [plain] * self.plan.n_warmup
        lead = not runs  # a warm-up run just ran the config: the probe needs no lead call of its own
        if not self.cold and self.plan.batch is None:
            runs.append(lambda: self.trial.probe(config, lead, probe_calls))
        return runs

    def _warm(self, index: int, config: dict[str, Any], desc: str, aligned: bool,
              previous_ms: float, phase: str = WARMUP) -> tuple[float | None, str | None]:
        """Warm one config up; returns (this rank's time per call from the probe, None) or (None, error); the time
        is 0 when no probe ran (cold timing, a fixed ``batch``: one settling call, or stopped early by another rank's
        failure). ``previous_ms``: the time per call of the config warmed up before it (the group's when
        ``aligned``), which sets the probe's calls (:func:`~triton_dist_tune.measure.timing.probe_calls`);
        ``phase``: :data:`~triton_dist_tune.records.WARMUP_AGAIN` for a warm-up run again
        (:meth:`~triton_dist_tune.measure.guarding.Guarding._again_after_fill`)."""
        # a config warmed up again (replicas' leaders, a run again after the NaN fill) is a step of its own: a report
        # on the failure board of its earlier warm-up is no peer failure in it, and its own failure is posted anew
        self._warmups[index] = count = self._warmups.get(index, 0) + 1
        self.started(index, desc, phase)
        with breakdown.part("compile"):
            compiled = self.compiles.wait(index)  # bounded by its own limit, outside the watchdog
        if aligned and self.compiles.active:  # every rank: start its first run once its kernels are in the cache
            failed = self.group.combine(compiled is not None, f"{self.label} config {index} compiled", any,
                                        exchange_timeout(self.plan.timeout) + self.compiles.limit)
            if failed and compiled is None:
                return 0.0, None  # another rank's compile failed: its error comes in the exchange
        runs = self._warmup_runs(index, config, timing.probe_calls(previous_ms))
        if compiled is not None:
            runs = [lambda: _raise(CompileFailed(compiled))]
        calls = self.trial.calls
        results, error = self._guarded(index, desc, phase,
                                       lambda: self._aligned(runs, None if compiled or not aligned else index,
                                                             phase), step=f"config {index} {phase}"
                                       + (f" ({count})" if count > 1 else ""))
        self.watch.launched(index, self.trial.calls - calls)
        if error is not None:  # a raise from the NaN fill says so: the group may run the warm-up again
            filled = self.trial.state is not None and self.trial.state.raised_from_fill
            return None, f"{FROM_THE_FILL}: {error}" if filled else error
        if self.cold or self.plan.batch is not None or len(results) < len(runs):
            return 0.0, None
        self.watch.timed(index, float(results[-1]), probe=True)
        return float(results[-1]), None

    @property
    def probes_are_samples(self) -> bool:
        """Whether a config's warm-up probe is timed as its steady screening samples are (eager calls on the host's
        clock, agreed; steady timing, no fixed batch): a search counts it as a sample it already took."""
        return self.trial.host_counts and self.clock_kind == EAGER and not self.cold and self.plan.batch is None

    # -- lock-step -------------------------------------------------------------------------------------------------

    def lockstep(self, todo: Sequence[Todo], race_plan: RacePlan | None = None,
                 warmed: bool = False, screen: bool = False) -> list[Outcome]:
        """Warm up and race ``todo`` with the group (under ``race_plan``, default the plan's); returns one outcome
        per config (identical on every rank except ``own``), in index order. ``warmed``: configs this measurer
        warmed up before are not warmed up again (a search's second screening sample; each sample settles first).
        ``screen``: a search's screening of new configs, where those far behind get their probe as their sample
        (:meth:`~.sampling.Sampling.far_behind`), and where a rank tuning alone may defer a config whose compile has
        not ended (:mod:`~.warm_order`: its outcome's error is ``DEFERRED``) and races what it has warmed up before it
        waits for the rest's compiles (a pause of the order)."""
        outcomes: dict[int, Outcome] = {}
        per_call: dict[int, float] = {}  # the configs warmed up since the last pause (or the start)
        warmed_now: list[Todo] = []
        raced = False  # a pause raced a config warmed up without failing: a time budget may stop any warm-up now
        warming = time.monotonic()
        previous = 0.0  # the group's time per call of the config warmed up last
        round_s = 0.0  # the predicted length of a screening round of the configs warmed up (with a budget)
        self.watch.enter("warmup")
        # no pause before the first race has chosen the tuning's clock from every probe of its configs
        order = WarmOrder(todo, self.compiles, alone=self.group.size == 1, defer=screen, pause=self._clock_chosen)
        for item in order:
            if item is None:  # a pause before a wait for compiles: measure what is warmed up meanwhile
                self.watch.leave()
                self._race_warmed(warmed_now, per_call, race_plan, screen, outcomes, warming)
                raced = raced or bool(per_call)
                warmed_now, per_call, round_s, warming = [], {}, 0.0, time.monotonic()
                self.watch.enter("warmup")
                continue
            index, config, desc = item
            warmed_now.append(item)
            if warmed and index in self.per_call:
                per_call[index] = previous = self.per_call[index]
                continue
            if (per_call or raced) and self.budget.ends_before(round_s):
                outcomes[index] = self.budget.left_out(index, desc)  # agreed: the group's probes and clock
                continue
            wanted, error = self._warm(index, config, desc, aligned=True, previous_ms=previous)
            combined = self._exchange(index, desc, (error or wanted, self.budget.now()), error, "warmup")
            if combined.errors and FROM_THE_FILL in combined.errors and self._again_after_fill(index, error):
                wanted, error = self._warm(index, config, desc, True, previous, WARMUP_AGAIN)
                combined = self._exchange(index, desc, (error or wanted, self.budget.now()), error, WARMUP_AGAIN)
                self.trial.state.again_done(combined.errors is None, self._filled_here)  # type: ignore[union-attr]
            self.budget.agreed(combined.elapsed)
            if combined.errors:
                outcomes[index] = self._failed(index, desc, combined.errors)
            else:
                calls = timing.probe_calls(previous)
                per_call[index] = previous = float(max(combined.values))
                if calls == 1 and 0 < previous < timing.PROBE_ONE_CALL_MS:
                    self.probes.short.add(index)  # a fast call probed once: no far-behind reading (ProbeScreen)
                if self.budget.bounded:
                    round_s += self.sample_seconds(index, config, previous, False, len(per_call) == 1)
        self.watch.leave()
        self.pauses += order.pauses
        outcomes.update(order.deferred_outcomes())  # screened in the search's next stage
        self._race_warmed(warmed_now, per_call, race_plan, screen, outcomes, warming)
        return [outcomes[i] for i in sorted(outcomes)]

    def _race_warmed(self, todo: Sequence[Todo], per_call: dict[int, float], race_plan: RacePlan | None,
                     screen: bool, outcomes: dict[int, Outcome], warming: float) -> None:
        """Race the configs of ``todo`` warmed up with ``per_call`` (their group's times per call), since
        ``warming`` (``time.monotonic``), into ``outcomes`` (:meth:`lockstep`'s race; a screening's far-behind
        configs get their probe)."""
        self.late_left_out(per_call, outcomes)  # found wrong after their check: no race (:mod:`~.late`)
        self.per_call.update(per_call)
        far = self.far_behind(per_call) if screen else []
        entries = {index: (config, desc) for index, config, desc in todo if index in per_call and index not in far}
        self.log.info("%s warm-up: %d config(s) in %.2f s", self.label, len(todo), time.monotonic() - warming)
        for index, error in self._capture(entries, per_call).items():
            outcomes[index] = self._failed(index, entries.pop(index)[1], error)
        plan = race_plan or self.plan.race
        if self.trial.host_counts:  # the sift is for a device's power limit (timing.py), and a host's probe and
            plan = replace(plan, final_top_heavy=0, far_behind=0.0)  # sample may both read a stall
        race = Race(sorted(entries), replace(plan, levels=True, placements=PLACEMENTS) if self.clock_kind == GRAPH
                    else plan, probes=per_call)
        started = time.monotonic()
        self.watch.enter(self.watch.rounds)
        while entries and not race.finished(self.budget.elapsed):
            if self.cold:
                rounds = [[(i, self._cold_sample(i, *entries[i], race)) for i in race.order()]]
            else:
                block = self.step_rounds(race, entries, per_call)  # a settled block: the rounds the budget leaves
                if race.settling:  # the block's leaders at the other output placements those rounds replay (graphs)
                    for index, error in self._place_leaders(race, entries, block).items():
                        race.fail(index, error)
                        outcomes[index] = self._failed(index, entries[index][1], error)
                    if not race.running:  # every leader failed (a block the budget split, too): no empty step
                        break
                rounds = self._steady_rounds(race, entries, per_call, block)
            # a settled block whose every leader failed in it closes its later rounds here with no sample: its step
            # (and make-ups) took the block, with no run or exchange after the last failure; the race's state is the
            # group's, so every rank closes alike (harmless: tests/test_replicas.py, every leader failing on a replica)
            for results in rounds:
                for index, combined in results:
                    self.budget.agreed(combined.elapsed)  # the group's clock: every rank reads the same
                    if combined.errors:
                        race.fail(index, combined.errors)
                        outcomes[index] = self._failed(index, entries[index][1], combined.errors)
                    elif race.entrants[index].state == "running":
                        race.record(index, combined.values)
                for index in race.end_round():
                    outcomes[index] = self._final(race.outcome(index, entries[index][1], self._own), least=race.noisy)
        self.watch.leave()
        self.budget.cut = self.budget.cut or race.cut
        # every config's time of the race's final statistic (Race.location): one that left the race took the
        # statistic of then, and the samples may have turned noisy since (or quiet); a near-tie block's leavers too
        for index, entrant in sorted(race.entrants.items()):
            if entrant.state == "failed" or not entrant.timed():
                continue
            outcome = race.outcome(index, entries[index][1], self._own)
            if entrant.state == "running" or index not in outcomes or outcomes[index].time != outcome.time:
                outcomes[index] = self._final(outcome, least=race.noisy)
        if screen:
            outcomes.update(self.probed_outcomes(far, todo, per_call, [outcomes[i] for i in entries]))
        if self.graphs is not None:
            self.graphs.release()
        self.log.info("%s race: %d round(s) (%s) in %.2f s%s%s", self.label, race.rounds,
                      settled_text(race), time.monotonic() - started,
                      "; noisy: times are least samples" if race.location() is not median else "",
                      sift_note(race) + levels_note(race))
        self.race = race
        if (behind := [e for e in todo if e[0] in far and e[0] not in outcomes]) and not self.budget.cut:
            outcomes.update((o.index, o) for o in self.lockstep(behind, race_plan, warmed=True))  # probes not trusted
            self.probes_raced([outcomes[e[0]] for e in behind])  # their evidence too

    @property
    def _own(self) -> int:
        """This rank's position in a sample's values (-1 when a large group sends only the max)."""
        return self.group.rank if self.group.size <= PER_RANK_LIMIT else -1
