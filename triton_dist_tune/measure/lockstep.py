"""Measuring configs in lock-step with the group: warm-up, then a race of interleaved rounds.

For one key, on every rank, with the configs left after pruning and the journal:

1. **Warm up** each config in the agreed order (under the watchdog, every run started by all ranks together): one
   checked run when ``ref_prog`` is given, ``n_warmup`` runs, and in steady timing one probe sample that gives the
   batch length (:func:`~triton_dist_tune.measure.timing.batch_length`). One exchange then shares "ok or error"
   and the wanted batch length: a config that failed anywhere is failed everywhere, and the batch is the group's
   maximum.
2. **Race** (:mod:`triton_dist_tune.measure.race`): rounds over the configs still running, in an order the group
   shares and changes every round. Each sample (a batch of back-to-back calls in ``steady`` timing, one call after an
   L2 flush in ``cold``) starts right after an exchange, so the ranks start it together, and is followed by one
   exchange of every rank's time (or error). No host synchronize and no exchange happen inside a batch. After each
   round the group removes the configs that are clearly slower than the leader; the race ends when one is
   left, after ``max_rounds`` rounds, or at the time budget.
3. Every sample is preceded by a journal ``started`` record, and every config's final outcome (``failed``,
   ``stopped`` or ``measured``) is journaled as soon as the group knows it, so a restarted job resumes without
   the configs that crashed, hung or failed, and without measuring stopped ones again. A failure whose error says
   the GPU context is unusable (:data:`POISONED`) stops every rank with ``DevicePoisonedError``.

A failure inside a steady batch cannot stop the other ranks mid-batch: when the function has collectives, they
wait in them until their watchdog ends them, and the config is journaled as hung (failures almost always show in
the aligned warm-up runs, which stop every rank at the same run).

Sharded (rank-local functions only): each rank warms up and samples its share of the configs alone, and one
exchange at the end shares every outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DevicePoisonedError, GroupTimeoutError, RankFailedError, WrongResult, describe_error
from ..faults.journal import Journal
from ..faults.watchdog import WATCHDOG, Guard, exchange_timeout
from ..group import codec
from ..group.channel import Board, Group
from ..records import Outcome
from .arguments import ArgumentState
from .guarding import POISONED, Guarding
from .race import Race, RacePlan
from .stats import median, spread
from .timing import PROBE_CALLS, batch_length, time_sample

#: (index, config, description) of a config to measure
Todo = tuple[int, dict[str, Any], str]
#: above this many ranks, an exchange of the race carries only the group's time of a sample (the max over ranks),
#: not every rank's, so that what the store serves stays linear in the group's size
PER_RANK_LIMIT = 64


@codec.record
@dataclass(frozen=True)
class Combined:
    """What one exchange of the warm-up or the race tells every rank (computed once, on group rank 0)."""

    #: "rank r: error; ..." when some rank failed, else None
    errors: str | None
    #: every rank's value, by group rank (only the largest in a group over :data:`PER_RANK_LIMIT` ranks)
    values: list[float]
    #: the largest of the ranks' elapsed racing times
    elapsed: float


def combine_phase(contributions: list[tuple[Any, float]]) -> Combined:
    """Rank 0's reduction of an exchange: each rank sent (its value or its error text, its elapsed seconds)."""
    errors = [value if isinstance(value, str) else None for value, _ in contributions]
    elapsed = max(seconds for _, seconds in contributions)
    if any(errors):
        return Combined(by_rank(errors), [], elapsed)
    values = [float(value) for value, _ in contributions]
    return Combined(None, values if len(values) <= PER_RANK_LIMIT else [max(values)], elapsed)


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


