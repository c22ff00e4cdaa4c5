"""Which of a track's configs are warmed up and raced, stage by stage (the same on every rank).

A space of few configs has one stage: every config the pruning keeps races once (the final race). A large one
(:func:`~triton_dist_tune.measure.search.search_applies`) is searched (:mod:`~triton_dist_tune.measure.search`): each
stage's configs are warmed up and screened by a one-round race, the search picks the next stage from the times so
far, and when it has none its finalists race afresh (the final race). The search starts from seeds: the choices of
nearby keys the group decided, then the configs the kernel's ``perf_model`` estimates fastest
(:func:`estimated_best`). The :class:`~triton_dist_tune.contextual.schedule.Track` keeps the times; a
:class:`Stages` only says which configs come next.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..measure.race import RacePlan
from ..measure.search import PatternSearch, SearchPlan, search_applies
from .tracks import TrackInfo

#: the share of a call's ``max_runs`` a search's screening may take (the finalists' race takes the rest)
SEARCH_SHARE_OF_RUNS = 0.6
#: configs the kernel's ``perf_model`` estimates fastest that seed a search, after the nearby keys' choices
ESTIMATED_SEEDS = 4


class Stages:
    """The stages of one track's configs: ``batch`` holds the configs of the current stage, ``final`` says whether
    its race decides (the only stage of a small space, or a search's finalists)."""

    def __init__(self, label: str, order: list[int], params: Sequence[dict[str, Any]] | None, mode: str,
                 n_warmup: int, max_runs: int, seeds: Sequence[int]) -> None:
        self.label = label
        self.search: PatternSearch | None = None
        self.batch: list[int] = order
        self.final = True
        #: the stage whose configs were last compiled ahead (:mod:`~.compiling`)
        self.compiled: tuple[int, bool] | None = None
        if params and search_applies(mode, len(order)):
            # the search's screening fits in the call's runs: each config takes n_warmup + 1 steps
            budget = max(16, int(SEARCH_SHARE_OF_RUNS * max_runs) // (n_warmup + 1))
            # one screening sample per config: a second one costs runs of the call, which its cap counts
            plan = SearchPlan(seed=label, max_measured=budget, max_samples=1)
            self.search = PatternSearch(params, order, plan, seeds)
            self.batch, self.final = self.search.first(), False

    def stage(self) -> tuple[int, bool]:
        """(the search's stages so far, whether the finalists race): changes when a new stage begins."""
        return (len(self.search.stages) if self.search is not None else 0), self.final

    def race_plan(self, n_repeat: int) -> RacePlan:
        """The race of the current stage: ``n_repeat`` rounds for the final race, one round to screen a stage; its
        seed names the stage, so each stage's order is shuffled afresh, alike on every rank."""
        rounds = max(1, n_repeat) if self.final else 1
        stage = "" if self.search is None else f"/stage{len(self.search.stages)}{'/final' if self.final else ''}"
        return RacePlan(max_rounds=rounds, seed=self.label + stage)

    def next(self, history: Mapping[int, float | None]) -> list[int]:
        """A screening stage is over (``history``: every config's time so far, None for a failed one): the next
        stage's configs, else the finalists (then :attr:`final` is true); empty when no config is left.

        A search ends only on evidence: while no config has a time, its next stage is untried configs."""
        assert self.search is not None
        batch = self.search.next(history)
        if not batch:
            batch, self.final = self.search.finalists(history), True
        self.batch = batch
        return batch


def estimated_best(infos: Mapping[int, TrackInfo], order: list[int]) -> list[int]:
    """The :data:`ESTIMATED_SEEDS` configs of ``order`` the kernel's ``perf_model`` estimates fastest (the largest
    estimate over ranks), as seeds of a search; none without a perf model."""
    parts = [info.pruning for _, info in sorted(infos.items())]
    if not parts or any(p is None or p[1] is None for p in parts):
        return []
    estimates = {i: max(float(p[1][i]) for p in parts) for i in order if all(i in p[1] for p in parts)}
    return sorted(estimates, key=lambda i: (estimates[i], i))[:ESTIMATED_SEEDS]
