"""Step 5 of a tuning by search, for large spaces: the stages of :class:`~triton_dist_tune.measure.search.
PatternSearch` screened in lock-step, then the race among the finalists.

- **Seeds** (one exchange): group rank 0 names the configs that won or came second for the keys this function
  already decided on this group, nearest keys first; every rank takes rank 0's list.
- **Stages**: each stage's configs not screened yet (by this attempt or an earlier one: the journals' times) are
  compiled ahead (split across the node, as for the exhaustive race: only what the stage measures), warmed up and
  given one screening sample each, in lock-step (:meth:`~triton_dist_tune.measure.lockstep.Measurer.lockstep`
  with a one-round race). A config that fails is failed on every rank and never proposed again.
- **Finalists**: the race of the tuning's plan (interleaved rounds, then the settled block among the leaders: a
  paired shoot-out whose margin and near-tie the decision reports).

Everything the search decides comes from agreed data (the kept configs, the seed, rank 0's seeds, the group's
times), so every rank measures the same configs in the same order. Every screening outcome is journaled as the
race journals its own, so a resumed tuning replays the same stages from the journals' times and measures only the
configs no attempt screened.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..disk import logs
from ..errors import BadInputError
from ..group.agreement import from_root
from ..group.channel import Group
from ..measure import breakdown
from ..measure.budget import LEFT_OUT
from ..measure.lockstep import Measurer, Todo
from ..measure.race import Race, RacePlan
from ..measure.search import PatternSearch, SearchPlan
from ..records import Decision, Outcome
from .policy import numeric_distance
from .tuned import TunedFunction

#: seeds taken from each of the nearest decided keys: its choice and its runner-up
SEEDS_PER_KEY, SEED_KEYS = 2, 4


@dataclass
class SearchRecord:
    """What a search did, for the logs and the decision's record."""

    kept: int
    stages: list[list[int]] = field(default_factory=list)
    #: configs whose screening came from an earlier attempt's journal
    resumed: int = 0
    finalists: list[int] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    seconds: float = 0.0
    #: configs of the stages that the time budget left unmeasured
    left_out: int = 0
    #: True when the time budget ended the screening: the finalists were not raced
    cut: bool = False

    def text(self) -> str:
        """One line: how much of the space was screened."""
        total = sum(len(stage) for stage in self.stages) - self.left_out
        resumed = f" ({self.resumed} from the journal)" if self.resumed else ""
        raced = ("the time budget ended the screening (the best screened chosen)" if self.cut else
                 f"{len(self.finalists)} finalists raced")
        return (f"search: {total} of {self.kept} configs screened{resumed} in {len(self.stages)} stage(s), {raced}, "
                f"{self.seconds:.2f} s")


