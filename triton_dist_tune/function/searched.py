"""Step 5 of a tuning by search, for large spaces: the stages of :class:`~triton_dist_tune.measure.search.
PatternSearch` screened in lock-step, then the race among the finalists.

- **Seeds** (one exchange): group rank 0 names the configs that won or came second for the keys this function
  already decided on this group, nearest keys first; every rank takes rank 0's list.
- **Stages**: each stage's configs not screened yet (by this attempt or an earlier one: the journals' times) are
  compiled ahead (split across the node, as for the exhaustive race: only what the stage measures), warmed up and
  given one screening sample each (two where the warm-up's probe is timed as a sample is: eager calls on the host's
  clock, steady timing; :attr:`~triton_dist_tune.measure.lockstep.Measurer.probes_are_samples`), in lock-step
  (:meth:`~triton_dist_tune.measure.lockstep.Measurer.lockstep`
  with a one-round race). A config that fails is failed on every rank and never proposed again. On a rank tuning
  alone, a config still compiling when the rest of its stage is measured is deferred to a later stage; when the
  search has nothing else to screen but such configs, one still compiling that the model predicts far behind the
  finalists is left out.
- **Finalists**: the race of the tuning's plan (interleaved rounds, then the settled block among the leaders: a
  paired shoot-out whose margin and near-tie the decision reports).

Everything the search decides comes from agreed data (the kept configs, the seed, rank 0's seeds, the group's
times), so every rank measures the same configs in the same order. Every screening outcome is journaled as the
race journals its own (marked ``screening``: kept apart from a finalist's race record), so a resumed tuning replays
the same stages from the journals' times and measures only the configs no attempt screened.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..disk import logs
from ..errors import BadInputError
from ..faults.journal import SCREENING
from ..group.agreement import from_root
from ..group.channel import Group
from ..measure import ahead, breakdown
from ..measure.budget import LEFT_OUT
from ..measure.lockstep import Measurer, Todo
from ..measure.noise import NoiseEstimate, central
from ..measure.race import Race, RacePlan
from ..measure.search import RESAMPLE_REASONS, PatternSearch, SearchPlan
from ..measure.surrogate import AdditiveModel
from ..measure.warm_order import DEFERRED
from ..records import Decision, Outcome
from .policy import numeric_distance
from .screen_resume import drop_other_clock, take_journaled
from .tuned import TunedFunction

#: seeds taken from each of the nearest decided keys: its choice and its runner-up
SEEDS_PER_KEY, SEED_KEYS = 2, 4
#: the outcome's error of a deferred config left out when the search had nothing else to screen
#: (:meth:`Searched._worth_waiting_for`)
OUTLASTED = "not screened: its compile outlasted the search, and the model predicts it far behind the finalists"
#: a deferred config still compiling is left out when the search's model predicts it over this many times the
#: model's own prediction for the slowest finalist (:func:`contenders`). Over the README's MoE campaign's logs on
#: H200s (``benchmarks/straggler_rule.py``, ``benchmarks/results/session_h200_18``), the model so put none of the
#: configs that then read within 1.02 of their key's choice over 3.34 times (2,061 of them, 15 logs) or 4.14 times
#: (3,763, 27 earlier logs), where the stages of stragglers alone that waited 1.5 s or more waited for configs it put
#: 2.7-21.5 times over (they read 3.6-17.8 times the choice). Picked after seeing both sets of logs
OUTLASTED_FACTOR = 5.0


@dataclass
class SearchRecord:
    """What a search did, for the logs and the decision's record."""

    kept: int
    stages: list[list[int]] = field(default_factory=list)
    #: configs whose screening came from an earlier attempt's journal
    resumed: int = 0
    finalists: list[int] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    #: this rank's seconds of the search, the one figure of :meth:`text` that differs between ranks (the decision
    #: keeps group rank 0's summary: :func:`~triton_dist_tune.function.decide.conclude`)
    seconds: float = 0.0
    #: screening samples taken again (a config whose place the noise left uncertain)
    resampled: int = 0
    #: the same by the rule that asked for them (:attr:`~triton_dist_tune.measure.search.PatternSearch.again`)
    again: dict[str, int] = field(default_factory=dict)
    #: configs screened by their warm-up probe alone (far behind the fastest probe)
    probed: int = 0
    noise: NoiseEstimate | None = None
    #: how probes read the samples, where they may screen configs (one rank, a device clock; empty: they may not)
    probes: str = ""
    #: configs of the stages that the time budget left unmeasured
    left_out: int = 0
    #: True when the time budget ended the screening: the finalists were not raced
    cut: bool = False
    #: configs compiled ahead of the stage that might screen them, and how many of them were screened
    ahead: int = 0
    ahead_screened: int = 0
    #: deferrals of configs to a later stage because their compiles had not ended (measure/warm_order.py; a config
    #: deferred twice counts twice)
    deferred: int = 0
    #: deferred configs left out, unscreened: still compiling when the search had nothing else to screen, predicted
    #: far behind the finalists
    outlasted: int = 0
    #: times a stage screened the configs it had warmed up while the rest of it compiled (measure/warm_order.py)
    paused: int = 0
    #: configs of the first look that the group's earlier keys had screened (compiled already: seeds included)
    first_screened_before: int = 0

    def text(self) -> str:
        """One line: how much of the space was screened, and the noise the screening measured."""
        total = len({i for stage in self.stages for i in stage}) - self.left_out - self.outlasted
        resumed = f" ({self.resumed} from the journal)" if self.resumed else ""
        why = ", ".join(f"{n} {reason}" for reason, n in self.again.items())
        again = (f", {self.first_screened_before} of the first look's {len(self.stages[0])} screened by earlier keys"
                 if self.first_screened_before and self.stages else "")
        again += f", {self.resampled} sampled again" + (f" ({why})" if why else "") if self.resampled else ""
        again += f", {self.probed} screened by their probe alone" if self.probed else ""
        again += f", {self.ahead} compiled ahead ({self.ahead_screened} of them screened)" if self.ahead else ""
        again += f", {self.deferred} deferred to a later stage while they compiled" if self.deferred else ""
        again += f", screening while compiling {self.paused} time(s)" if self.paused else ""
        again += (f", {self.outlasted} left out still compiling when nothing else was left to screen (predicted far "
                  "behind the finalists)" if self.outlasted else "")
        raced = ("the time budget ended the screening (the best screened chosen)" if self.cut else
                 f"{len(self.finalists)} finalists raced")
        noise = f"; {self.noise.text()}" if self.noise is not None else ""
        noise += f"; probes: {self.probes}" if self.probes else ""
        return (f"search: {total} of {self.kept} configs screened{resumed}{again} in {len(self.stages)} stage(s), "
                f"{raced}, {self.seconds:.2f} s{noise}")


