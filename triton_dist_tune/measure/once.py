"""A key whose space holds one config after pruning (the same on every rank: pruning is agreed) is decided without
timing, as ``triton.autotune`` launches a lone config without benchmarking: no warm-up, no probe, no race.

The config still runs once before it is decided, in lock-step with the group and under the watchdog as a warm-up run
is, so that a config that raises (or, with ``ref_prog``, differs from the reference) is failed on every rank alike,
journaled and reported, never cached as good: that run is the checked run where ``ref_prog`` is given, else one run
from the caller's values. Its exchange is the one a config's warm-up ends with, so the path adds none.

Replicas tuned as one (``autotune_replicas``, :mod:`~triton_dist_tune.measure.replicas`) take the same decision:
every replica runs the config once in its own group (it is every replica's share), then one exchange across the
replicas makes its outcome theirs: failed on every rank of every replica where it failed on any (the error names
each replica it failed on), else chosen untimed on all (:meth:`Once.once_across`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import WrongResult
from ..faults.progress import RoundWatch
from ..faults.watchdog import exchange_timeout
from ..group.channel import Group
from ..records import WARMUP, Decision, Outcome

#: (index, config, description) of a config to measure
Todo = tuple[int, dict[str, Any], str]


class Once:
    """The one-config part of :class:`~triton_dist_tune.measure.lockstep.Measurer` (a mixin: it uses the measurer's
    ``trial``, ``watch``, ``budget``, its guards and its exchanges)."""

    def measure(self, todo: Sequence[Todo], kept: int, sharded: bool, precompile: Callable[[], None]) -> list[Outcome]:
        """Measure ``todo`` (of ``kept`` configs pruning kept): the only one kept run once (:meth:`once`), with
        nothing compiled ahead; else compiled ahead (``precompile``) and measured sharded or in lock-step."""
        if kept == 1:
            return [self.once(item) for item in todo]
        precompile()
        return self.sharded(todo) if sharded else self.lockstep(todo)

    def once(self, item: Todo) -> Outcome:
        """Run the only config of the key once with the group, untimed; its outcome, the same on every rank: failed
        (as a failed warm-up), or measured with no time (``untimed``)."""
        index, config, desc = item
        trial = self.trial

        def run() -> None:
            if trial.reference is None:
                trial.call(config, exact=True)  # from the caller's values: what the final call starts from
            elif wrong := trial.checked_run(config):
                raise WrongResult(wrong)

        self.watch.enter("warmup")
        try:
            self.started(index, desc, WARMUP)
            calls = trial.calls
            _, error = self._guarded(index, desc, WARMUP, lambda: self._aligned([run], index, WARMUP),
                                     step=f"config {index} {WARMUP}")
            self.watch.launched(index, trial.calls - calls)
            combined = self._exchange(index, desc, (error or 0.0, self.budget.now()), error, WARMUP)
        finally:
            self.watch.leave()
        self.budget.agreed(combined.elapsed)
        if combined.errors:
            return self._failed(index, desc, combined.errors)
        self.log.info("%s config %d ran once, untimed: the only config of the key's space after pruning: %s",
                      self.label, index, desc)
        return Outcome(index, desc, "measured", untimed=True)

    def once_across(self, todo: Sequence[Todo], replicas: Group, watch: RoundWatch, label: str,
                    timeout: float) -> list[Outcome]:
        """Replicas: :meth:`once` on this replica's group for ``todo`` (the lone config, the same on every replica,
        or nothing where an earlier attempt's journals settled it), then the outcomes of every replica as one, the
        same on every rank of every replica (:func:`_over_replicas`), and the replicas' budget clock (the latest)."""
        mine = [self.once(item) for item in todo]
        what = f"{label} the only config across replicas"
        deadline = watch.arrive(0, what, exchange_timeout(timeout))
        outcomes, elapsed = replicas.combine((mine, self.budget.elapsed), what, _over_replicas, deadline)
        watch.passed(0)
        self.budget.agreed(elapsed)
        return outcomes


def _over_replicas(contributions: list[tuple[list[Outcome], float]]) -> list[Any]:
    """Each replica's outcomes of the lone config as one: failed where it failed on some replica (each such
    replica's error, named), else replica 0's; and the latest of the replicas' budget clocks."""
    merged = []
    for position, outcome in enumerate(contributions[0][0]):
        failures = [(j, table[position]) for j, (table, _) in enumerate(contributions)
                    if table[position].state == "failed"]
        if failures:
            errors = "; ".join(f"replica {j}: {o.error or '?'}" for j, o in failures)
            outcome = Outcome(outcome.index, outcome.config, "failed", error=errors)
        merged.append(outcome)
    return [merged, max(float(elapsed) for _, elapsed in contributions)]


def untimed_decision(outcomes: Sequence[Outcome], timing: str) -> Decision | None:
    """The decision of a key whose only config ran once, untimed (:meth:`Once.once`): that config, with no time or
    margin; None where no outcome is such (it failed, or an earlier attempt's journals settled it)."""
    once = next((o for o in outcomes if o.untimed and o.state == "measured"), None)
    if once is None:
        return None
    return Decision(once.index, once.config, float("nan"), None, False, None, list(outcomes), timing, 0,
                    untimed=True)