def nearby_seeds(decisions: dict[tuple[str, Hashable], Decision], group_name: str, key: Hashable,
                 distance: Callable[[Any, Any], float | None] | None) -> list[int]:
    """Config indices to seed a search with: the choice and runner-up of the :data:`SEED_KEYS` decided keys of
    this group nearest ``key`` (by ``distance``, default the numeric one), nearest first. A ``distance`` that raises
    cannot compare the two keys (skipped); one that returns neither a number nor None is a
    :class:`~triton_dist_tune.errors.BadInputError`."""
    measure = distance or numeric_distance
    near: list[tuple[float, str, Decision]] = []
    for (name, other), decision in decisions.items():
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
    seeds: list[int] = []
    for _, _, decision in sorted(near, key=lambda item: (item[0], item[1]))[:SEED_KEYS]:
        ranked = sorted((o for o in decision.outcomes if o.usable), key=lambda o: (o.time, o.index))
        seeds += [o.index for o in ranked[:SEEDS_PER_KEY]]
    return list(dict.fromkeys(seeds))


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
                 earlier: dict[int, dict[str, Any]], compile_stage: Callable[[list[Todo]], None]) -> None:
        self.tuning, self.measurer, self.kept = tuning, measurer, list(kept)
        self.earlier, self.compile_stage = earlier, compile_stage
        self.record = SearchRecord(len(self.kept))

    def _seeds(self) -> list[int]:
        """Rank 0's seeds, or its error (a ``distance`` that returns no number), the same on every rank (one
        exchange)."""
        tuning, tuner = self.tuning, self.tuning.tuner
        group = tuning.group
        seeds = from_root(group, lambda: nearby_seeds(tuner.decisions, group.name, tuning.key, tuner.options.distance),
                          f"{tuning.label} search seeds", timeout=tuning.timeout)
        if not isinstance(seeds, list):
            seeds = []
        kept = set(self.kept)
        return [i for i in seeds if isinstance(i, int) and i in kept]

    def run(self, plan: SearchPlan, final: RacePlan) -> tuple[list[Outcome], Race | None]:
        """Screen the stages, race the finalists; returns every kept config's outcome (unscreened ones as
        ``pruned``, with the reason) and the finalists' race."""
        started = time.monotonic()
        tuning, measurer, log = self.tuning, self.measurer, logs.rank_log()
        descriptions = tuning.tuner.descriptions
        budget, watch = measurer.budget, measurer.watch
        with breakdown.part("model"):
            self.record.seeds = self._seeds()
            search = PatternSearch(tuning.tuner.space, self.kept, plan, self.record.seeds)
            batch = search.first()
        times: dict[int, float | None] = {}
        outcomes: dict[int, Outcome] = {}
        screen = RacePlan(max_rounds=1, min_rounds=1, seed=plan.seed, budget_s=None)
        watch.rounds = "screening"
        while batch:
            fresh = [i for i in batch if not self._known(i, times, outcomes)]
            self.record.resumed += len(batch) - len(fresh)
            if fresh:
                todo = [tuning.todo(i) for i in fresh]
                self.compile_stage(todo)
                for outcome in measurer.lockstep(todo, screen):
                    outcomes[outcome.index] = outcome
                    times[outcome.index] = outcome.time if outcome.usable else None
                    self.record.left_out += outcome.error == LEFT_OUT
            log.info("%s search stage %d: %d config(s), %d screened now; best so far %s", tuning.label,
                     len(search.stages), len(batch), len(fresh), _best(times))
            if (budget.cut or budget.spent) and any(t is not None for t in times.values()):
                budget.cut = self.record.cut = True  # the best screened is chosen (agreed: the group's clock)
                break
            with breakdown.part("model"):
                batch = search.next(times)
        watch.rounds = "race"
        self.record.stages = search.stages
        with breakdown.part("model"):
            finalists = search.finalists(times)
        self.record.finalists = finalists
        race: Race | None = None
        log.info("%s search finalists: %s", tuning.label, " ".join(map(str, finalists)))
        if finalists and not budget.cut:
            # compiled in their stage, unless an earlier attempt screened them
            self.compile_stage([tuning.todo(i) for i in finalists if outcomes[i].resumed])
            for outcome in measurer.lockstep([tuning.todo(i) for i in finalists], final):
                if outcome.error != LEFT_OUT:  # a finalist the budget left out keeps its screening
                    outcomes[outcome.index] = outcome
            race = getattr(measurer, "race", None)
        self.record.seconds = time.monotonic() - started
        result = []
        for i in self.kept:
            if i in outcomes:
                outcome = outcomes[i]
                if i not in finalists and outcome.state == "measured":
                    outcome = replace(outcome, state="stopped")  # screened, not a finalist: it left the search
                result.append(outcome)
            else:
                result.append(Outcome(i, descriptions[i], "pruned", error="not screened by the search"))
        log.info("%s %s", tuning.label, self.record.text())
        return result, race

    def _known(self, index: int, times: dict[int, float | None], outcomes: dict[int, Outcome]) -> bool:
        """Whether an earlier attempt's journal settles ``index``'s screening; records it if so."""
        record = self.earlier.get(index)
        if record is None or record.get("state") not in ("measured", "stopped", "failed"):
            return False
        outcome = Outcome.from_json({**record, "index": index})
        if outcome is None:
            return False
        outcome.resumed = True
        outcomes[index] = outcome
        times[index] = outcome.time if outcome.usable else None
        return True


def _best(times: dict[int, float | None]) -> str:
    timed = [(t, i) for i, t in times.items() if t is not None]
    if not timed:
        return "-"
    t, i = min(timed)
    return f"config {i} at {t:.4f} ms"
