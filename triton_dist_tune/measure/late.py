"""The exchange that ends a config's warm-up (and a cold sample), and the configs found wrong after their own check.

``ref_prog``'s check compares an undeclared argument it writes (a GEMM's ``c``, written in place by a function that
returns nothing) once some config's run on this rank has written it: it is then an output, not ``ref_prog``'s
scratch. A config checked before the first such writer left it as the caller had it (every checked run starts from
the caller's values), so where the caller's values differ from ``ref_prog``'s that config is wrong too: no run
again is needed, its output *was* the caller's values, which the arguments' state keeps a copy of anyway
(:meth:`~triton_dist_tune.measure.trial.Trial.take_late`: no copy more, whatever the buffer's size). Each rank sends
the configs it so found in the next warm-up exchange (:attr:`~.combine.Combined.late`, empty otherwise: no exchange
of its own), and every rank fails them alike, as a failed reference check: journaled ``failed``, left out of the
race (raced already in a pause before the warm-ups' end: failed in that race), never chosen.
"""

from __future__ import annotations

from typing import Any

from ..errors import GroupTimeoutError, RankFailedError
from ..faults.watchdog import exchange_timeout
from ..group.rank_names import rank_name
from ..records import WARMUP, WARMUP_AGAIN, Outcome
from .combine import Combined, combine_phase


class LateChecks:
    """The exchange part of :class:`~triton_dist_tune.measure.lockstep.Measurer` (a mixin: it uses the measurer's
    ``group``, ``plan``, ``trial``, ``label``, its failure board and its journal)."""

    #: configs the group found wrong after their own check (index -> outcome, failed), agreed
    late_failed: dict[int, Outcome]
    #: the configs whose warm-up passed on every rank (index -> description): those a late verdict may fail
    _passed: dict[int, str]

    def _exchange(self, index: int, desc: str, value: tuple[Any, float], error: str | None,
                  phase: str) -> Combined:
        """Share this rank's outcome of a phase (reduced on group rank 0: :func:`combine_phase`), with the configs
        this rank found wrong late; its own failure is journaled first and named in a timeout."""
        if error:
            error = self._post(index, desc, error)
        try:
            combined = self.group.combine((*value, self.trial.take_late()), f"{self.label} config {index} {phase}",
                                          combine_phase, exchange_timeout(self.plan.timeout))
        except RankFailedError:
            raise  # the board names the failure (this rank's or another's): the same text everywhere
        except GroupTimeoutError as exc:
            if not error:
                raise
            self._stop_if_poisoned(index, desc, error)  # this rank's own failure first: a poisoned device says so
            # by its global rank too: the timeout that follows names global ranks, so no line is added saying
            # which global rank a bare group rank is (:mod:`~triton_dist_tune.group.rank_names`)
            raise RankFailedError(f"triton_dist_tune: {rank_name(self.group, self.group.rank)} failed in config "
                                  f"{index} ({desc}): {error}; then: {exc}") from exc
        if phase in (WARMUP, WARMUP_AGAIN):
            if combined.errors:
                self._passed.pop(index, None)
            else:
                self._passed[index] = desc
        self._fail_late(combined.late)
        return combined

    def _fail_late(self, late: dict[int, str]) -> None:
        """Fail the configs of ``late`` (agreed: every rank reads one exchange) whose warm-up passed and that no
        race failed: journaled and logged as any failure, and out of the race they ran in, if any."""
        race = getattr(self, "race", None)
        for index, text in sorted(late.items()):
            if index in self.late_failed or index not in self._passed:
                continue
            entrant = race.entrants.get(index) if race is not None else None
            if entrant is not None and entrant.state == "failed":
                continue
            self.late_failed[index] = self._failed(index, self._passed[index], text)
            if entrant is not None:
                race.fail(index, text)

    def late_left_out(self, per_call: dict[int, float], outcomes: dict[int, Outcome]) -> None:
        """Before a race of the configs warmed up with ``per_call``: those the group found wrong late leave it, and
        their outcomes (``outcomes``, and any earlier one there) say so."""
        for index, outcome in sorted(self.late_failed.items()):
            if index in per_call or (index in outcomes and outcomes[index].state != "failed"):
                per_call.pop(index, None)
                outcomes[index] = outcome


def unwritten_across(reports: list[Any]) -> dict[int, str]:
    """The configs a sharded tuning finds wrong from every rank's :meth:`~.trial.Trial.unwritten_report` (by group
    rank; the same list on every rank, so the same verdicts): a config that passed on its rank leaving an undeclared
    output as the caller had it, where a config measured on another rank wrote that output. Within one rank's share
    :meth:`~.trial.Trial.take_late` finds them already; this is the case of the writer in another rank's share."""
    written = {name for names, _ in reports for name in names}
    found: dict[int, str] = {}
    for rank, (_, left) in enumerate(reports):
        for name, (verdict, indices) in sorted(left.items()):
            if name in written:
                for index in indices:
                    found.setdefault(index, f"rank {rank}: {verdict} (left as the caller had it; found when a "
                                            "config measured on another rank wrote it)")
    return found

