"""The step schedule of one (kernel, key) in a contextual tuning, as the whole group sees it.

A :class:`Track` is built and advanced only from data every rank has gathered, by the same code, so its state is
identical on every rank and the ranks never need to agree on anything else. Each run of the tuned function is one
step of every unfinished track. First each config in turn gets ``n_warmup`` untimed steps; then the configs race
as :func:`~triton_dist_tune.tune.autotune`'s do (:class:`~triton_dist_tune.measure.race.Race`, the same rules
and statistics): rounds of one timed step per config still running, in an order shuffled afresh each round from
a seed every rank shares, clearly slower configs leaving after each round, at most ``n_repeat`` rounds. Then the
close contenders (at most :data:`CLOSE_TOP` configs not clearly slower than the leader) race
:data:`CLOSE_ROUNDS` x (``n_repeat`` - 1) closing rounds among themselves (none for a one-round race), and their
time is the drift-free median of the closing rounds alone (under noise, as any config's, their least sample): a
sample is one launch, so a near-tie needs more of them, and a clear winner needs none. A step
counts when every rank that launches the kernel with this key launched it, with the current config and without
error, in that run; its sample is the MAX over ranks. A config that failed on any rank is skipped on every rank.
The least median among the configs still running wins (ties: the lower index).

A failure counts however late it is seen: a config measured before a rank reported it failing leaves the running,
and a decided track whose choice fails is decided again among the rest (or raced again). A large space is searched:
which configs each stage warms up and races is :mod:`~triton_dist_tune.contextual.stages`'s. The track's tables (its
decision's measurements and the printed summary) are built from it in :mod:`~triton_dist_tune.contextual.report`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import AllConfigsFailedError, BadInputError, MismatchError, one_cause
from ..group.agreement import difference
from ..measure.noise import retaken, statistic
from ..measure.race import Race
from ..records import MEDIAN, Outcome
from ..stats import clearly_slower, median, paired_ratios
from . import intercept
from .stages import Stages, estimated_best
from .tracks import TrackInfo, journaled_drift_free, journaled_per_rank, journaled_samples

#: the most configs that race the closing rounds, and how many closing rounds there are per ``n_repeat`` past 1
CLOSE_TOP = 3
CLOSE_ROUNDS = 2


class PruningError(BadInputError):
    """The kernel's own pruning (``prune_configs_by``) failed or kept nothing usable on some rank."""


#: one launch as a rank reports it: (config index, milliseconds or None, error or None)
Launch = tuple[int, "float | None", "str | None"]