class Reference:
    """The reference result of ``ref_prog``, against which each config's first run is checked."""

    def __init__(self, value: Any, rtol: float | None, atol: float | None) -> None:
        self.value = _detach_copy(value)
        self.rtol, self.atol = rtol, atol

    def mismatch(self, value: Any) -> str | None:
        """None when ``value`` matches the reference, else what differs."""
        import torch

        try:
            torch.testing.assert_close(value, self.value, rtol=self.rtol, atol=self.atol, check_device=False)
        except (AssertionError, TypeError, ValueError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()
            return "wrong result: " + (first[0] if first else type(exc).__name__)
        return None


@dataclass
class Trial:
    """One tuning call: the function, its arguments and everything that runs around each measured call."""

    fn: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]
    clock: Any
    state: ArgumentState | None = None
    pre_hook: Callable[..., Any] | None = None
    post_hook: Callable[..., Any] | None = None
    reference: Reference | None = None

    def call(self, config: dict[str, Any]) -> Any:
        """Prepare the arguments and run once with ``config``; returns the function's result."""
        if self.state is not None:
            self.state.before_run()
        if self.pre_hook is not None:
            self.pre_hook(config, *self.args, **self.kwargs)
        out = self.fn(*self.args, **self.kwargs, **config)
        if self.post_hook is not None:
            self.post_hook(config, *self.args, **self.kwargs)
        return out

    def sample(self, config: dict[str, Any], batch: int, cold: bool) -> float:
        """One timed sample (ms per call); see :func:`~triton_dist_tune.measure.timing.time_sample`."""
        return time_sample(self.clock, lambda: self.call(config), batch, cold)

    def checked_run(self, config: dict[str, Any]) -> str | None:
        """One untimed run compared against the reference; None when it matches."""
        out = self.call(config)
        self.clock.synchronize()
        produced = (out, *self.state.outputs) if self.state is not None else (out,)
        return self.reference.mismatch(produced) if self.reference is not None else None


def by_rank(errors: Sequence[str | None]) -> str:
    """'rank r: error; ...' for the ranks whose entry is an error."""
    return "; ".join(f"rank {r}: {e}" for r, e in enumerate(errors) if e)