def nearest_decided(decisions: dict[tuple[str, Hashable], Decision], group_name: str, key: Hashable,
                    distance: Callable[[Any, Any], float | None] | None) -> list[Decision]:
    """The decisions of the keys this group decided (other than ``key``), nearest ``key`` first (by ``distance``,
    default the numeric one; ties by the key's text). A ``distance`` that raises cannot compare the two keys
    (skipped); one that returns neither a number nor None is a :class:`~triton_dist_tune.errors.BadInputError`."""
    measure = distance or numeric_distance
    near: list[tuple[float, str, Decision]] = []
    for (name, other), decision in list(decisions.items()):  # a copy: another group's tuning may add to it
        if name != group_name or other == key or decision.index < 0:
            continue
        try:
            d = measure(key, other)
        except Exception:  # a user's distance that cannot compare these keys
            d = None
        if d is not None and (isinstance(d, bool) or not isinstance(d, numbers.Real)):
            raise BadInputError(f"distance({key!r}, {other!r}) returned {str(d)[:100]} ({type(d).__name__}): it must "
                                "return a number (smaller is nearer) or None (not comparable)")
        if d is not None and d == d and d != float("inf"):
            near.append((float(d), repr(other), decision))
    return [decision for _, _, decision in sorted(near, key=lambda item: (item[0], item[1]))]


@dataclass(frozen=True)
class SearchStart:
    """What a search of one key starts from, taken from the keys this group decided before it."""

    #: the choice and runner-up of the :data:`SEED_KEYS` decided keys nearest the key, nearest first
    seeds: list[int]
    #: every config those decided keys (all that compare with the key) screened and timed, ascending: compiled in
    #: this process or Triton's cache already, so the first look covers and draws from them before any other
    screened: list[int]


def search_start(decisions: dict[tuple[str, Hashable], Decision], group_name: str, key: Hashable,
                 distance: Callable[[Any, Any], float | None] | None) -> SearchStart:
    """The seeds and the configs screened before of a search of ``key`` (:class:`SearchStart`), from this group's
    decided keys that compare with it (:func:`nearest_decided`)."""
    return start_from(nearest_decided(decisions, group_name, key, distance))