class Track:
    """The group's schedule and measurements for one (kernel, key)."""

    def __init__(self, kernel: str, key_text: str, infos: Mapping[int, TrackInfo], n_warmup: int,
                 n_repeat: int, max_runs: int = 1000, seeds: Sequence[int] = ()) -> None:
        self.kernel, self.key_text = kernel, key_text
        self.label = f"kernel={kernel} key={key_text}"
        first = infos[min(infos)]
        self.name, self.descriptions = first.name, first.descriptions
        self.entry, self.space_text = first.entry, first.space_text
        self.n_warmup, self.n_repeat = n_warmup, n_repeat
        #: the configs to try, in config order: those every rank's pruning keeps
        self.order = agreed_order(self.label, infos)
        #: the configs of the current stage (:mod:`~.stages`): every config, or a search's screening stages, then
        #: its finalists; seeded by nearby keys' choices, then the perf model's best
        self.stages = Stages(self.label, self.order, first.params, agreed_search_mode(self.label, infos),
                             n_warmup, max_runs, [*seeds, *estimated_best(infos, self.order)])
        self.holders: list[int] = sorted(infos)
        self.pos, self.step, self.runs = 0, 0, 0
        #: steps taken and failures seen: grows whenever the track moves (a stalled track is ended by the session)
        self.progress = 0
        #: the race, once every config is warm; its round's order and the position in it
        self.race: Race | None = None
        self.round_order: list[int] = []
        self.round_pos = 0
        self.per_rank: dict[int, dict[int, float]] = {}
        self.times: dict[int, float] = {}
        self.spreads: dict[int, float] = {}
        #: the group samples each time is of (journaled with it, so that a resumed time is taken again of the
        #: statistic of the race that decides: :meth:`_take_all`)
        self.samples: dict[int, list[float]] = {}
        #: each close contender's drift-free median of its closing rounds, whatever the race's statistic (journaled)
        self.drift_free: dict[int, float] = {}
        self.failed: dict[int, str] = {}
        #: on a disk cache hit, each config's group time as recorded there (for ``configs_timings``; never chosen by)
        self.cached_times: dict[int, float] = {}
        #: configs whose time came from an earlier attempt's journal
        self.resumed: set[int] = set()
        #: the finalists' screening times (and per-rank times), kept while their race runs afresh: a cut
        #: (:meth:`force`) chooses by every time the group has, screening times included
        self.screened: dict[int, float] = {}
        self.screened_per_rank: dict[int, dict[int, float]] = {}
        #: True when the choice was forced before the schedule ended (``max_runs``, a stalled track): provisional
        self.cut = False
        self.best: int | None = None
        self.how = ""
        #: increases whenever the choice changes (a late failure of the chosen config)
        self.revision = 0
        if len(self.order) == 1:
            self.finish(self.order[0], "only config")
        elif n_warmup == 0:
            self._start_race()

    # -- state -----------------------------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Whether the group has chosen a config."""
        return self.best is not None

    @property
    def statistic(self) -> str:
        """What the race's times are (:func:`~triton_dist_tune.measure.noise.statistic`): ``median``, or ``least``
        where its samples were noisy; ``median`` without a race (times resumed from the journals)."""
        return statistic(self.race.location()) if self.race is not None else MEDIAN

    def _open(self, index: int) -> bool:
        """Whether config ``index`` still needs steps (not failed, not resumed, not measured)."""
        return index not in self.failed and index not in self.times

    def current(self) -> int:
        """The config index this run's launches use (the best one once done)."""
        if self.best is not None:
            return self.best
        if self.race is not None:
            return self.round_order[self.round_pos]
        return self.stages.batch[self.pos]

    def phase(self) -> tuple[str, int]:
        """("warmup", step) or ("measure", round) of the current step."""
        if self.race is None:
            return "warmup", self.step
        return "measure", self.race.rounds

    # -- updates, from gathered data only ----------------------------------------------------------------------------

    def join(self, infos: Mapping[int, TrackInfo]) -> None:
        """Ranks that met this (kernel, key) later than the others: configs they prune are left out."""
        raise_pruning_errors(self.label, {r: info for r, info in infos.items() if r not in self.holders})
        for rank, info in sorted(infos.items()):
            if rank in self.holders:
                continue
            self.holders = sorted([*self.holders, rank])
            pruning = info.pruning or (info.pruned if isinstance(info.pruned, list) else [], None, 0)
            kept = pruning[0]  # its early pruning (top_k is the group's)
            for index in self.order:
                if index not in kept:
                    self.fail(index, f"rank {rank}: pruned")

    def fail(self, index: int, text: str) -> None:
        """Record that config ``index`` failed; it leaves the running however late this is seen (a measured
        config loses its time; a chosen one is replaced by the next best, or the configs race again)."""
        if index not in self.order:
            return
        known = self.failed.get(index)
        if known is not None and text in known.split("; "):
            return  # the same failure reported again (a compile error seen at launch and when compiling)
        self.failed[index] = f"{known}; {text}" if known is not None else text
        self.progress += 1
        self.times.pop(index, None)
        self.per_rank.pop(index, None)
        if self.race is not None and index in self.race.entrants:
            self.race.fail(index, text)
        if self.best == index:
            self.best, self.how = None, ""
            self.revision += 1
            if self.times:
                self.finish(self._least(self.times), "tuned, after a late failure of the choice")
            elif any(i not in self.failed for i in self.order):
                self._start_race()
            else:
                raise all_failed(self.label, self.order, self.failed, self.descriptions)
        elif not self.done and self.current() == index:
            self._move_on()

    def resume(self, outcomes: Mapping[int, Mapping[str, Any]]) -> None:
        """Take the group outcomes of an earlier attempt (merged journals): measured configs keep their time and
        are not measured again; failed, hung or twice crashed ones are left out; suspects (in flight once when an
        attempt ended without an error) are measured again."""
        for index, outcome in sorted(outcomes.items()):
            if index not in self.order or self.done or outcome["state"] == "suspect":
                continue
            if outcome["state"] in ("measured", "stopped"):
                self.times[index] = float(outcome["time"])
                self.samples[index] = journaled_samples(outcome)
                put(self.drift_free, index, journaled_drift_free(outcome))
                self.per_rank[index] = journaled_per_rank(outcome, self.holders)
                self.resumed.add(index)
                if self.race is not None and index in self.race.entrants:
                    self.race.fail(index, "resumed from an earlier attempt")
            else:
                self.fail(index, str(outcome.get("error", "failed in an earlier attempt")))
        if not self.done and not self._open(self.current()):
            self._move_on()

    def advance(self, launches: Mapping[int, Sequence[Launch]]) -> str:
        """Apply one run's launches (by rank); returns what happened: advanced, failed, waiting or done."""
        if self.done:
            return "done"
        self.runs += 1
        current = self.current()
        for rank in sorted(launches):
            for index, _, error in launches[rank]:
                if error:
                    self.fail(index, f"rank {rank}: {error}")
        if current in self.failed or self.done:
            return "failed"
        if not all(launches.get(r) and all(i == current and e is None for i, _, e in launches[r])
                   for r in self.holders):
            return "waiting"
        self.progress += 1
        if self.race is None:
            self.step += 1
            if self.step >= self.n_warmup:
                self._move_on()
        else:
            self.race.record(current, [float(median([float(ms) for _, ms, _ in launches[r]])) for r in self.holders],
                             self.holders)
            self.round_pos += 1
            self._move_on()
        return "advanced"

    # -- moving through the schedule ---------------------------------------------------------------------------------

    def _move_on(self) -> None:
        """Go to the next step that needs a config: the next warm-up, the next in the round, or a new round."""
        if self.race is None:
            batch = self.stages.batch
            if self.step >= self.n_warmup or not self._open(batch[self.pos]):
                self.pos, self.step = self.pos + 1, 0
            while self.pos < len(batch) and not self._open(batch[self.pos]):
                self.pos += 1
            if self.pos == len(batch):
                self._start_race()
            return
        race = self.race
        while self.round_pos < len(self.round_order) and race.entrants[self.round_order[self.round_pos]].state \
                != "running":
            self.round_pos += 1
        if self.round_pos < len(self.round_order):
            return
        for index in race.end_round():
            self._take(index)
        if race.finished(0.0) and not self.stages.final:
            self._next_stage()
            return
        if race.finished(0.0):
            leaving = None if race.settling or self.n_repeat < 2 else begin_closing(race, self.n_repeat)
            if leaving is None:
                self._conclude()
                return
            for index in leaving:
                self._take(index)
        self.round_order, self.round_pos = race.order(), 0
        self._move_on()

    def _next_stage(self) -> None:
        """A screening stage of the search is over: the next stage's configs, or the finalists' race."""
        self._take_all()
        history: dict[int, float | None] = {i: None for i in self.failed}
        history.update(self.times)
        batch = self.stages.next(history)
        if self.stages.final:  # the finalists race afresh: their screening times leave the table
            if not batch:
                raise all_failed(self.label, self.order, self.failed, self.descriptions)
            for index in batch:
                if index in self.times:
                    self.screened[index] = self.times[index]
                    self.screened_per_rank[index] = self.per_rank.get(index, {})
                for table in (self.times, self.per_rank, self.spreads, self.samples):
                    table.pop(index, None)
                self.resumed.discard(index)
        self.race, self.pos, self.step = None, 0, 0
        self.progress += 1
        self._move_on()

    def _start_race(self) -> None:
        entrants = [i for i in self.stages.batch if self._open(i)]
        if not entrants:
            if not self.stages.final:  # the stage's configs are all settled already (resumed or failed)
                self._next_stage()
                return
            self._conclude()
            return
        self.race = Race(entrants, self.stages.race_plan(self.n_repeat))
        self.round_order, self.round_pos = self.race.order(), 0
        if self.n_warmup == 0 and self.runs == 0:  # a key's first launch (its first pruned config) counts at once
            self.round_order.sort(key=self.order.index)

    def _take(self, index: int) -> None:
        """Record a raced config's outcome (its median and per-rank medians) as the group's measurement."""
        race = self.race
        outcome = race.outcome(index, self.descriptions[index], 0) if race is not None else None
        if race is None or outcome is None or not outcome.usable:
            return
        put(self.drift_free, index, outcome.drift_free)
        self.times[index] = float(outcome.time)
        self.spreads[index] = float(outcome.spread or 0.0)
        self.samples[index] = list(outcome.round_times)
        self.per_rank[index] = race.rank_medians(index)

    def _take_all(self) -> None:
        """Take every raced config's outcome (running or stopped, with samples) at the race's end: each of the
        race's final statistic (a config that left the race took the one of then; the samples can turn noisy, or
        quiet, since); and every time read back from an earlier attempt's journal (:func:`resumed_again`)."""
        race = self.race
        for index, entrant in sorted(race.entrants.items()) if race is not None else ():
            if entrant.state != "failed" and entrant.timed() and index not in self.resumed:
                self._take(index)
        self.times.update(resumed_again(self.times, self.samples, self.resumed, self.drift_free, self.statistic))

    def _conclude(self) -> None:
        """The race is over: take every outcome and choose."""
        race = self.race
        winner = race.winner() if race is not None else None
        self._take_all()
        candidates = {i: t for i, t in self.times.items()
                      if i == winner or (i in self.resumed and self.stages.search is None)}
        if candidates:
            self.finish(self._least(candidates), "tuned")
        elif self.times:
            self.finish(self._least(self.times), "tuned")
        else:
            raise all_failed(self.label, self.order, self.failed, self.descriptions)

    def _least(self, times: Mapping[int, float]) -> int:
        return min(times, key=lambda i: (times[i], self.order.index(i)))

    def finish(self, index: int, how: str) -> None:
        """Choose config ``index``; ``how`` says why (tuned, disk cache, only config, forced)."""
        self.best, self.how = index, how

    def force(self, how: str = "forced") -> None:
        """End the track now (a cut: ``max_runs``, a stalled track): the best config measured so far by every time
        the group has (a finalist's screening time included while its race has not timed it), else the first
        usable one. The choice is provisional (:attr:`cut`): the disk cache records it as such, and later jobs
        tune the key again instead of serving it."""
        self.cut = True
        self._take_all()
        for index, ms in self.screened.items():
            if index not in self.times and index not in self.failed:
                self.times[index] = ms
                self.per_rank[index] = dict(self.screened_per_rank.get(index, {}))
        if self.times:
            self.finish(self._least(self.times), how)
            return
        usable = [i for i in self.order if i not in self.failed]
        if not usable:
            raise AllConfigsFailedError(f"{self.label}: every config failed on some rank")
        self.finish(usable[0], f"{how}, unmeasured")