class Measurer(Guarding):
    """Runs the measurement of one tuning call of one key (see the module docstring)."""

    def __init__(self, group: Group, trial: Trial, plan: Plan, journal: Journal, log: logging.Logger,
                 label: str, guard: Guard | None = None) -> None:
        self.group, self.trial, self.plan, self.journal, self.log, self.label = group, trial, plan, journal, log, label
        self.cold = plan.timing == "cold"
        #: this tuning's deadline and failure board (see :mod:`~triton_dist_tune.faults.watchdog`)
        self.guard = guard if guard is not None else WATCHDOG.guard(Board(), group.rank)
        self._posted: set[int] = set()
        self._current: tuple[int, str] | None = None  # the config in flight
        self._deferred: str | None = None  # sharded: a poisoning failure, raised on every rank after the exchange

    # -- guarded and aligned runs ------------------------------------------------------------------------------------

    def _aligned(self, runs: Sequence[Callable[[], Any]], index: int | None, phase: str) -> list[Any]:
        """Call each of ``runs`` in turn. With ``index`` (lock-step), the ranks start every run together and all
        stop at the same run once any of them failed (so that nobody is left alone inside a collective of the
        function, and the exchanges stay matched); the failure is then re-raised."""
        if index is None:  # sharded: nobody to align with
            return [run() for run in runs]
        results: list[Any] = []
        failure: Exception | None = None
        for t, run in enumerate(runs):
            stop = self.group.combine(failure is not None, f"{self.label} config {index} {phase} {t}", any,
                                      exchange_timeout(self.plan.timeout))
            if stop:
                break
            try:
                results.append(run())
            except Exception as exc:  # reported after the loop, once every rank has stopped; posted at once
                failure = exc
                self._post(index, self._current[1] if self._current else "", describe_error(exc))
        if failure is not None:
            raise failure
        return results

    # -- warm-up ---------------------------------------------------------------------------------------------------

    def _warmup_runs(self, index: int, config: dict[str, Any]) -> list[Callable[[], Any]]:
        """The runs of a config's warm-up: the checked run, ``n_warmup`` runs, and the steady probe."""
        def checked() -> None:
            wrong = self.trial.checked_run(config)
            if wrong:
                raise WrongResult(wrong)

        def plain() -> None:
            self.trial.call(config)

        def probe() -> float:
            return self.trial.sample(config, PROBE_CALLS, cold=False)

        runs: list[Callable[[], Any]] = [checked] if self.trial.reference is not None else []
        runs += [plain] * self.plan.n_warmup
        if not self.cold and self.plan.batch is None:
            runs.append(probe)
        return runs

    def _warm(self, index: int, config: dict[str, Any], desc: str, aligned: bool) -> tuple[int | None, str | None]:
        """Warm one config up; returns (this rank's wanted batch length, None) or (None, error)."""
        self.journal.append(index, "started", config=desc, phase="warmup")
        runs = self._warmup_runs(index, config)
        results, error = self._guarded(index, desc, "warmup",
                                       lambda: self._aligned(runs, index if aligned else None, "warmup"))
        if error is not None:
            return None, error
        if self.cold or len(results) < len(runs):  # cold, or stopped early by another rank's failure
            return 1, None
        if self.plan.batch is not None:
            return self.plan.batch, None
        return batch_length(results[-1]), None

    # -- lock-step -------------------------------------------------------------------------------------------------

    def lockstep(self, todo: Sequence[Todo]) -> list[Outcome]:
        """Warm up and race ``todo`` with the group; returns one outcome per config (identical on every rank
        except ``own``), in index order."""
        outcomes: dict[int, Outcome] = {}
        batches: dict[int, int] = {}
        for index, config, desc in todo:
            wanted, error = self._warm(index, config, desc, aligned=True)
            combined = self._exchange(index, desc, (error or wanted, 0.0), error, "warmup")
            if combined.errors:
                outcomes[index] = self._failed(index, desc, combined.errors)
            else:
                batches[index] = int(max(combined.values))
        entries = {index: (config, desc) for index, config, desc in todo if index in batches}
        race = Race(sorted(entries), self.plan.race)
        started = time.monotonic()
        elapsed = 0.0
        while entries and not race.finished(elapsed):
            for index in race.order():
                config, desc = entries[index]
                self.journal.append(index, "started", config=desc, phase=f"round {race.rounds}")
                value, error = self._guarded(index, desc, "sample",
                                             lambda c=config, i=index: self.trial.sample(c, batches[i], self.cold))
                combined = self._exchange(index, desc, (error or value, time.monotonic() - started), error,
                                          f"round {race.rounds}")
                elapsed = combined.elapsed  # the group's racing time: every rank reads the same
                if combined.errors:
                    race.fail(index, combined.errors)
                    outcomes[index] = self._failed(index, desc, combined.errors)
                else:
                    race.record(index, combined.values)
            for index in race.end_round():
                outcomes[index] = self._final(race.outcome(index, entries[index][1], self._own))
        for index in race.running:
            outcomes[index] = self._final(race.outcome(index, entries[index][1], self._own))
        self.log.info("%s race: %d round(s) in %.2f s, batches %s", self.label, race.rounds,
                      time.monotonic() - started, batches)
        self.race = race
        return [outcomes[i] for i in sorted(outcomes)]

    @property
    def _own(self) -> int:
        """This rank's position in a sample's values (-1 when a large group sends only the max)."""
        return self.group.rank if self.group.size <= PER_RANK_LIMIT else -1

    def _exchange(self, index: int, desc: str, value: tuple[Any, float], error: str | None,
                  phase: str) -> Combined:
        """Share this rank's outcome of a phase (reduced on group rank 0: :func:`combine_phase`); its own failure
        is journaled first and named in a timeout."""
        if error:
            self._post(index, desc, error)
        try:
            return self.group.combine(value, f"{self.label} config {index} {phase}", combine_phase,
                                      exchange_timeout(self.plan.timeout))
        except RankFailedError:
            raise  # the board names the failure (this rank's or another's): the same text everywhere
        except GroupTimeoutError as exc:
            if not error:
                raise
            raise RankFailedError(f"triton_dist_tune: rank {self.group.rank} failed in config {index} ({desc}): "
                                  f"{error}; then: {exc}") from exc

    # -- sharded ---------------------------------------------------------------------------------------------------

    def sharded(self, todo: Sequence[Todo]) -> list[Outcome]:
        """Measure this rank's share of ``todo`` alone (``max_rounds`` samples each), then share all outcomes."""
        mine = []
        for position, (index, config, desc) in enumerate(todo):
            if position % self.group.size != self.group.rank:
                continue
            if self._deferred is not None or self._peer_poisoned():
                break  # a poisoned context fails everything after it: go and tell the others
            wanted, error = self._warm(index, config, desc, aligned=False)
            samples: list[float] = []
            if error is None:
                batch = wanted or 1
                count = self.plan.race.max_rounds
                samples, error = self._guarded(
                    index, desc, "sharded",
                    lambda c=config, b=batch, n=count: [self.trial.sample(c, b, self.cold) for _ in range(n)])
            if error:
                mine.append(self._failed(index, desc, f"rank {self.group.rank}: {error}", sharded=True))
            else:
                time_ms = median(samples)
                mine.append(self._final(Outcome(index, desc, "measured", time=time_ms, spread=spread(samples),
                                                per_rank=[time_ms], samples=len(samples), own=time_ms,
                                                round_times=samples)))
        share = -(-len(todo) // self.group.size)  # the most configs one rank measures, each under the watchdog
        shared = self.group.allgather(mine, f"{self.label} sharded results",
                                      exchange_timeout(self.plan.timeout) * max(1, share))
        outcomes = sorted((outcome for outcomes in shared for outcome in outcomes), key=lambda o: o.index)
        for outcome in outcomes:  # the same outcomes everywhere: the same DevicePoisonedError on every rank
            self._stop_if_poisoned(outcome.index, outcome.config, outcome.error or "")
        return outcomes

    # -- outcomes --------------------------------------------------------------------------------------------------

    def fail(self, index: int, desc: str, error: str) -> Outcome:
        """Record a config the group already knows to be failed (e.g. it did not compile on some rank)."""
        return self._failed(index, desc, error)

    def _failed(self, index: int, desc: str, text: str, sharded: bool = False) -> Outcome:
        outcome = Outcome(index, desc, "failed", error=text)
        self.journal.record(outcome)
        self.log.info("%s config %d FAILED (%s): %s", self.label, index, text, desc)
        if sharded and POISONED.search(text):
            self._deferred = text  # raised after the exchange of outcomes, on every rank alike
        else:
            self._stop_if_poisoned(index, desc, text)
        return outcome

    def _final(self, outcome: Outcome) -> Outcome:
        """Journal a measured or stopped outcome the group agreed on."""
        self.journal.record(outcome)
        self.log.info("%s config %d %s: own %s ms, group %.4f ms +-%.1f%% over %d sample(s): %s", self.label,
                      outcome.index, outcome.state, f"{outcome.own:.4f}" if outcome.own is not None else "-",
                      outcome.time, 100 * (outcome.spread or 0), outcome.samples, outcome.config)
        return outcome

    def _stop_if_poisoned(self, index: int, desc: str, text: str) -> None:
        """A CUDA error that leaves a context unusable fails every later config on that rank: stop the whole group
        (the failure is journaled) so that a restart resumes without this config."""
        if POISONED.search(text):
            message = (f"{self.label} config {index} ({desc}) left a GPU context unusable ({text}); it is journaled "
                       "as failed: restart the job (e.g. torchrun --max-restarts) to resume without it")
            self.log.error(message)
            raise DevicePoisonedError(message)


def _detach_copy(value: Any) -> Any:
    if hasattr(value, "detach") and hasattr(value, "clone"):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_detach_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _detach_copy(v) for k, v in value.items()}
    return value
