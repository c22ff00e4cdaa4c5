"""A steady race's steps: the samples of one round, or of the whole settled block, back to back with no host
synchronize and no exchange between them; then one synchronize and one exchange of every time (see
:mod:`~triton_dist_tune.measure.lockstep`, step 2), and a make-up step for the samples a failing rank left missing."""

from __future__ import annotations

from typing import Any

from ..errors import GroupTimeoutError, RankFailedError
from ..faults.watchdog import exchange_timeout
from . import timing
from .combine import Combined, combine_round
from .race import Race


class SteadySteps:
    """The steady steps of :class:`~triton_dist_tune.measure.lockstep.Measurer`. Uses the measurer's ``trial``,
    ``plan``, ``group``, ``budget``, ``watch``, ``log``, ``label``, ``started``, ``_guarded``, ``_sampler`` and
    ``step_rounds``."""

    def _steady_step(self, race: Race, entries: dict[int, tuple[dict[str, Any], str]], per_call: dict[int, float],
                     orders: list[list[int]], wanted: set[tuple[int, int]],
                     phase: str) -> list[tuple[tuple[int, int], Combined]]:
        """The samples of ``orders`` (one order per round of the step) that are ``wanted`` ((round in the step, index)
        each), every sample back to back (no synchronize, no exchange between them; a failing sample ends this rank's
        step), then one synchronize and one exchange of every time; returns the group's (key, sample) of every sample
        each rank took or some rank failed (:func:`combine_round`)."""
        mine: list[tuple[tuple[int, int], Any]] = []
        tokens: list[tuple[tuple[int, int], Any, timing.Steady, int]] = []
        failed = False
        for r, order in enumerate(orders):
            for index in order:
                if (r, index) not in wanted:
                    continue
                config, desc = entries[index]
                first = not tokens and timing.may_have_idled(self.trial.clock, self.group.size)
                steady, sample, per = self._sampler(index, config, per_call[index], race.settling, first,
                                                    race.placement(r))
                self.started(index, desc, f"round {race.rounds + r}")
                calls = steady.settle + steady.span + steady.queued  # unstuck, the sample ends in a few times this
                patience = 4 * calls * per * per_call[index] / 1e3 + steady.hold_ms / 1e3
                token, error = self._guarded(index, desc, "sample", sample, sync=False, step=phase,
                                             patience=patience)
                if error is not None:  # posted on the failure board by the guard
                    mine.append(((r, index), error))
                    failed = True
                    break
                tokens.append(((r, index), token, steady, per))
                self.watch.launched(index, calls * per)
            if failed:
                break
        if tokens:
            last = tokens[-1][0][1]
            _, error = self._guarded(last, entries[last][1], "sample", lambda: None,  # the step's one synchronize
                                     step=phase)
            for key, token, steady, per in tokens:
                mine.append((key, error or timing.read_sample(self.trial.clock, token, steady) / per))
                if error is None:
                    self.watch.timed(key[1], mine[-1][1])
                    self.watch.sampled(mine[-1][1] * (steady.settle + steady.span + steady.queued) * per / 1e3)
        try:  # every rank waits as long as the whole step may take (a rank that stopped early too)
            return self.group.combine((mine, self.budget.now()), f"{self.label} {phase}", combine_round,
                                      exchange_timeout(self.plan.timeout * max(1, len(wanted))))
        except RankFailedError:
            raise  # the board names the failure (this rank's or another's): the same text everywhere
        except GroupTimeoutError as exc:
            failures = "; ".join(f"config {key[1]}: {v}" for key, v in mine if isinstance(v, str))
            if not failures:
                raise
            raise RankFailedError(f"triton_dist_tune: rank {self.group.rank} failed in {phase} ({failures}); "
                                  f"then: {exc}") from exc

    def _steady_rounds(self, race: Race, entries: dict[int, tuple[dict[str, Any], str]],
                       per_call: dict[int, float], block: int | None = None) -> list[list[tuple[int, Combined]]]:
        """One steady step (:meth:`_steady_step`) of ``block`` rounds (default ``step_rounds``): a screening round, or
        the whole settled block (:meth:`Race.block` rounds, as many as the time budget affords: the rounds its
        leaders were placed for); returns each round's (index, group sample). A rank whose sample
        fails ends its step there, so the samples after it in the step's order are missing on that rank: missing,
        not failed (no error of their own). They are taken again, before the round closes, in a make-up step over
        just those samples (a step name of its own, so that the first failure's report ends no rank inside it); a
        make-up step loses samples only when one more config fails, so the make-ups end."""
        if block is None:
            block = self.step_rounds(race, entries, per_call)
        orders = [race.order(ahead=r) for r in range(block)]
        wanted = {(r, index) for r, order in enumerate(orders) for index in order}
        results: dict[tuple[int, int], Combined] = {}
        makeup = 0
        while wanted:
            phase = f"round {race.rounds}" + (f" make-up {makeup}" if makeup else "")
            got = self._steady_step(race, entries, per_call, orders, wanted, phase)
            results.update(got)
            failed = {index for (_, index), combined in got if combined.errors}
            if not failed:  # only a failure ends a rank's step early: nothing can be missing
                break
            wanted = {key for key in wanted if key not in results and key[1] not in failed}
            if wanted:
                makeup += 1
                self.log.info("%s %s: %d sample(s) missing on some rank after a failure: taken again", self.label,
                              phase, len(wanted))
        return [[(index, results[(r, index)]) for index in order if (r, index) in results]
                for r, order in enumerate(orders)]