def all_failed(label: str, order: list[int], failed: Mapping[int, str], descriptions: list[str]) -> Exception:
    """The error of a track whose every config failed: their one cause, or each config's error."""
    errors = [failed.get(i) or "?" for i in order]
    return AllConfigsFailedError(f"{label}: every config failed" + (one_cause(errors) or " on some rank: " + "; ".join(
        f"config {i} ({descriptions[i]}): {e}" for i, e in zip(order, errors, strict=True))))


def put(table: dict[int, float], index: int, value: float | None) -> None:
    """Set ``table[index]`` to ``value``, or remove it where ``value`` is None."""
    if value is None:
        table.pop(index, None)
    else:
        table[index] = value


def resumed_again(times: Mapping[int, float], samples: Mapping[int, list[float]], resumed: set[int],
                  drift_free: Mapping[int, float], told: str) -> dict[int, float]:
    """The times read back from an earlier attempt's journal (``resumed``), each taken again from its samples of
    the statistic ``told`` of the race that decides (:func:`~triton_dist_tune.measure.noise.retaken`): their
    least, or their median. Exact for a config that left that attempt's race or was screened (no settled samples);
    a close contender's median is its drift-free time of its closing rounds (``drift_free``, journaled whatever the
    statistic of the race it came from), as the race's own contenders' is, and under noise its least sample, as
    theirs is."""
    read_back = [Outcome(i, "", "measured", time=times[i], round_times=list(samples.get(i, [])),
                         drift_free=drift_free.get(i)) for i in sorted(resumed) if i in times]
    return {o.index: float(o.time) for o in retaken(read_back, told != MEDIAN, lambda o: True)}


