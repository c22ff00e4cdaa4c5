"""The standings of a race: how its configs' samples rank them, and who wins (:mod:`~.race` runs the rounds).

Every rank holds the same samples, so every ranking below is identical on every rank. A config's time is the median
of its deciding samples (its settled ones when it has any), or under noise the least of all its samples
(:meth:`Standings.location`); settled leaders are ranked drift-free, with the two-level and placement rules of a race
timed on the device (see "The end", "Two levels" and "Placements" in :mod:`~.race`), and in a heavy race (sifted or
not) they are ranked so under noise too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..records import Outcome
from ..stats import INDIFFERENCE, clearly_slower, median, paired_ratios, spread
from .levels import placement_level, slower_level
from .noise import NOISY, spread_of_runs


class RankingRules(Protocol):
    """What the standings read of a race's plan (:class:`~.race.RacePlan`)."""

    #: rank a settled leader whose samples hold a slower level too by what its calls average
    levels: bool
    #: output placements each settled leader is timed at, in turn
    placements: int


@dataclass
class Entrant:
    """One config's samples in the race."""

    index: int
    #: the group sample (MAX over ranks, ms per call) of each round, None for rounds it did not run in
    samples: list[float | None] = field(default_factory=list)
    #: each rank's own time per round it ran in, by rank (a contextual rank that met the key late is missing from
    #: the rounds before it came)
    per_rank: list[dict[int, float]] = field(default_factory=list)
    #: the position in the tuning's measurement order of each of its samples
    positions: list[int] = field(default_factory=list)
    #: the group samples of the settled rounds (a subset of ``samples``)
    settled: list[float] = field(default_factory=list)
    state: str = "running"
    error: str | None = None

    def timed(self) -> list[float]:
        return [s for s in self.samples if s is not None]

    def deciding(self) -> list[float]:
        """The samples its time is the median of: the settled ones when it has any, else all."""
        return self.settled or self.timed()

    def time(self) -> float:
        return median(self.deciding())


