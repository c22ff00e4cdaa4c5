"""Sharded measuring (rank-local functions only): each rank warms up and samples its share of the configs alone, and
one exchange at the end shares every outcome (the last part of :mod:`~triton_dist_tune.measure.lockstep`).

The shares take as long as they take: before the exchange every rank waits while the others show progress (a
:class:`~triton_dist_tune.faults.progress.RoundWatch` on the group: every rank beats in the job's store while it
measures), so a slow but healthy share is waited for, a rank that died ends the others within ``T + max(1, T/10)`` s
of its last beat, and one that leaves with an error says so at once. A group without a key-value store (mpi4py)
waits :meth:`Sharding.share_timeout` instead: the worst case of the slowest share.

A time budget (``budget=``) bounds each share on its rank's own clock (a rank measures alone, so no clock needs
agreeing): a rank measures no further config of its share once its elapsed time plus the time its last config took
reaches the budget, after at least one of its configs measured without failing; the configs left are ``pruned``
("not measured: the time budget was spent"). Whether the tuning was cut is read from the exchanged outcomes (some
config left out anywhere), so every rank marks the same decision cut."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..errors import GroupTimeoutError
from ..faults.progress import RoundWatch
from ..faults.watchdog import exchange_timeout
from ..records import Outcome
from ..stats import median, spread
from . import timing
from .budget import LEFT_OUT
from .late import unwritten_across

#: (index, config, description) of a config to measure
Todo = tuple[int, dict[str, Any], str]


class Sharding:
    """The sharded part of :class:`~triton_dist_tune.measure.lockstep.Measurer` (a mixin: it uses the measurer's
    ``group``, ``plan``, ``trial``, ``cold``, ``label``, ``compiles``, ``budget``, its warm-up and its guards)."""

    #: whether this tuning measures shares alone (``sharded=True``): a hang then likely comes from the option
    sharding = False

    def sharded(self, todo: Sequence[Todo]) -> list[Outcome]:
        """Measure this rank's share of ``todo`` alone (``max_rounds`` samples each), then share all outcomes."""
        self.sharding = True
        with RoundWatch.of_tuning(self.group, self.label, self.plan.timeout, "rank") as watch:
            return self._shared(self._my_share(todo), len(todo), watch)

    def _my_share(self, todo: Sequence[Todo]) -> list[Outcome]:
        """This rank's share of ``todo``, measured alone."""
        mine: list[Outcome] = []
        previous = 0.0  # this rank's time per call of the config it warmed up last (it measures alone)
        last_s = 0.0  # the seconds this rank's last config took (warm-up and samples): the next one's prediction
        for position, (index, config, desc) in enumerate(todo):
            if position % self.group.size != self.group.rank:
                continue
            if self._deferred is not None or self._peer_poisoned():
                break  # a poisoned context fails everything after it: go and tell the others
            if any(o.error is None for o in mine) and self.budget.ends_before_alone(last_s):
                mine.append(self.budget.left_out(index, desc))
                continue
            began = time.monotonic()
            wanted, error = self._warm(index, config, desc, aligned=False, previous_ms=previous)
            previous = wanted or previous
            samples: list[float] = []
            if error is None:
                count = self.plan.race.max_rounds
                steady = timing.steady_calls(self.trial.host_counts, wanted or 0.0, False, True, self.plan.batch)
                sample = ((lambda c=config: self.trial.cold(c)) if self.cold
                          else (lambda c=config, s=steady: self.trial.steady_now(c, s)))
                samples, error = self._guarded(index, desc, "sharded",
                                               lambda f=sample, n=count: [f() for _ in range(n)])
            if error:
                mine.append(self._failed(index, desc, f"rank {self.group.rank}: {error}", sharded=True))
            else:
                time_ms = median(samples)
                mine.append(self._final(Outcome(index, desc, "measured", time=time_ms, spread=spread(samples),
                                                per_rank=[time_ms], samples=len(samples), own=time_ms,
                                                round_times=samples), share=True))
            last_s = time.monotonic() - began
            for earlier, text in self.trial.take_late().items():  # found wrong after its check (:mod:`~.late`): this
                for k, outcome in enumerate(mine):  # rank's own verdict, shared with its outcomes
                    if outcome.index == earlier and outcome.state != "failed":
                        mine[k] = self._failed(earlier, outcome.config, f"rank {self.group.rank}: {text}", sharded=True)
        return mine

    def _shared(self, mine: list[Outcome], configs: int, watch: RoundWatch) -> list[Outcome]:
        """Every rank's outcomes, once every rank has measured its share (``configs``: how many in all)."""
        what = f"{self.label} sharded results"
        try:
            share = -(-configs // self.group.size)  # the most configs one rank measures
            shared = self.group.allgather((mine, self.trial.unwritten_report()), what,
                                          watch.arrive(0, what, self.share_timeout(share)))
            watch.passed(0)
        except GroupTimeoutError:
            if self._deferred is None:
                raise
            # this rank knows its own failure: it raises that (as its peers do from the exchanged outcomes), not
            # what the exchange met after a peer ended (the store's host gone with it)
            poisoned = next(o for o in mine if o.error == self._deferred)
            self._stop_if_poisoned(poisoned.index, poisoned.config, self._deferred)
            raise
        outcomes = sorted((outcome for outcomes, _ in shared for outcome in outcomes), key=lambda o: o.index)
        late = unwritten_across([report for _, report in shared])  # (the same on every rank: :mod:`~.late`)
        own = {o.index for o in mine}
        for k, outcome in enumerate(outcomes):
            if outcome.index in late and outcome.state != "failed":  # journaled by the rank that measured it
                text = late[outcome.index]
                outcomes[k] = (self._failed(outcome.index, outcome.config, text, sharded=True) if outcome.index in own
                               else Outcome(outcome.index, outcome.config, "failed", error=text))
        left_out = any(o.state == "pruned" and o.error == LEFT_OUT for o in outcomes)  # the same on every rank
        self.budget.cut = self.budget.cut or left_out
        for outcome in outcomes:  # the same outcomes everywhere: the same DevicePoisonedError on every rank
            self._stop_if_poisoned(outcome.index, outcome.config, outcome.error or "")
        return outcomes

    def share_timeout(self, share: int) -> float:
        """How long a rank without a progress watch (mpi4py) waits at the exchange of sharded results for the
        slowest rank's ``share`` configs: each has two phases under the watchdog (its warm-up and its samples, each
        up to the timeout ``T``) and, when compiling ahead, a wait for its compile (up to ``T`` too):
        ``exchange_timeout(T)`` for each."""
        phases = 3 if self.compiles.active else 2
        return exchange_timeout(self.plan.timeout) * phases * max(1, share)
