"""The race: interleaved rounds over the configs still in the running, and the group's decisions between them.

This module holds the bookkeeping and the decisions only; :mod:`~triton_dist_tune.measure.lockstep` runs the
configs and exchanges the samples, and :mod:`~.standings` ranks them. Every rank builds the same :class:`Race` from
the same exchanged data, so every decision below (the order of a round, who leaves, when it ends, who wins) is
identical on every rank without any further message.

- **Rounds.** Each round times every config still running once (one sample: a batch of back-to-back calls, or
  one cold call), in an order shuffled afresh each round from a seed the group shares. A slow drift of the machine
  therefore spreads over all configs alike instead of favouring those measured first.
- **Samples.** A config's sample in a round is the MAX over ranks of the ranks' times for it (the ranks started
  it together, and the slowest rank is what the job waits for); its time is the median of its samples, or their
  least sample (of all its rounds, settled or not, with no drift-free ratio) once the race's samples are noisier
  than 5% each (:meth:`Race.location`; :data:`~.noise.NOISY`), but in a heavy race (below).
- **Leaving the race.** After each round, a config that is clearly slower than the leader on their paired per-round
  ratios (:func:`~triton_dist_tune.stats.clearly_slower`: over 25% slower in each of two or more rounds, or above
  ``1 + INDIFFERENCE`` with confidence from three rounds on) leaves (``stopped``). ``far_behind=f`` (steady timing on a
  device clock) removes, from the first round on, a config whose time and whose warm-up probe (the group's) are each
  at least ``f`` times the leader's: two measurements that far apart are no spike, and such a config's later screening
  samples cost the most (a sample is about 10 ms of calls, and at least one call to settle and one to time).
  ``early_stop=f`` also removes, from the first round on, a config whose median is more than ``f`` times the leader's;
  ``keep_top=n`` keeps at most the ``n`` best once ``min_rounds`` are done, and bounds the settled rounds below (a
  heavy race: at the sift). None of these apply where the plan ``stops`` none (the replicas' leaders' race: every
  leader runs every round on every replica). No config leaves as clearly slower after the last round
  (``max_rounds``: it would save nothing); but where the settled rounds would start at that round (``final_top``
  set, and ``max_rounds`` at most ``min_rounds``, or at most ``sift_after`` in a heavy race), the configs beyond the
  settled block's size leave then (``stopped``) and the race ends with no settled round. The configs still running
  at the end are ``measured``.
- **Settled rounds** (steady timing, ``final_top=n``): once at most ``n`` configs are left, or ``min_rounds``
  screening rounds are done (the ``n`` best then go on; ``final_top_fast`` of them when the leader takes under
  ``fast_below_ms`` per call; ``n`` at most ``keep_top``, so that while more than ``keep_top`` are left the race
  screens on to ``min_rounds``, where ``keep_top`` applies: a settled block, in which nobody leaves, never holds
  more than ``keep_top``), the leaders get ``final_rounds`` more rounds of *settled* samples, run as one
  block with no break between its rounds (:meth:`Race.block`; see :mod:`~triton_dist_tune.measure.timing`).
  Their time then comes from their settled samples alone, and nobody leaves during these rounds.
- **The sift** (``final_top_heavy``): when the screening leader takes ``heavy_from_ms`` per call or more (a heavy
  kernel, which holds the device at its power limit; or where the plan says so, ``heavy``: the replicas' leaders'
  race, agreed across replicas before it), the settled rounds start after ``sift_after`` screening
  rounds, or as soon as at most ``final_top_heavy`` configs are left (after the first round where that many or fewer
  race), noisy or not, with up to ``final_top_heavy`` leaders, for a first block of ``sift_rounds`` rounds; then
  only the ``final_top`` best of them by those rounds' samples go on (at most ``keep_top``; one: the race ends),
  for ``heavy_rounds`` settled rounds in all. A heavy race sifts whenever more leaders settle than go on: with
  ``keep_top`` under 3, also with 3 or fewer left.
  Short screening samples on a device at its power limit misrank heavy configs by 5-10%: on one H200 the two
  128x256 GEMM tiles that were best alone by 8-14% read behind 64x256 and 128x128 ones there often enough that
  neither was among the 3 (or 6) leaders in about half of the tunings, where a settled sample (which lets the
  limiter follow its config) ranked them first whenever they reached one (``benchmarks/results/session_h200_46``).
  A heavy race judges its noise on the settled leaders' drift-free samples (:meth:`~.standings.Standings.location`):
  at the power limit the clock swings from one settled round to the next alike for every leader; under noise its
  settled leaders are still ranked by their drift-free medians (of all samples, a screening one chose, and a
  leader the sift stopped read below the chosen one; of their settled samples, the one a fast clock gave: on one
  H200 a tile 1.10x the best won by a sample 9% under its others, ``results/session_h200_47``; the noise judged
  keeps its other effects: no near-tie block, least samples for the configs outside the settled block, the
  decision's statistic ``least``). So does one with no more configs left when it settles than go on
  (nothing to sift; replicas race their 2 leaders so): its settled block is as heavy, its screening samples as
  untrusted (of all samples, 3 leaders that every settled round ranked 0, 1, 2 chose 1 by a screening sample).
  Such a race runs ``heavy_rounds`` settled rounds too, not ``final_rounds``: its leaders get as many settled samples
  as a sifted race's, and with nothing to sift it never costs more device time than one that sifts (it ran 8 rounds
  of 3 heavy leaders, 24 samples, where a race of 4 sifted to 3 ran 4 + 3 x 5 = 19).
- **The end.** When one config is left, when ``max_rounds`` rounds are done (settled ones included) or the settled
  rounds are, or when the time budget is spent (after any round: a cut): the least median among those still running
  wins (ties: the lower index). After settled rounds the leaders are ranked drift-free: by the median of each one's
  sample relative to the round's median leader sample (a drift of the machine between rounds cancels out).
- **Two levels.** Some configs' time flips between two levels (on one H200 a MoE tile at 32 tokens read 1.00-1.02
  and 1.08 times the best in the two halves of one judge's rounds: ``benchmarks/results/session_h200_19``). A median
  reports the level most samples caught, where a served model's calls average both. So a settled leader whose
  relative samples hold a slower level too (their mean, its largest sample left out as a one-off spike, more than the
  indifference margin over their median) has its drift-free time raised by that ratio of mean to median
  (:func:`~.levels.slower_level`), in a race timed on the device (``levels``: a host-timed sample's spikes would
  read as a level).
- **Placements** (``placements=P``, races timed on the device). Some configs' time depends on where the call's
  own outputs lie in memory: on one H200, at MoE M = 32, the same two tiles read 1.00 at most output placements and
  1.01-1.06 at others (1 to 7 of 16 tried; M = 48 alike), where two other tiles read within 0.6% at all of them
  (``benchmarks/address_check.py``, ``results/session_h200_21``), which changed from process to process; a served
  model's buffers lie wherever its allocator puts them. So each settled leader is timed at ``P`` placements (its
  settled round ``j`` at placement ``j mod P``: :meth:`Race.placement`; the measurer captures one graph per
  placement), and its time is raised, as by two levels, to the mean over the placements of each placement's least
  sample (a one-off spike is noise; a placement's level is all its samples) over the median of those least samples,
  where that is more than the indifference margin (:func:`~.levels.placement_level`).
- **Near-ties** (``tie_blocks``, the finalists of a search): when the settled rounds leave the leader and the
  runner-up a near-tie that is more than the indifference margin apart, another settled block runs (the same
  length, interleaved and paired as before), at most ``tie_blocks`` times. The leaders clearly slower than the leader
  on their paired settled rounds leave the race first, and of the rest only the :data:`TIE_LEADERS` best ranked stay:
  the block times only those more samples could make the choice.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..stats import INDIFFERENCE, clearly_slower, median, paired_ratios
from .standings import Entrant, Standings

#: leaders a near-tie block times at the most (chosen on CPU replays, ``benchmarks/tie_block_noise.py``)
TIE_LEADERS = 3


@dataclass(frozen=True)
class RacePlan:
    """How a race runs; identical on every rank."""

    #: rounds at the most (every config still running gets one sample per round)
    max_rounds: int = 10
    #: rounds before ``keep_top`` may remove a config
    min_rounds: int = 3
    #: the tuning's time budget: the race ends after the round in which the group's elapsed time (from the start of
    #: the tuning) reaches it (None: no limit; :mod:`~triton_dist_tune.measure.budget`)
    budget_s: float | None = None
    #: a slowdown factor: a config whose median exceeds this times the leader's leaves at once (None: off)
    early_stop: float | None = None
    #: a config whose time and warm-up probe both take at least this many times the leader's leaves after any round,
    #: the first too (0: off; only with the probes given to :class:`Race`)
    far_behind: float = 0.0
    #: at most this many configs stay in the race after ``min_rounds``, and get the settled rounds (a heavy race's
    #: after its sift) (None: no limit)
    keep_top: int | None = None
    #: the seed of the rounds' orders: the same on every rank (derived from the key and the space)
    seed: str = ""
    #: leaders that get settled rounds at the end of the screening (0: none)
    final_top: int = 0
    #: how many settled rounds they get
    final_rounds: int = 3
    #: leaders that get settled rounds instead, when the screening leader's time per call is under
    #: ``fast_below_ms`` (0: always ``final_top``)
    final_top_fast: int = 0
    fast_below_ms: float = 0.0
    #: the sift, when the screening leader takes ``heavy_from_ms`` per call or more: after ``sift_after`` screening
    #: rounds, or once at most ``final_top_heavy`` configs are left, up to ``final_top_heavy`` leaders (0: no sift)
    #: get the first ``sift_rounds`` settled rounds, and the ``sift_top`` best of them (0: ``final_top``) the rest,
    #: ``heavy_rounds`` settled rounds in all (a heavy race with nothing to sift: its leaders all ``heavy_rounds``)
    final_top_heavy: int = 0
    sift_top: int = 0
    heavy_from_ms: float = 0.0
    sift_after: int = 1
    sift_rounds: int = 1
    heavy_rounds: int = 6
    #: whether the race is heavy, decided before it (the replicas' leaders' race: alike on every replica,
    #: :func:`~.leaders.leaders_plan`); None: judged on its screening leader's time (``heavy_from_ms``)
    heavy: bool | None = None
    #: whether a config may leave the race after a round (clearly slower, ``early_stop``, ``far_behind``,
    #: ``keep_top``); off: every config runs every round (the replicas' leaders' race, where each replica's race
    #: would stop a leader on its own group's samples alone: :func:`~.leaders.leaders_plan`), a config left alone (the
    #: others failed) too: it runs and settles as in its other replicas' races
    stops: bool = True
    #: settled blocks added (``final_rounds`` rounds each) while the leader and the runner-up are a near-tie that
    #: more samples can settle (the runner-up not clearly slower, yet more than the indifference margin apart), at
    #: most this many: the finalists' paired shoot-out of a search
    tie_blocks: int = 0
    #: rank a settled leader whose samples hold a slower level too by what its calls average
    #: (:func:`~.levels.slower_level`): races timed on the device (CUDA graphs), where the two levels were seen and
    #: no host spike reaches a sample (a host-timed sample's spikes would read as a level)
    levels: bool = False
    #: output placements each settled leader is timed at, in turn (see "Placements" in the module docstring): races
    #: timed on the device, whose measurer captures a graph per placement; 1: one
    placements: int = 1

    def __post_init__(self) -> None:
        if min(self.max_rounds, self.min_rounds, self.placements, self.sift_after, self.sift_rounds) < 1:
            raise ValueError("a race needs max_rounds, min_rounds, placements, sift_after and sift_rounds >= 1")
        if self.final_top_heavy and self.heavy_rounds <= self.sift_rounds:
            raise ValueError("a race's heavy_rounds must exceed its sift_rounds")


class Race(Standings):
    """The state of one race over config indices (see the module docstring)."""

    plan: RacePlan

    def __init__(self, indices: list[int], plan: RacePlan, probes: Mapping[int, float] | None = None) -> None:
        self.plan = plan
        #: each config's warm-up probe, the group's (ms per call; for ``far_behind``)
        self.probes = dict(probes or {})
        self._noisy: tuple[tuple[int, int], bool] | None = None
        self.entrants = {i: Entrant(i) for i in indices}
        self.rounds = 0
        self.position = 0
        #: the round the settled rounds began with (None: still screening)
        self.settled_from: int | None = None
        #: settled blocks added for a near-tie (``tie_blocks``), each of the first block's length
        self.tie_blocks = 0
        self._block = plan.final_rounds
        #: the round the sift ends with (None: no sift running), the leaders it began with and those it stopped
        self.sift_until: int | None = None
        self.sift_size = 0
        self.sifted: list[int] = []
        #: True when the time budget ended the race before its rounds did (a cut: the choice is provisional)
        self.cut = False

    # -- running ---------------------------------------------------------------------------------------------------

    def order(self, ahead: int = 0) -> list[int]:
        """The order of the next round (``ahead``: of the round that many after it, for a block of settled rounds run
        without a break, in which nobody leaves): the running configs shuffled by the shared seed and the round
        number."""
        order = self.running
        random.Random(f"{self.plan.seed}/round{self.rounds + ahead}").shuffle(order)
        return order

    def block(self) -> int:
        """How many rounds the next step runs without a break: the settled rounds left (at most up to
        ``max_rounds``) when settling, else one."""
        if self.settled_from is None:
            return 1
        end = self.settled_from + self.plan.final_rounds if self.sift_until is None else self.sift_until
        return max(1, min(end - self.rounds, self.plan.max_rounds - self.rounds))

    def record(self, index: int, per_rank: Sequence[float], ranks: Sequence[int] | None = None) -> None:
        """Config ``index``'s sample of the current round: every rank's time (ms per call), of ``ranks`` (default:
        0, 1, ... in order; a contextual track names the ranks that hold its key)."""
        entrant = self.entrants[index]
        while len(entrant.samples) < self.rounds:
            entrant.samples.append(None)
        entrant.samples.append(float(max(per_rank)))
        if self.settled_from is not None:
            entrant.settled.append(entrant.samples[-1])
        labels = range(len(per_rank)) if ranks is None else ranks
        entrant.per_rank.append({int(r): float(t) for r, t in zip(labels, per_rank, strict=True)})
        entrant.positions.append(self.position)
        self.position += 1

    def fail(self, index: int, error: str) -> None:
        """Config ``index`` failed on some rank: it leaves the race and can never be chosen."""
        entrant = self.entrants[index]
        entrant.state, entrant.error = "failed", error
        self._noisy = None  # the noise judged from the configs left (no new sample, so the stamp alone misses it)

    @property
    def settling(self) -> bool:
        """Whether the next round is a settled round (see the module docstring)."""
        return self.settled_from is not None

    def end_round(self) -> list[int]:
        """Close the round; returns the configs that leave the race now (``stopped``), ascending."""
        self.rounds += 1
        for entrant in self.entrants.values():
            while len(entrant.samples) < self.rounds:
                entrant.samples.append(None)
        running = [i for i in self.running if self.entrants[i].timed()]
        if self.settled_from is not None or len(running) < self._fewest:
            return []  # settled rounds, or nothing to race against
        leaving = self._leaving(running) if self.rounds < self.plan.max_rounds else set()
        left = [i for i in running if i not in leaving]
        heavy = self._heavy(left)
        # ``keep_top`` bounds a settled block: a heavy one at its sift (below), any other one from its start (it
        # starts once at most that many are left, or after ``min_rounds``, where ``keep_top`` applies)
        top = self.plan.final_top_heavy if heavy else min(self._final_top(left), self.plan.keep_top or len(left))
        after = self.plan.sift_after if heavy else self.plan.min_rounds
        if top and len(left) >= self._fewest and (len(left) <= top or self.rounds >= min(after, self.plan.max_rounds)):
            leaving.update(sorted(left, key=self._rank_key)[top:])
            self.settled_from = self.rounds
            # a heavy settled block, sifted or not: its noise is judged on its leaders' drift-free ratios, and it runs
            # ``heavy_rounds`` settled rounds in all (a near-tie block's length too: the settled rounds before it)
            self.settled_noise = heavy
            if heavy:
                self.plan = replace(self.plan, final_rounds=self.plan.heavy_rounds)
                self._block = self.plan.heavy_rounds
            if heavy and len(left) > self.sift_keeps():  # more leaders than go on: a sift
                self.sift_until, self.sift_size = self.rounds + self.plan.sift_rounds, min(top, len(left))
        for i in leaving:
            self.entrants[i].state = "stopped"
        return sorted(leaving)

    def _final_top(self, left: list[int]) -> int:
        """How many leaders get the settled rounds: ``final_top_fast`` when the leader among ``left`` is fast,
        else ``final_top`` (the leader's time is the group's: every rank decides alike)."""
        plan = self.plan
        fast = (bool(left) and 0 < plan.final_top < plan.final_top_fast
                and (self._time(self.leader(left)) < plan.fast_below_ms or self.location() is not median))
        return plan.final_top_fast if fast else plan.final_top

    @property
    def _fewest(self) -> int:
        """The fewest configs running that the race goes on with, and that settle: 2 (one alone has nothing to race
        against), or 1 where the plan ``stops`` none (the replicas' leaders' race: a leader left alone there, the
        others failed on this replica, runs and settles every round, as on the other replicas)."""
        return 2 if self.plan.stops else 1

    def _heavy(self, left: list[int]) -> bool:
        """Whether the leaders among ``left`` go through the sift: the plan has one and the leader takes
        ``heavy_from_ms`` or more (noisy or not: the sift ranks them by their settled samples alone), or the plan
        says so (``heavy``: decided before the race)."""
        plan = self.plan
        if not (left and 0 < plan.final_top < plan.final_top_heavy and plan.heavy_from_ms > 0):
            return False
        return plan.heavy if plan.heavy is not None else self._time(self.leader(left)) >= plan.heavy_from_ms

    def _leaving(self, running: list[int]) -> set[int]:
        """The configs that are clearly slower than the leader after this round (none where the plan ``stops``
        none)."""
        if not self.plan.stops:
            return set()
        leader = self.leader(running)
        best = self.entrants[leader]
        leaving = set()
        for i in running:
            if i == leader:
                continue
            entrant = self.entrants[i]
            if self.plan.early_stop is not None and self._time(i) > self.plan.early_stop * self._time(leader):
                leaving.add(i)
            elif clearly_slower(paired_ratios(entrant.samples, best.samples)) or self._far_behind(i, leader):
                leaving.add(i)
        if self.plan.keep_top is not None and self.rounds >= self.plan.min_rounds:
            ranked = sorted((i for i in running if i not in leaving), key=self._rank_key)
            leaving.update(ranked[self.plan.keep_top:])
        return leaving

    def _far_behind(self, index: int, leader: int) -> bool:
        """Whether config ``index`` is ``far_behind`` the leader by two measurements: its time in the race and its
        warm-up probe, each at least that many times the leader's (one sample alone may be a spike)."""
        far, probe, lead = self.plan.far_behind, self.probes.get(index, 0.0), self.probes.get(leader, 0.0)
        return bool(far and probe > 0 and lead > 0 and probe >= far * lead
                    and self._time(index) >= far * self._time(leader))

    def finished(self, elapsed_s: float) -> bool:
        """Whether the race is over after the rounds so far (``elapsed_s``: the group's agreed racing time)."""
        if self.rounds == 0:
            return not self.running  # every config gets at least one sample, even alone
        spent = self.plan.budget_s is not None and elapsed_s >= self.plan.budget_s
        if self.settled_from is not None:
            if self.sift_until is not None and self.rounds >= self.sift_until:
                self.sift_until = None
                if not spent:
                    self._sift()
            if self.sifted and len(self.running) <= 1 and self.plan.stops:
                return True  # the sift kept one (``keep_top``): nothing left to race
            done = self.rounds - self.settled_from >= self.plan.final_rounds or self.rounds >= self.plan.max_rounds
            if (done and not spent and self.tie_blocks < self.plan.tie_blocks and self.location() is median
                    and self._unsettled_tie()):
                self.tie_blocks += 1  # one more block, paired and interleaved as the first, of the tied leaders
                self._leave_the_tie()
                cycles = self._block
                self.plan = replace(self.plan, final_rounds=self.rounds - self.settled_from + cycles,
                                    max_rounds=self.rounds + cycles)
                return False
            self.cut = spent and not done
            return done or spent
        if len(self.running) < self._fewest or self.rounds >= self.plan.max_rounds:
            return True
        self.cut = spent  # every config running has a sample: the best measured so far wins
        return self.cut

    def sift_keeps(self) -> int:
        """How many leaders the sift keeps: ``sift_top`` (``final_top`` when 0), at most ``keep_top`` (a heavy race
        settles before ``keep_top`` applies, and nobody leaves a settled block: the sift is where it bounds the
        race, and a heavy race with more than ``keep_top`` left sifts even with ``sift_top`` or fewer)."""
        keep = self.plan.sift_top or self.plan.final_top
        keep_top = self.plan.keep_top
        return keep if keep_top is None else min(keep, keep_top)

    def _sift(self) -> None:
        """The end of the sift: of the settled leaders, the :meth:`sift_keeps` best by their settled samples alone
        (drift-free, whatever the race's statistic: its screening samples are what misranked them) go on, the rest
        are ``stopped`` (:attr:`sifted`)."""
        candidates = [i for i in self.running if self.entrants[i].settled]
        staying = sorted(candidates, key=lambda i: (self._drift_free(i, levels=False), i))[:self.sift_keeps()]
        self.sifted = [i for i in candidates if i not in staying]
        for i in self.sifted:
            self.entrants[i].state = "stopped"
        self._noisy = None  # judged again on the leaders kept

    def _leave_the_tie(self) -> None:
        """Before a near-tie block only the :data:`TIE_LEADERS` best of the settled leaders not clearly slower than the
        leader (on their paired settled rounds) stay; the rest are ``stopped`` (on one H200, GEMM M = 1024: 6 leaders
        within 1-2% re-raced in two blocks, 1.5 s of a 3.5 s key)."""
        candidates = [i for i in self.running if self.entrants[i].settled]
        chosen = self.entrants[self.leader(candidates)].settled
        tied = [i for i in candidates if not clearly_slower(paired_ratios(self.entrants[i].settled, chosen))]
        staying = sorted(tied, key=self._rank_key)[:TIE_LEADERS]  # the leader's own ratios are 1: it stays
        for i in candidates:
            if i not in staying:
                self.entrants[i].state = "stopped"
        self._noisy = None  # judged again on the tied leaders kept

    def _unsettled_tie(self) -> bool:
        """Whether the leader and the runner-up of the settled rounds are a near-tie that more samples could
        settle: the runner-up not clearly slower, and more than the indifference margin apart (closer is a tie for
        every practical purpose)."""
        candidates = [i for i in self.running if self.entrants[i].settled]
        if len(candidates) < 2:
            return False
        winner = self.leader(candidates)
        runner_up = self.runner_up(winner)
        if runner_up is None:
            return False
        margin, near_tie = self.margin(winner, runner_up)
        return near_tie and margin is not None and margin > INDIFFERENCE


def sift_note(race: Race) -> str:
    """The race's log note on the sift: the leaders it stopped; empty when there was none."""
    if not race.sifted:
        return ""
    return (f"; heavy calls: {race.sift_size} leaders sifted to {race.sift_keeps()} after "
            f"{race.plan.sift_rounds} settled round(s), config(s) {', '.join(map(str, race.sifted))} stopped")