def agreed_pruning(infos: Mapping[int, TrackInfo]) -> list[int]:
    """Triton's ``prune_configs_by``, agreed: the configs every rank's ``early_config_prune`` keeps, then the
    ``top_k`` of those by the perf model's estimate (the largest over ranks), in config order."""
    parts = [info.pruning or (info.pruned, None, 0) for _, info in sorted(infos.items())]
    early = [i for i in parts[0][0] if all(i in p[0] for p in parts)]
    if parts[0][1] is None or any(p[1] is None for p in parts):
        return early
    estimates = {i: max(p[1][i] for p in parts) for i in early}
    return intercept.best_estimated(early, estimates, parts[0][2])


def begin_closing(race: Race, n_repeat: int) -> list[int] | None:
    """The screening of ``race`` is over: when two or more configs are still within its uncertainty of the leader
    (not clearly slower on their paired rounds), the :data:`CLOSE_TOP` best race :data:`CLOSE_ROUNDS` x
    (``n_repeat`` - 1) closing rounds among themselves (the race's settled rounds: their time is the median of
    those rounds alone; nobody leaves). Returns the configs that leave now, or None when there are no closing
    rounds (the race is over)."""
    running = [i for i in race.running if race.entrants[i].timed()]
    if len(running) < 2:
        return None
    leader = race.leader(running)
    best = race.entrants[leader].samples
    close = sorted((i for i in running
                    if i == leader or not clearly_slower(paired_ratios(race.entrants[i].samples, best))),
                   key=lambda i: (race.entrants[i].time(), i))[:CLOSE_TOP]
    if len(close) < 2:
        return None
    leaving = [i for i in running if i not in close]
    for index in leaving:
        race.entrants[index].state = "stopped"
    rounds = CLOSE_ROUNDS * (n_repeat - 1)
    race.plan = replace(race.plan, max_rounds=race.rounds + rounds, final_top=len(close), final_rounds=rounds)
    race.settled_from = race.rounds
    return leaving


