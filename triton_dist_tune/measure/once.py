"""A key whose space holds one config after pruning (the same on every rank: pruning is agreed) is decided without
timing, as ``triton.autotune`` launches a lone config without benchmarking: no warm-up, no probe, no race.

The config still runs once before it is decided, in lock-step with the group and under the watchdog as a warm-up run
is, so that a config that raises (or, with ``ref_prog``, differs from the reference) is failed on every rank alike,
journaled and reported, never cached as good: that run is the checked run where ``ref_prog`` is given, else one run
from the caller's values. Its exchange is the one a config's warm-up ends with, so the path adds none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import WrongResult
from ..records import WARMUP, Outcome

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