class Standings:
    """The ranking half of a race (:class:`~.race.Race` holds it and runs the rounds): the entrants' samples, and
    the times, leaders, winner and outcomes they make."""

    plan: RankingRules
    entrants: dict[int, Entrant]
    rounds: int
    #: the round the settled rounds began with (None: still screening)
    settled_from: int | None
    position: int
    _noisy: tuple[tuple[int, int], bool] | None
    #: the race's noise is judged on its settled leaders' drift-free samples (a heavy race, sifted or not:
    #: :mod:`~.race`)
    settled_noise: bool = False

    @property
    def running(self) -> list[int]:
        """Indices still in the race, ascending."""
        return [i for i, e in sorted(self.entrants.items()) if e.state == "running"]

    def placement(self, ahead: int = 0) -> int:
        """The output placement of the samples of the round ``ahead`` rounds from now (negative: one before it):
        ``j mod placements`` for the ``j``-th settled round (counted from 0), 0 in the screening (see "Placements"
        in :mod:`~.race`)."""
        if self.settled_from is None:
            return 0
        return (self.rounds + ahead - self.settled_from) % self.plan.placements

    def location(self) -> Callable[[Sequence[float]], float]:
        """How a config's samples make its time: their median, or, once the race's samples read further apart than
        :data:`~.noise.NOISY` per sample (measured from every config's consecutive samples), the least of them
        (heavy noise is one-sided: see :data:`~.noise.NOISY`); the leaders then get ``final_top_fast`` places in
        the settled block, and no near-tie blocks (more blocks cannot settle what the noise hides). In a heavy race
        (:attr:`settled_noise`, sifted or not) the noise is that of the settled leaders' drift-free samples once they
        have two each (:meth:`_noise_runs`)."""
        stamp = (self.position, self.rounds)
        if self._noisy is None or self._noisy[0] != stamp:
            noise = spread_of_runs(self._noise_runs(), 0.0)
            self._noisy = (stamp, noise is not None and noise.sigma > NOISY)
        return min if self._noisy[1] else median

    @property
    def noisy(self) -> bool:
        """Whether the race's samples read noisy now: its times are then least samples (:meth:`location`)."""
        return self.location() is not median

    def _noise_runs(self) -> list[list[float]]:
        """The runs of samples the race's noise is measured from: every config's samples, or with
        :attr:`settled_noise` the settled leaders' samples relative to their round's median leader sample, once two
        leaders have two. At the power limit a device's clock swings by 10% and more from one settled round to the
        next, alike for every leader (on one H200 a race of 1.6 ms GEMMs read noisy from its raw samples and chose by
        a screening sample the settled rounds had ranked 4-8% behind, ``results/session_h200_46``); the drift-free
        ratios take that swing out, as the ranking does, and keep what differs between leaders."""
        if self.settled_noise:
            relative = [self._relative(i) for i in self.running if self.entrants[i].settled]
            if sum(len(run) >= 2 for run in relative) >= 2:
                return relative
        return [e.timed() for _, e in sorted(self.entrants.items()) if e.state != "failed"]

    def _time(self, index: int) -> float:
        """A config's own time: the median of its deciding samples, or under noise the least of all its samples,
        settled or not (:meth:`location`; a heavy race's settled leader is ranked drift-free: :meth:`_rank_key`)."""
        entrant = self.entrants[index]
        return entrant.time() if self.location() is median else min(entrant.timed())

    def _rank_key(self, index: int, levels: bool = True) -> tuple[float, int]:
        """(A config's time, its index): a settled leader's drift-free time, else :meth:`_time`. Under noise a
        settled leader's drift-free time counts only in a heavy race (:attr:`settled_noise`), whose noise is the
        power limiter's clock swing, two-sided and alike for every leader of a round: the median of its drift-free
        ratios takes it out, where its least settled sample is the one a fast clock gave (on one H200, a 64x256
        GEMM tile 1.10x the best alone won by one settled sample 9% under its others; replayed on the 40 recorded
        sifted tunings, 39 chose within 1.01 against 38; ``results/session_h200_47``). Elsewhere the noise is the
        host's, one-sided, and a ratio to the round's other leaders carries their delays."""
        drift_free = (self._drift_free(index, levels)
                      if self.location() is median or (self.settled_noise and self.entrants[index].settled) else None)
        return (drift_free if drift_free is not None else self._time(index)), index

    def _relative(self, index: int) -> list[float]:
        """A leader's settled samples relative to their round's median leader sample (a drift of the machine
        between rounds cancels out); empty for a config without settled samples."""
        return [ratio for _, ratio in self._placed(index)]

    def _placed(self, index: int, others_only: bool = False) -> list[tuple[int, float]]:
        """:meth:`_relative`'s ratios (with ``others_only``: to the median of the round's other leaders), each with
        its round's output placement (:meth:`placement`)."""
        entrant = self.entrants[index]
        if self.settled_from is None or not entrant.settled:
            return []
        # the leaders still running, timed in every settled round: each round's median is of the same configs
        leaders = [e for e in self.entrants.values() if e.settled and e.state == "running"
                   and not (others_only and e is entrant)]
        placed = []
        for r in range(self.settled_from, self.rounds):
            round_ = [e.samples[r] for e in leaders if r < len(e.samples) and e.samples[r] is not None]
            mine = entrant.samples[r] if r < len(entrant.samples) else None
            if mine is not None and round_:
                placed.append((self.placement(r - self.rounds), mine / median(round_)))
        return placed

    def _drift_free(self, index: int, levels: bool = True) -> float | None:
        """A leader's time over the settled rounds with the machine's drift between rounds taken out: the median
        of :meth:`_relative`, times its :meth:`_slower_level` (1 unless the plan's and the call's ``levels`` and its
        samples hold a slower level too), times the median of every leader's settled samples (so that it reads in
        ms); None for a config without settled samples."""
        relative = self._relative(index)
        if not relative:
            return None
        leaders = [e for e in self.entrants.values() if e.settled and e.state == "running"] or [self.entrants[index]]
        level = self._slower_level(index) if self.plan.levels and levels else 1.0
        return median(relative) * level * median([s for e in leaders for s in e.settled])

    def slower_levels(self) -> dict[int, float]:
        """The settled leaders ranked by their mean, their samples holding a slower level or placement too
        (``levels``): {index: the factor over their median}, by index (for the rank's log). Wherever
        :meth:`_rank_key` ranks them drift-free: in a quiet race, and under noise in a heavy one
        (:attr:`settled_noise`)."""
        if not self.plan.levels or self.settled_from is None or (self.location() is not median
                                                                  and not self.settled_noise):
            return {}
        leaders = [i for i, e in sorted(self.entrants.items()) if e.settled and e.state != "failed"]
        found = {i: self._slower_level(i) for i in leaders}
        return {i: f for i, f in found.items() if f > 1}

    def _slower_level(self, index: int) -> float:
        """:func:`~.levels.slower_level` of a settled leader, or its :func:`~.levels.placement_level` where that is
        larger, judged against the median of the *other* leaders of each round: against all of them, a config whose
        slower level lands in the middle of its round is the round's median, and reads 1 there."""
        placed = self._placed(index, others_only=True)
        return max(slower_level([ratio for _, ratio in placed]), placement_level(placed))

    def leader(self, among: list[int] | None = None, levels: bool = True) -> int:
        """The config with the least median among ``among`` (default: those still running); ``levels`` False: with
        no leader ranked by its mean."""
        return min(among if among is not None else self.running, key=lambda i: self._rank_key(i, levels))

    def winner(self, levels: bool = True) -> int | None:
        """The chosen config: the least median among those still running with samples (None if there is none)."""
        candidates = [i for i in self.running if self.entrants[i].timed()]
        return self.leader(candidates, levels) if candidates else None

    def median_winner(self) -> int | None:
        """The config :meth:`winner` would be with no leader ranked by its mean (``levels`` off): for the rank's log,
        which says when the two-level rule changed the choice."""
        return self.winner(levels=False)

    def runner_up(self, winner: int) -> int | None:
        """The next-best config that has a time (running or stopped), or None, judged on the samples it shares with
        the winner: among the other settled leaders when there are any (a settled time and a screening time are not
        comparable: a device that has run a config long enough runs it slower than in the screening's bursts),
        else among all by their screening samples."""
        others = [i for i, e in self.entrants.items() if i != winner and e.state != "failed" and e.timed()]
        settled = [i for i in others if self.entrants[i].settled]
        if settled and self.entrants[winner].settled:
            return min(settled, key=self._rank_key)
        return min(others, key=lambda i: (self.location()(self._screening(i)), i)) if others else None

    def _screening(self, index: int) -> list[float]:
        """A config's samples of the screening rounds (all of them when it has none: a race that only settled)."""
        entrant = self.entrants[index]
        return [s for s in entrant.samples[:self.settled_from] if s is not None] or entrant.timed()

    def margin(self, winner: int, runner_up: int | None) -> tuple[float | None, bool]:
        """(runner-up time / winner time - 1, whether the two are a near-tie: the runner-up is not clearly slower
        on their paired rounds), on the samples :meth:`runner_up` judged them by."""
        if runner_up is None:
            return None, False
        chosen, second = self.entrants[winner], self.entrants[runner_up]
        if chosen.settled and second.settled:
            first_key, second_key = self._rank_key(winner)[0], self._rank_key(runner_up)[0]
            ratios = paired_ratios(second.settled, chosen.settled)
        else:
            location = self.location()
            first_key, second_key = location(self._screening(winner)), location(self._screening(runner_up))
            ratios = paired_ratios(second.samples[:self.settled_from], chosen.samples[:self.settled_from])
        margin = second_key / first_key - 1 if first_key > 0 else None
        return margin, not clearly_slower(ratios) or (margin is not None and margin <= INDIFFERENCE)

    def rank_medians(self, index: int) -> dict[int, float]:
        """Each rank's median time of config ``index``, over the rounds that rank ran in."""
        rows = self.entrants[index].per_rank
        return {r: median([row[r] for row in rows if r in row]) for r in sorted({r for row in rows for r in row})}

    def outcome(self, index: int, description: str, own_rank: int) -> Outcome:
        """The typed outcome of config ``index`` (its state as the race left it)."""
        e = self.entrants[index]
        timed = e.timed()
        if e.state == "failed" or not timed:
            return Outcome(index, description, "failed", error=e.error or "no sample", samples=len(timed),
                           order=list(e.positions), round_times=timed)
        medians = self.rank_medians(index)
        per_rank = [medians[r] for r in sorted(medians)]
        state = "measured" if e.state == "running" else "stopped"
        relative = self._relative(index)  # a settled leader: its drift-free time, and how sure that is
        own = medians.get(own_rank)
        # a settled leader's drift-free time, under either statistic: its time where a quiet race takes it again
        drift_free = self._drift_free(index) if e.settled else None
        # the spread of what the time is taken from, where that holds two samples or more; else of every sample timed
        # (one settled sample or ratio has no spread of its own: 0 there read as an exact time, and a runner-up's gap
        # inside the noise as a real one)
        basis = next((b for b in (relative, e.deciding()) if len(b) >= 2), timed)
        return Outcome(index, description, state, time=self._rank_key(index)[0],
                       spread=spread(basis), per_rank=per_rank, samples=len(timed), own=own,
                       order=list(e.positions), round_times=timed,
                       settled_time=self.settled_noise and bool(e.settled), drift_free=drift_free)


def levels_note(race: Standings) -> str:
    """The race's log note on the two-level rule: the leaders ranked by their mean (:meth:`Standings.slower_levels`)
    and, where that changed the choice, the config the medians chose; empty when the rule ranked no leader."""
    levels = race.slower_levels()
    if not levels:
        return ""
    note = "; ranked by their mean, their samples holding a slower level or placement too: " + ", ".join(
        f"config {i} x{f:.3f}" for i, f in levels.items())
    by_medians = race.median_winner()
    if by_medians is not None and by_medians != race.winner():
        note += f" (by their medians config {by_medians} would have won)"
    return note