def agreed_search_mode(label: str, infos: Mapping[int, TrackInfo]) -> str:
    """The search mode every rank's environment gives (``TRITON_DIST_AUTOTUNE_SEARCH``; ``auto`` when unset);
    MismatchError when the ranks differ."""
    modes = {rank: info.search or "auto" for rank, info in sorted(infos.items())}
    if len(set(modes.values())) > 1:
        raise MismatchError(f"{label}: the ranks differ in the search mode (TRITON_DIST_AUTOTUNE_SEARCH): "
                            + "; ".join(f"rank {r}: {m}" for r, m in modes.items()))
    return next(iter(modes.values()))


def raise_pruning_errors(label: str, infos: Mapping[int, TrackInfo]) -> None:
    """The :class:`PruningError` of the ranks of ``infos`` whose pruning raised, if any (in one run or late)."""
    if problems := [f"rank {r}: {i.pruned}" for r, i in sorted(infos.items()) if isinstance(i.pruned, str)]:
        raise PruningError(f"{label}: pruning the configs failed: " + "; ".join(problems))


def agreed_order(label: str, infos: Mapping[int, TrackInfo]) -> list[int]:
    """The indices of the configs that every rank of ``infos`` keeps after pruning, in the first rank's order.

    Raises :class:`~triton_dist_tune.errors.MismatchError` when the ranks differ in the kernel's configs, and
    :class:`PruningError` when a rank's pruning failed or no config is kept by every rank."""
    first = infos[min(infos)]
    for rank, info in sorted(infos.items()):
        if info.descriptions != first.descriptions:
            theirs = difference(["\n".join(first.descriptions), "\n".join(info.descriptions)])
            raise MismatchError(f"{label}: the ranks differ in the kernel's configs: rank {min(infos)}: {theirs[0]}; "
                                f"rank {rank}: {theirs[1]}")
    raise_pruning_errors(label, infos)
    order = agreed_pruning(infos)
    if not order:
        raise PruningError(f"{label}: the configs' pruning (prune_configs_by) keeps no config that every rank "
                           f"keeps: " + "; ".join(f"rank {r}: {i.pruned}" for r, i in infos.items()))
    return order