def start_from(near: list[Decision]) -> SearchStart:
    """:func:`search_start` from the decided keys :func:`nearest_decided` gave, nearest first."""
    seeds: list[int] = []
    for decision in near[:SEED_KEYS]:
        ranked = sorted((o for o in decision.outcomes if o.usable), key=lambda o: (o.time, o.index))
        seeds += [o.index for o in ranked[:SEEDS_PER_KEY]]
    screened = {o.index for decision in near for o in decision.outcomes if o.usable}
    return SearchStart(list(dict.fromkeys(seeds)), sorted(screened))


class KeyTuning(Protocol):
    """What a search reads of the tuning of one key (a :class:`~triton_dist_tune.function.tuning.Tuning`)."""

    tuner: TunedFunction
    group: Group
    key: Any
    label: str
    timeout: float

    def todo(self, index: int) -> Todo:
        """(index, config, description) of config ``index``."""
        ...


class Searched:
    """Step 5 by search, for one tuning of a key (see the module docstring)."""

    def __init__(self, tuning: KeyTuning, measurer: Measurer, kept: Sequence[int],
                 earlier: dict[int, dict[str, Any]], compile_stage: Callable[[list[Todo], bool], None]) -> None:
        self.tuning, self.measurer, self.kept = tuning, measurer, list(kept)
        self.earlier, self.compile_stage = earlier, compile_stage
        #: seconds the last stage waited for its compiles (:mod:`~triton_dist_tune.measure.ahead`)
        self.stage_waited = 0.0
        #: configs compiled ahead of their stage (:meth:`_compile_likely`)
        self.ahead: set[int] = set()
        self.record = SearchRecord(len(self.kept))
        #: whether a config's warm-up probe counts as its first screening sample (timed as the samples are)
        self.probes = measurer.probes_are_samples
        #: run once the first stage's compiles are started (a campaign's next key compiled ahead:
        #: :mod:`~triton_dist_tune.function.next_key`)
        self.after_first_stage: Callable[[], None] | None = None

    def _start(self) -> SearchStart:
        """Rank 0's :class:`SearchStart`, or its error (a ``distance`` that returns no number), the same on every
        rank (one exchange); only kept configs."""
        tuning, tuner = self.tuning, self.tuning.tuner
        group = tuning.group

        def rank0() -> list[list[int]]:
            start = search_start(tuner.decisions, group.name, tuning.key, tuner.options.distance)
            return [start.seeds, start.screened]

        sent = from_root(group, rank0, f"{tuning.label} search seeds", timeout=tuning.timeout)
        kept = set(self.kept)

        def kept_only(part: Any) -> list[int]:
            return [i for i in part if isinstance(i, int) and i in kept] if isinstance(part, list) else []

        seeds, screened = sent if isinstance(sent, list) and len(sent) == 2 else ([], [])
        return SearchStart(kept_only(seeds), kept_only(screened))

    def run(self, plan: SearchPlan, final: RacePlan) -> tuple[list[Outcome], Race | None]:
        """Screen the stages, race the finalists; returns every kept config's outcome (unscreened ones as
        ``pruned``, with the reason) and the finalists' race."""
        started = time.monotonic()
        tuning, measurer, log = self.tuning, self.measurer, logs.rank_log()
        pauses = measurer.pauses
        descriptions = tuning.tuner.descriptions
        budget, watch = measurer.budget, measurer.watch
        with breakdown.part("model"):
            start = self._start()
            self.record.seeds = start.seeds
            search = PatternSearch(tuning.tuner.space, self.kept, plan, start.seeds, start.screened)
            batch = search.first()
            self.record.first_screened_before = sum(1 for i in batch if i in search.preferred)
        history: dict[int, list[float] | None] = {}
        outcomes: dict[int, Outcome] = {}
        screen = RacePlan(max_rounds=1, min_rounds=1, seed=plan.seed, budget_s=None)
        deferred: list[int] = []  # configs whose compiles had not ended in their stage: the next new configs'
        left_out: dict[int, None] = {}  # deferred configs left out unscreened: failed, for the search's proposals
        journaled: set[int] = set()  # configs screened from an earlier attempt's journal
        watch.rounds = measurer.journal.stage = SCREENING  # its records kept apart from the finalists' race's
        while batch:
            fresh = [i for i in batch if not take_journaled(self.earlier, i, history, outcomes, measurer, self.probes)]
            journaled.update(i for i in batch if i not in fresh)
            new = [i for i in fresh if i not in history]
            again = [i for i in fresh if i in history]
            if new:
                todo = [tuning.todo(i) for i in new]
                self.compile_stage(todo, False)  # a deferred config is compiling: not compiled again
                self._compile_likely(search, history, new)
                if self.after_first_stage is not None:
                    self.after_first_stage()
                    self.after_first_stage = None
                waited = measurer.compiles.waited
                deferred = []
                for outcome in measurer.lockstep(todo, screen, screen=True):
                    if outcome.error == DEFERRED:  # its compile runs on: screened in a later stage
                        deferred.append(outcome.index)
                        self.record.deferred += 1
                    elif outcome.error == LEFT_OUT:  # the time budget left it unmeasured
                        outcomes[outcome.index] = outcome
                        self.record.left_out += 1
                    else:
                        probe = measurer.per_call.get(outcome.index, 0.0)
                        if self.probes and outcome.usable and probe > 0:  # the warm-up's probe: a sample too
                            history[outcome.index] = [probe]
                        self._screened(outcome, history, outcomes)
                self.stage_waited = measurer.compiles.waited - waited
                if budget.cut or budget.spent:  # the search ends here: no guess is worth its time
                    measurer.compiles.idle.clear()
                with breakdown.part("compile"):  # the guesses the stage's waits left: their compiles start now
                    measurer.compiles.run_idle()
            if again and not budget.cut:  # samples taken again: no compile, no warm-up (each sample settles first)
                for outcome in measurer.lockstep([tuning.todo(i) for i in again], screen, warmed=True):
                    if outcome.error != LEFT_OUT:
                        self._screened(outcome, history, outcomes)
            journaled.difference_update(drop_other_clock(self.earlier, history, outcomes, measurer, tuning.label))
            log.info("%s search stage %d: %d config(s) (%d sampled again), %d measured now; best so far %s%s",
                     tuning.label, len(search.stages), len(batch), len(again), len(fresh), _best(history),
                     f"; deferred while they compile: {' '.join(map(str, deferred))}" if new and deferred else "")
            if (budget.cut or budget.spent) and any(history.values()):
                budget.cut = self.record.cut = True  # the best screened is chosen (agreed: the group's clock)
                break
            with breakdown.part("model"):
                batch = search.next({**history, **left_out}, measurer.probes.indices)
                # nothing else to screen but stragglers (the search may name one again): wait only for one that
                # could still win; the search goes on without those left out
                while deferred and set(batch) <= set(deferred):
                    waiting = self._worth_waiting_for(search, history, deferred, outcomes)
                    left = [i for i in deferred if i not in waiting]
                    left_out.update(dict.fromkeys(left))
                    deferred = waiting
                    if not left or not batch:
                        break
                    search.stages.pop()  # the stage just proposed never runs as proposed
                    batch = search.next({**history, **left_out}, measurer.probes.indices)
            if deferred and (not batch or any(i not in history for i in batch)):  # not a stage of samples again
                batch, deferred = deferred + [i for i in batch if i not in deferred], []
        watch.rounds, measurer.journal.stage, self.record.resumed = "race", "", len(journaled)
        self.record.stages, self.record.resampled, self.record.noise = search.stages, search.resampled, search.noise
        self.record.again = {reason: search.again[reason] for reason in RESAMPLE_REASONS if reason in search.again}
        self.record.probed = len(measurer.probes.indices)
        self.record.paused = measurer.pauses - pauses
        self.record.ahead, self.record.ahead_screened = len(self.ahead), len(self.ahead & set(history))
        self.record.probes = measurer.probes.text() if measurer.probes.ratios else ""
        with breakdown.part("model"):
            finalists = search.finalists(history)
        self.record.finalists = finalists
        race: Race | None = None
        log.info("%s search finalists: %s", tuning.label, " ".join(map(str, finalists)))
        if finalists and not budget.cut:
            # compiled in their stage, unless an earlier attempt screened them
            self.compile_stage([tuning.todo(i) for i in finalists if outcomes[i].resumed], False)
            # warmed up in their stage: each sample settles first
            for outcome in measurer.lockstep([tuning.todo(i) for i in finalists], final, warmed=True):
                if outcome.error != LEFT_OUT:  # a finalist the budget left out keeps its screening
                    outcomes[outcome.index] = outcome
            race = getattr(measurer, "race", None)
        self.record.seconds = time.monotonic() - started
        result = []
        for i in self.kept:
            if i in outcomes:  # (found wrong after its screening: failed, as agreed then, measure/late.py)
                outcome = measurer.late_failed.get(i, outcomes[i])
                if i not in finalists and outcome.state == "measured":
                    outcome = replace(outcome, state="stopped")  # screened, not a finalist: it left the search
                result.append(outcome)
            else:
                result.append(Outcome(i, descriptions[i], "pruned", error="not screened by the search"))
        return result, race  # its summary is logged once the group holds rank 0's (decide.conclude)

    def _worth_waiting_for(self, search: PatternSearch, history: dict[int, list[float] | None], deferred: list[int],
                           outcomes: dict[int, Outcome]) -> list[int]:
        """The deferred configs to screen when the search has nothing else to screen but them: those whose compiles
        have ended (cheap now), and those still compiling that the model does not predict far behind the finalists
        (:func:`contenders`). The others are left out, unscreened. In the README's MoE campaign such a wait was
        the largest of a key: 1.8-3.3 s at 384 tokens in every campaign of ``benchmarks/results/session_h200_18``,
        for a 256 x 256 tile of 4 warps that then read 4.3-17 times the choice, which the search had named again as
        a leader's neighbour (before, only a search that named nothing was checked). Only a rank tuning alone defers
        (:mod:`~triton_dist_tune.measure.warm_order`), so whether a compile has ended, which only this rank knows,
        decides nothing that a group must agree on."""
        compiles = self.measurer.compiles
        compiling = [i for i in deferred if not compiles.done(i)]
        if not compiling:
            return deferred
        could_win = set(contenders(search, history, compiling))
        left = [i for i in compiling if i not in could_win]
        for i in left:
            outcomes[i] = Outcome(i, self.tuning.tuner.descriptions[i], "pruned", error=OUTLASTED)
        self.record.outlasted += len(left)
        if left:
            logs.rank_log().info("%s search: %d config(s) still compiling when nothing else was left to screen, "
                                 "predicted far behind the finalists, left out: %s", self.tuning.label, len(left),
                                 " ".join(map(str, left)))
        return [i for i in deferred if i not in left]

    def _compile_likely(self, search: PatternSearch, history: dict[int, list[float] | None],
                        screening: list[int]) -> None:
        """On one rank, after a stage that waited for its compiles: compile the configs the next stage will likely
        hold, after this stage's (:mod:`~triton_dist_tune.measure.ahead`), from the samples as this stage begins.
        Idle work of the rank (:meth:`~triton_dist_tune.measure.precompile.Compiles.run_idle`): run while the stage
        waits for its compiles, else once it is measured (before the search's next step); on the search's path it
        took 0.9 s of the README's MoE campaign's rank on one H200 host (``benchmarks/stack_sampler.py``)."""
        if self.tuning.group.size != 1 or self.stage_waited < ahead.AHEAD_WAIT_S or not self.measurer.compiles.open:
            return
        known = {i: None if samples is None else list(samples) for i, samples in history.items()}

        def start() -> None:
            with breakdown.part("model"):
                likely = [i for i in ahead.likely_next(search, known, screening) if i not in known]
            if likely:
                self.ahead.update(likely)
                self.compile_stage([self.tuning.todo(i) for i in likely], True)

        self.measurer.compiles.idle.append(start)

    def _screened(self, outcome: Outcome, history: dict[int, list[float] | None],
                  outcomes: dict[int, Outcome]) -> None:
        """Add one screening sample (or a failure) to the config's history; a config sampled again is journaled
        with every sample it has (its time their median), so that a resumed search replays them."""
        index = outcome.index
        if not outcome.usable or outcome.time is None:
            history[index] = None
            outcomes[index] = outcome
            return
        samples = [*(history.get(index) or ()), outcome.time]
        history[index] = samples
        outcomes[index] = outcome
        if len(samples) > 1:
            outcomes[index] = replace(outcome, time=central(samples), samples=len(samples), round_times=samples)
            self.measurer.journal.record(outcomes[index])


