"""The time bound of one tuning (``autotune(budget=s)``), read from the group's agreed clock.

The budget counts from the start of the tuning of the key (the ``seconds`` its decision reports). Every exchange
of the measuring (each config's warm-up, each round or settled block of the race, each stage of a search) carries
each rank's elapsed seconds, and the group's maximum is the agreed elapsed time (:attr:`Budget.elapsed`): every
rank reads the same value at the same step, so every rank cuts at the same step, without an exchange of its own.

At the bound the tuning ends with the best config measured so far (the decision is ``cut``, recorded in the disk
cache as provisional and tuned again by the next job):

- **warm-ups** stop once the time spent plus one screening round of the configs warmed so far (predicted from the
  group's probes) reaches the budget (after at least one config warmed up without failing: a choice needs a time);
  the configs left are ``pruned`` with the reason;
- **the race** ends after the round (or the block) in which the budget is spent, once every config in it has a
  sample, and a settled block runs only the rounds its predicted length leaves time for (at least one; its leaders'
  output placements are captured for those rounds alone: :meth:`~.sampling.Sampling.step_rounds`);
- **a search** screens no further stage once the budget is spent (and some config has a time), and races no
  finalist: the best screened config is chosen.

- **the compile pass** of a stage (or of the exhaustive race's configs) runs no further config once the group's
  clock says the budget is spent (its exchange, and each config's aligned run, carry the clock: :func:`clocked`);
  the configs it did not reach compile in their own warm-up, if the budget leaves them one.

- **a sharded share** (each rank measuring its configs alone) measures no further config once this rank's own
  clock plus its last config's seconds reaches the budget (:mod:`~triton_dist_tune.measure.sharded`).

A single warm-up run or sample that outlasts the budget is not interrupted: the bound is checked between them.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..records import Outcome

if TYPE_CHECKING:
    from ..group.channel import Group

#: the reason given for the configs the budget left unmeasured
LEFT_OUT = "not measured: the time budget was spent"


@dataclass
class Budget:
    """One tuning's time budget and the group's agreed elapsed time (see the module docstring)."""

    #: seconds (None: no bound)
    seconds: float | None = None
    #: when the tuning began (``time.monotonic``)
    began: float = field(default_factory=time.monotonic)
    #: the group's elapsed seconds at the last exchange (the max over ranks: the same on every rank)
    elapsed: float = 0.0
    #: True once the budget ended some phase early: the decision is a cut
    cut: bool = False

    @property
    def bounded(self) -> bool:
        """Whether there is a budget (``seconds`` is not None)."""
        return self.seconds is not None

    def now(self) -> float:
        """This rank's elapsed seconds, sent in each exchange."""
        return time.monotonic() - self.began

    def agreed(self, elapsed: float) -> None:
        """Take in the group's elapsed seconds from an exchange."""
        self.elapsed = max(self.elapsed, elapsed)

    @property
    def spent(self) -> bool:
        """Whether the agreed elapsed time has reached the budget."""
        return self.seconds is not None and self.elapsed >= self.seconds

    def ends_before(self, seconds: float) -> bool:
        """Whether a step predicted to take ``seconds`` would end past the budget (the agreed elapsed time plus it)."""
        return self.seconds is not None and self.elapsed + seconds >= self.seconds

    def ends_before_alone(self, seconds: float) -> bool:
        """:meth:`ends_before` on this rank's own clock: for a rank that measures alone (sharded shares)."""
        return self.seconds is not None and self.now() + seconds >= self.seconds

    def rounds(self, wanted: int, round_s: float) -> int:
        """How many of ``wanted`` rounds of ``round_s`` seconds each fit in the time left (at least one)."""
        if self.seconds is None or round_s <= 0:
            return wanted
        return max(1, min(wanted, math.floor((self.seconds - self.elapsed) / round_s)))

    def left_out(self, index: int, description: str) -> Outcome:
        """The outcome of a config the budget left unmeasured; marks the cut."""
        self.cut = True
        return Outcome(index, description, "pruned", error=LEFT_OUT)


def clocked(group: Group, budget: Budget, value: Any, what: str, reduce: Callable[[list[Any]], Any],
            timeout: float | None) -> Any:
    """``group.combine(value, what, reduce, timeout)``; under a time budget the exchange also carries each rank's
    elapsed seconds, and ``budget`` takes in the group's (so that a step between exchanges reads the agreed clock).
    Every rank of a tuning has the same budget, so every rank sends the same shape."""
    if not budget.bounded:
        return group.combine(value, what, reduce, timeout)
    result, elapsed = group.combine((value, budget.now()), what, functools.partial(_with_clock, reduce), timeout)
    budget.agreed(elapsed)
    return result


def _with_clock(reduce: Callable[[list[Any]], Any], contributions: list[tuple[Any, float]]) -> list[Any]:
    """Rank 0's reduction of a :func:`clocked` exchange: [``reduce`` of the values, the largest elapsed seconds]."""
    return [reduce([value for value, _ in contributions]), max(float(seconds) for _, seconds in contributions)]