def contenders(search: PatternSearch, history: dict[int, list[float] | None], candidates: list[int]) -> list[int]:
    """Which unscreened ``candidates`` could still be finalists: those that the additive model of the screened
    times does not predict over :data:`OUTLASTED_FACTOR` times its own prediction for the slowest of the finalists
    (every candidate when the model cannot be fitted). Measured against the model itself, not against the
    finalists' screened times (the model check's bar, :meth:`~triton_dist_tune.measure.search.PatternSearch.
    predicted_faster`): the model regresses to the space's mean, so it predicts the best configs slower than they
    read, and against their screened times it put half of the configs that then read within 1.02 of their key's
    choice behind the finalists (``benchmarks/straggler_rule.py``)."""
    times = search.posterior(history).times
    ranked, model = search.leaders(times, search.plan.finalists), AdditiveModel(search.grid)
    if not ranked or not model.fit(times):
        return list(candidates)
    bar = max(model.predict(i) for i in ranked) + math.log(OUTLASTED_FACTOR)
    return [i for i in candidates if model.predict(i) <= bar]


def _best(history: dict[int, list[float] | None]) -> str:
    timed = [(central(t), i) for i, t in history.items() if t]
    if not timed:
        return "-"
    t, i = min(timed)
    return f"config {i} at {t:.4f} ms"
