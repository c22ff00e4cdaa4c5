"""Replicas: the same tensor-parallel group repeated across a data-parallel job, tuned as one.

A call with ``autotune_pg=tp_group, autotune_replicas=replica_group`` (``replica_group`` links the same position
of every replica, e.g. ``mesh.get_group("dp")`` of a ``DeviceMesh`` whose other dimension is ``tp``) tunes so that
every rank of every replica ends on one config per key:

1. the replicas agree on key, config space and ``cache_key_extra``, and on the configs every rank of every replica
   keeps;
2. replica ``j`` of ``R`` races the configs at positions ``j, j + R, ...`` of that list, in lock-step inside its
   group (:meth:`Measurer.lockstep`, the measurement engine's race), so the first pass costs each rank 1/R of it;
3. the outcomes are gathered across replicas (all ranks of a group hold the same outcomes, so every position
   gathers the same table);
4. the leaders (:func:`leaders`) are each replica's best survivor, ranked inside its share (a replica times its
   share on its own devices, which may run every config faster or slower than another replica's: ranked across
   shares alone, the survivors of a faster replica took every leader place, and the best config, another
   replica's winner, was never raced again; tests/test_replicas.py), and up to 2 (or ``refine_top`` if larger) in
   all, the configs with the least times among those that ended their replica's race still running (``measured``:
   each replica's survivors, its settled leaders in steady timing), and only where those are fewer, the least of
   the others (configs a race stopped, resumed or not); so at least one leader per replica whose share has a
   survivor, and the leaders' race grows with the replicas; they are raced again on every replica (``refine_top``
   chose them and bounds their race no further: ``keep_top`` off; its settled block holds every leader, with no
   sift, and no leader leaves it before its end, every leader running every round on every replica:
   :func:`leaders_plan`), heavy or not alike on every replica (:func:`heavy_leaders`: the slowest replica's
   best leader in the first pass takes ``heavy_from_ms`` or more), and a leader's time is the MAX over replicas of
   each replica's group time (itself the MAX over the group's ranks), its spread the MAX of theirs;
5. the choice is the least of those times (ties: the lower index): the least over configs of the max over every
   rank of every replica; whether it is a near tie is judged on those spreads. Every rank computes it from the same
   exchanged data, and records the same decision (a leader's samples in its table are its own replica's, as many
   on every replica);
6. where every leader failed on some replica (a leader that failed on any replica is failed) and the gathered table
   still holds usable configs, not raced yet, the next leaders, chosen by the same rule on the table without the
   failed ones, are raced on every replica the same way, and again, until some leader is usable or no config is
   left (then every rank raises ``AllConfigsFailedError``, naming every failure). The table and the leaders'
   outcomes are exchanged: every rank of every replica races again or not alike (logged with the failed leaders).
   Before, one replica whose every leader failed ended the tuning with "every config failed" while the others'
   first passes held usable configs (tests/test_replicas.py). A time budget spent before a leaders' race, or one
   that ended the last leaders' race early, leaves the first pass to decide among the next leaders (a cut).

Each replica's race decides on its own group's samples: a leader that left it on one replica alone (before,
``far_behind`` on a device clock after one round, or clearly slower in cold timing after 2 of 10) held fewer samples
there, of the screening alone in steady timing, and its MAX over replicas joined them to another replica's settled
time: the ranks recorded different tables (1 sample against 9) and rounds. And a near tie judged on each replica's
own spreads differed between ranks of one choice and margin (tests/test_replicas.py).

Survivors first, because a survivor's time and a stopped config's time are not of one kind
(:meth:`~.standings.Standings.runner_up`): a steady race times its survivors by their settled samples, drift-free,
each at the speed the device sustains on it, and a config its screening stopped keeps the time of the screening's
short samples, which on a device at its power limit read faster in ms than settled ones (one H200's heavy race,
``RECORDED_H200`` in tests/test_sift.py: the screening read the configs its sift stopped 4-20% under their settled
sample, configs 8 and 18 at 2.93-2.97 ms where config 2, the best alone, settled at 3.21). Ranked together, configs
some replica's screening stopped could read faster than every replica's settled winner and take the leaders'
places, and the best config, one replica's settled winner, was never raced again (2 one-rank replicas on a
modelled device that cools between samples, shares of 16: 8 keys of 8 chose a config 9% slower alone,
tests/test_sift.py). A stopped config lost its own replica's race, on samples of one kind, to that replica's
survivors.

One statistic per table: each replica's race takes its configs' median samples, or their least where its samples are
noisy (:meth:`~.race.Race.location`). The exchanges of steps 3 and 4 carry whether each replica's race was noisy,
and every rank agrees on one statistic before it combines times: the least samples where some replica's race was
noisy, else the medians. After step 3 every time of the table is taken again of it from its config's group samples
(``round_times``: their least; under medians only the outcomes resumed from an earlier attempt's journal that left
their race, whose race may have been noisy), and the leaders are chosen on those times (step 4). In step 4 each
replica sends each leader's least sample beside its time, so a leader's time is the MAX over replicas of the agreed
statistic; where the leaders' race agreed on another statistic than the first pass, the configs outside it are taken
again of it. A leader's ``round_times`` in the table stay this replica's own samples. Whether the leaders' race is
heavy is agreed too, before it, from the gathered table: judged by each replica on its own screening leader, a
replica on faster devices raced the leaders light (8 settled rounds, least samples under noise) where another raced
them heavy (6, drift-free times under either statistic, ``settled_time``), and under the least statistic a leader's
MAX joined one replica's drift-free median to another's least sample (tests/test_sift.py, devices 4x apart). The
first pass's shares race heavy or not each on its own, and under the least statistic a heavy share's settled leaders
keep their drift-free times where a light share's take their least samples: where some share raced heavy, every
settled time of the table is taken as its drift-free time before the leaders (:func:`settled_alike`), so that the
leaders beyond each replica's best, the leaders' heaviness and a time budget's cut compare one kind across shares;
each replica's best is still ranked on its share's times before that (its own race's kind).

A replica's share (step 2) and its race of the leaders (step 4) take as long as they take: the exchanges after
them wait for the slowest replica as long as it shows progress (:class:`~triton_dist_tune.faults.progress.RoundWatch`
on the replica group: every rank beats in the job's store while it works), and end every rank within
``T + max(1, T/10)`` s of a replica's end, or at once when it leaves with an error. A replica group without a
key-value store (mpi4py) keeps one deadline per exchange, ``T + max(1, T/10)`` s per config of the share or leader.

A time budget (``budget=``) bounds each replica's share on its group's agreed clock; the exchanges across replicas
carry each replica's clock and whether it cut (the same on every rank of a replica, so every position reads the
same), and once the latest clock is spent the leaders are not raced again: the first pass decides, a cut (the least
first-pass time among the leaders, chosen as in step 4). It decides too when the budget ended the leaders' race
before it warmed up every leader on every replica (a leader left out is not failed), or before its last round on
some replica (the leaders' exchange carries whether each replica's race was cut, the same on every rank of it): each
replica's race checks the budget on its own group's clock, so one cut after its screening round held one short
sample per leader where another had settled them, and a leader's MAX over replicas joined a screening sample to a
drift-free time (the ranks' tables of the same leaders differed, 1 sample against 7, and a key chose the config
least in the screening over the one best alone; tests/test_replicas.py). A replica whose race the budget
cut before its settled rounds says so in the gather (the same on every rank of it): its survivors hold screening
times alone, of the kind of a stopped config's, and rank after every other replica's survivors, in the leaders and
in the first pass's decision (on the modelled device of tests/test_sift.py, 16 such survivors of one screening round
read faster in ms than the other replica's settled winner, best alone by 8%, and the cut chose one of them in 4 keys
of 4).

The disk cache holds one decision per key for the whole layout; the rank that is group rank 0 of replica 0 alone
reads and writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import AutotuneError, BadInputError, MismatchError
from ..faults.progress import RoundWatch
from ..faults.recovery import warn_timeouts_differ
from ..faults.watchdog import exchange_timeout
from ..group.agreement import agree, attempt, unwrap_outcomes
from ..group.channel import Group
from ..records import LEAST, MEDIAN, Decision, Outcome
from ..space import fingerprint
from .budget import LEFT_OUT, Budget
from .leaders import decision, heavy_leaders, leaders, leaders_plan
from .lockstep import Measurer, Todo
from .noise import retaken, statistic
from .once import untimed_decision

#: the agreement across replicas' field of the tuning's timeout: replicas that differ in it are warned, not stopped
_TIMEOUT = "timeout"
#: a time budget's clock as the replicas exchange it: (cut on some replica, the latest agreed seconds)
Clock = tuple[bool, float]
#: a leader's outcome as each replica sends it in the leaders' exchange: (time, least sample, spread)
Leader = tuple[float, float, float]


@dataclass(frozen=True)
class Layout:
    """A group that tunes in lock-step (``group``) and the ranks at its position in every replica (``replicas``)."""

    group: Group
    replicas: Group

    def __post_init__(self) -> None:
        same_kind = self.group.identity[0] == self.replicas.identity[0]  # torch's and MPI's numbers may differ
        shared = sorted(set(_members(self.group)) & set(_members(self.replicas))) if same_kind else []
        if len(shared) > 1:  # a replica group holds one rank of each replica: only this rank is in both
            raise BadInputError(
                f"autotune_replicas: its group '{self.replicas.title}' shares ranks {shared} with autotune_pg's group "
                f"'{self.group.title}'; it must link the same position of every replica, one rank of each (with a "
                f"DeviceMesh of dims (dp, tp): autotune_pg=mesh.get_group('tp'), "
                f"autotune_replicas=mesh.get_group('dp'))")

    @property
    def reads_cache(self) -> bool:
        """Whether this rank reads and writes the disk cache for the whole layout."""
        return self.group.rank == 0 and self.replicas.rank == 0

    def entry(self, entry: str) -> str:
        """The cache entry of a decision for this layout (the group's entry, made distinct per replica count)."""
        return fingerprint(f"{entry}/replicas{self.replicas.size}")

    def agree(self, name: str, key_text: str, space_text: str, timeout: float | None,
              problem: str | None = None, own_timeout: float | None = None, *, extra_text: str) -> None:
        """Raise the same error on every rank when some replica reports a ``problem`` (a failing ``key_fn``), or
        replicas differ in key, config space, group size or ``cache_key_extra`` (``extra_text``, as the group's
        agreement shows it) (:class:`MismatchError`): the layout keeps one decision, under replica 0's text.
        ``own_timeout``: this rank's tuning timeout, agreed too: replicas that differ in it are warned, not stopped
        (as a group's ranks are)."""
        fields = {"group size": str(self.group.size), "config space": space_text, "key": key_text,
                  "cache_key_extra": extra_text}
        if own_timeout is not None:
            fields[_TIMEOUT] = f"{own_timeout:g} s"
        found = agree(self.replicas, fields, f"[{name}] agree across replicas", timeout, problem)
        if found.notes:
            raise BadInputError(f"{name}: " + "; ".join(f"replica {j}: {p}" for j, p in found.notes))
        for what, holders in found.differ.items():
            detail = "; ".join(f"replicas {ranks}: {text}" for ranks, text in holders)
            if what == _TIMEOUT:
                warn_timeouts_differ(name, f"the replicas linked by group '{self.replicas.title}'", detail)
                continue
            raise MismatchError(f"{name}: the replicas linked by group '{self.replicas.title}' differ in {what}: "
                                f"{detail}")

    def lookup(self, read: Callable[[], Any], what: str, timeout: float) -> Any:
        """``read()`` on the cache-reading rank alone; its answer, or its error, on every rank of every replica."""
        found = self.group.broadcast(attempt(read) if self.reads_cache else None, what, timeout=timeout)
        found = self.replicas.broadcast(found, f"{what} (across replicas)", timeout=timeout)
        return unwrap_outcomes(self.group, [(0, found)], what, AutotuneError)

    def share(self, kept: Sequence[int]) -> list[int]:
        """The configs this replica measures in the first pass; a lone config is every replica's (run once on each,
        untimed: :meth:`~.once.Once.once_across`)."""
        return [i for position, i in enumerate(kept)
                if len(kept) == 1 or position % self.replicas.size == self.replicas.rank]

    def gather(self, outcomes: list[Outcome], noisy: bool, unsettled: bool, clock: Clock, what: str,
               timeout: float) -> tuple[list[Outcome], dict[int, int], bool, list[int], Clock]:
        """Every replica's outcomes, one per config, sorted by config index, and which replica measured each usable
        one (index -> replica: its share's, or resumed there); whether some replica's race took least
        samples (``noisy``: each replica sends its race's); the survivors that hold screening times alone, of the
        replicas whose race a time budget cut before it settled (``unsettled``: each replica sends its race's), by
        index; and the replicas' time budget's clock (identical on every rank: each replica sends its group's agreed
        clock)."""
        table, owners, noisy, screened, cut, elapsed = self.replicas.combine((outcomes, noisy, unsettled, *clock),
                                                                             what, _merged, timeout)
        return table, owners, noisy, screened, (cut, elapsed)

    def watch(self, label: str, timeout: float) -> RoundWatch:
        """The progress watch of one tuning across the replicas (every rank of the replica group starts it at the
        same point: after the agreement, before its share)."""
        return RoundWatch.of_tuning(self.replicas, label, timeout, "replica")

    def worst(self, times: dict[int, Leader | str], noisy: bool, short: bool, clock: Clock, what: str,
              timeout: float) -> tuple[dict[int, float | str], dict[int, float], bool, bool, Clock]:
        """Per config, the MAX over replicas of their group times of the agreed statistic (``times``: each
        leader's (time, least sample, spread), or why it has none; the least samples where some replica's race of the
        leaders took least samples, else the times), or the errors of the replicas where it failed; per config with a
        time, the MAX over replicas of its spread (so that a decision's near tie, judged on its leaders' spreads, is
        the same on every rank: each replica's race gives its own); whether some
        replica's race of the leaders took least samples; whether the time budget ended some replica's race of the
        leaders before its last round (``short``: each replica sends its race's; its leaders' times are then of
        fewer samples, or of screening samples alone, than another replica's); and the replicas' time budget's
        clock, as :meth:`gather`."""
        worst, spreads, noisy, short, cut, elapsed = self.replicas.combine((times, noisy, short, *clock), what,
                                                                           _worst, timeout)
        return worst, spreads, noisy, short, (cut, elapsed)


def _members(group: Group) -> tuple:
    """The job's ranks in ``group`` (torch's global ranks, or MPI's ranks in COMM_WORLD), where known; else ()."""
    kind, _, ranks = (tuple(group.identity) + (None, None, None))[:3]
    known = kind in ("torch", "mpi") and isinstance(ranks, tuple) and len(ranks) == group.size
    return ranks if known else ()


def kept_by_all(kept: list[list[int]]) -> list[int]:
    """The configs that every replica keeps (each replica's ``kept`` agreed inside its group already)."""
    common = set(kept[0]).intersection(*kept[1:])
    if not common:
        raise BadInputError(f"prune_fn left no config that every replica keeps (replicas kept {kept})")
    return sorted(common)


def _clock(contributions: list[tuple]) -> list[Any]:
    """The replicas' budget clock from their contributions (each ending in its group's cut and agreed seconds):
    cut on some replica, the latest clock."""
    return [any(c[-2] for c in contributions), max(float(c[-1]) for c in contributions)]


def _merged(contributions: list[tuple[list[Outcome], bool, bool, bool, float]]) -> list[Any]:
    outcomes: dict[int, Outcome] = {}
    for j, (table, *_) in enumerate(contributions):
        for outcome in table:
            # its replica named, as a leader's failure is (:func:`_worst`); not a failure resumed from an earlier
            # attempt's journals: merged across replicas (``recovery.across``), it may have failed on another
            # replica than the one whose share holds it (before, a leader that failed on replica 0 read "replica 1")
            if outcome.state == "failed" and not outcome.resumed:
                outcome = replace(outcome, error=f"replica {j}: {outcome.error or '?'}")
            outcomes.setdefault(outcome.index, outcome)
    owners: dict[int, int] = {}  # which replica measured each usable outcome (only its share's replica sends one)
    for j, (table, *_) in enumerate(contributions):
        for outcome in table:
            if outcome.usable:
                owners.setdefault(outcome.index, j)
    screened = sorted(o.index for table, _, unsettled, *_ in contributions if unsettled
                      for o in table if o.state == "measured")
    return [[outcomes[i] for i in sorted(outcomes)], owners, any(c[1] for c in contributions), screened,
            *_clock(contributions)]


def _worst(contributions: list[tuple[dict[int, Leader | str], bool, bool, bool, float]]) -> list[Any]:
    per_replica = [times for times, *_ in contributions]
    noisy = any(c[1] for c in contributions)  # the agreed statistic: least samples where some replica's race was noisy
    short = any(c[2] for c in contributions)  # some replica's race of the leaders cut before its last round
    out: dict[int, float | str] = {}
    for index in sorted(per_replica[0]):
        values = [times[index] for times in per_replica]
        errors = [f"replica {j}: {v}" for j, v in enumerate(values) if isinstance(v, str) and v != LEFT_OUT]
        # a leader the time budget left out on some replica (and failed on none) is no failure: LEFT_OUT
        out[index] = ("; ".join(errors) if errors else LEFT_OUT if LEFT_OUT in values
                      else max(float(v[1] if noisy else v[0]) for v in values))
    spreads = {index: max(float(times[index][2]) for times in per_replica)
               for index in sorted(per_replica[0]) if isinstance(out[index], float)}
    return [out, spreads, noisy, short, *_clock(contributions)]


def settle(layout: Layout, measurer: Measurer, outcomes: list[Outcome], todo: list[Todo],
           precompile: Callable[[], None], todo_of: Callable[[int], Todo], refine_top: int, label: str,
           timeout: float, kept: int, timing: str) -> Decision:
    """Steps 2 to 6: ``precompile()``, race this replica's ``todo`` (``outcomes``: the rest of its share, resumed,
    and the pruned configs), gather the replicas' outcomes, race the leaders on every replica (the next leaders
    again while every leader failed on some replica), and decide on the MAX over replicas of each leader's group
    time. The replicas watch each other's progress before each exchange across them (:meth:`Layout.watch`); a rank
    that leaves with an error says so to the replicas waiting for it. ``kept``: how many configs pruning kept (a
    share's count sets the deadlines without a watch); one alone is run once on every replica, untimed, nothing
    compiled ahead, and decided without timing as with no replicas (:mod:`~triton_dist_tune.measure.once`)."""
    share = len(layout.share(range(kept)))
    with layout.watch(label, timeout) as watch:
        if kept == 1:
            outcomes = outcomes + measurer.once_across(todo, layout.replicas, watch, label, timeout)
            return untimed_decision(outcomes, timing) or decision(
                outcomes, [o.index for o in outcomes if o.state != "pruned"], timing, max(o.samples for o in outcomes))
        precompile()
        return _settle(layout, measurer, outcomes + measurer.lockstep(todo), todo_of, refine_top, label, timeout,
                       share, timing, watch)


def _settle(layout: Layout, measurer: Measurer, outcomes: list[Outcome], todo: Callable[[int], Todo],
            refine_top: int, label: str, timeout: float, share: int, timing: str, watch: RoundWatch) -> Decision:
    budget = measurer.budget
    what = f"{label} outcomes across replicas"
    table, owners, noisy, screened, clock = layout.gather(outcomes, _noisy(measurer), _unsettled(measurer),
                                                  (budget.cut, budget.elapsed), what,
                                                  watch.arrive(0, what, exchange_timeout(timeout) * max(1, share)))
    watch.passed(0)
    _take(budget, clock)
    # one statistic for every replica's times, agreed from the exchange (the same on every rank), before the leaders
    # (under medians only a resumed config that left its race: a measured one read back keeps its drift-free time)
    table = retaken(table, noisy, lambda o: noisy or (o.resumed and o.state == "stopped"))
    # across shares one kind of settled time: drift-free where some share raced heavy (:func:`settled_alike`); each
    # replica's best is still the one ranked first on its share's times before that
    shares, table = table, settled_alike(table, noisy)
    attempt, unreached = 1, False
    while True:  # a leaders' race, and again while every leader failed on some replica (the same on every rank)
        top = leaders(table, refine_top, screened, owners, within=shares)
        # the first pass decides, with no leaders' race (a cut): the budget is spent, or it ended the last leaders'
        # race early (``unreached``, agreed: it may cut a race on a predicted round before it is spent)
        if (budget.spent or unreached) and any(o.usable for o in table):
            budget.cut = True
            return _statistic(decision(table, top, timing, max(o.samples for o in table), screened), noisy)
        chosen, failed, unreached = _race_leaders(layout, measurer, table, top, owners, todo, noisy, screened,
                                                  label, timeout, timing, watch, attempt)
        # every leader failed on some replica, and the gathered table holds usable configs not raced yet: the next
        # leaders, by the same rule on the same table (both the same on every rank), are raced on every replica
        table, shares = _failing(table, failed), _failing(shares, failed)
        if chosen.index >= 0 or not any(o.usable for o in table):
            return chosen
        then = (f"racing the next leaders of the first pass on every replica (leaders' race {attempt + 1})"
                if not (budget.spent or unreached) else "the time budget is spent or ended the leaders' race: the "
                "first pass decides among the next leaders")
        measurer.log.warning("%s every leader failed on some replica (configs %s); %s", label,
                             ", ".join(map(str, sorted(failed))), then)
        attempt += 1


def _race_leaders(layout: Layout, measurer: Measurer, table: list[Outcome], top: list[int], owners: dict[int, int],
                  todo: Callable[[int], Todo], noisy: bool, screened: list[int], label: str, timeout: float,
                  timing: str, watch: RoundWatch, attempt: int) -> tuple[Decision, dict[int, str], bool]:
    """Race the leaders ``top`` of the gathered ``table`` on every replica (the ``attempt``-th leaders' race: the
    watch's round), exchange their times and decide (step 5); returns the decision, the leaders that failed on some
    replica (index -> the replicas' errors) and whether the time budget ended the race before it reached every leader
    on every replica or its last round on some replica (the first pass then decides), all the same on every rank."""
    budget = measurer.budget
    # same leaders, same order everywhere, raced to the end on every replica (:func:`leaders_plan`)
    # heavy or not alike on every replica, agreed from the gathered table (:func:`heavy_leaders`)
    plan = leaders_plan(measurer.plan.race, len(top), heavy_leaders(table, top, owners, measurer.plan.race))
    raced = {o.index: o for o in measurer.lockstep([todo(i) for i in top], plan)}
    times = {i: (o.time, o.least(), o.spread or 0.0) if o.usable and o.time is not None else (o.error or o.state)
             for i, o in raced.items()}
    what = f"{label} leaders across replicas" + (f" (race {attempt})" if attempt > 1 else "")
    deadline = watch.arrive(attempt, what, exchange_timeout(timeout) * max(1, len(top)))
    worst, spreads, noisy_leaders, short, clock = layout.worst(times, _noisy(measurer), _cut_short(measurer),
                                                               (budget.cut, budget.elapsed), what, deadline)
    watch.passed(attempt)
    _take(budget, clock)
    # the time budget ended the leaders' race before it reached every leader on every replica, or before its last
    # round on some replica (the same on every rank): the first pass decides, as when the budget was spent before it
    # (a leader that failed is failed). Each replica's race checks the budget on its own group's clock, so a cut one
    # holds fewer samples, or one screening sample alone, where another settled its leaders: their MAX joined unlike
    # kinds (tests/test_replicas.py)
    unreached = LEFT_OUT in worst.values() or short
    failed = {i: f"on some replica: {v}" for i, v in worst.items() if isinstance(v, str) and v != LEFT_OUT}
    final = []
    for outcome in _failing(table, failed):
        value = worst.get(outcome.index)
        if outcome.index in failed or unreached:  # failed (its gathered outcome, every rank's); or the first pass's
            pass
        elif value is not None:  # the same time and spread on every rank (MAX over replicas); its samples this one's
            outcome = replace(raced[outcome.index], state="measured", time=value, spread=spreads[outcome.index])
        elif outcome.state == "measured":  # beaten in the first pass: not in the final race
            outcome = replace(outcome, state="stopped")
        final.append(outcome)
    if not unreached and noisy_leaders != noisy:  # the configs outside the leaders' race: of its statistic too
        final = retaken(final, noisy_leaders, lambda o: o.index not in worst)
    chosen = decision(final, top, timing, max(o.samples for o in final), screened if unreached else ())
    return _statistic(chosen, noisy if unreached else noisy_leaders), failed, unreached


def _failing(outcomes: Sequence[Outcome], failed: dict[int, str]) -> list[Outcome]:
    """``outcomes``, those of ``failed`` (index -> error) failed with that error (their gathered outcome)."""
    return [replace(o, state="failed", time=None, error=failed[o.index]) if o.index in failed else o
            for o in outcomes]


def settled_alike(outcomes: Sequence[Outcome], noisy: bool) -> list[Outcome]:
    """``outcomes`` (the gathered first pass, of the agreed statistic), with one kind of settled time across shares:
    under the least statistic (``noisy``), where some share raced heavy (an outcome with ``settled_time``: its
    settled leaders keep their drift-free times under either statistic), every usable outcome with settled samples
    takes its drift-free time (``drift_free``, marked ``settled_time``). Else a light share's settled leaders held
    their least samples, which read lower than any median, beside a heavy share's drift-free times, and the leaders
    beyond each replica's best and a time budget's cut compared the two across shares (tests/test_replicas.py). The
    drift-free time is the one kind both have: a heavy share's least sample is a screening sample or a fast clock's
    (:attr:`~triton_dist_tune.records.Outcome.settled_time`). Unchanged where no share raced heavy (every time of the
    table its least sample) or under medians (a settled leader's time is then drift-free on either kind of share)."""
    if not (noisy and any(o.usable and o.settled_time for o in outcomes)):
        return list(outcomes)
    return [replace(o, time=o.drift_free, settled_time=True)
            if o.usable and not o.settled_time and not o.probed and o.drift_free is not None else o for o in outcomes]


def _noisy(measurer: Measurer) -> bool:
    """Whether this replica's last race (the same on every rank of it) took each config's least sample, not its
    median (:meth:`~.race.Race.location`); False where it raced nothing."""
    race = getattr(measurer, "race", None)
    return race is not None and statistic(race.location()) == LEAST


def _unsettled(measurer: Measurer) -> bool:
    """Whether the time budget cut this replica's race (the same on every rank of it) before it ran a settled round
    (before its settled block, or right as the block began: a heavy race's starts after one screening round): its
    survivors then hold the times of screening samples alone."""
    race = getattr(measurer, "race", None)
    return race is not None and race.cut and (race.settled_from is None or race.rounds <= race.settled_from)


def _cut_short(measurer: Measurer) -> bool:
    """Whether the time budget ended this replica's last race (the same on every rank of it) before its last round:
    its configs' times are then of fewer samples than a full race's."""
    race = getattr(measurer, "race", None)
    return race is not None and race.cut


def _statistic(chosen: Decision, noisy: bool) -> Decision:
    """``chosen``, its times said to be least samples where some replica's race that gave them was ``noisy``
    (:attr:`~triton_dist_tune.records.Decision.statistic`)."""
    chosen.statistic = LEAST if noisy else MEDIAN
    return chosen


def _take(budget: Budget, clock: Clock) -> None:
    """Take in the replicas' budget clock (the same on every rank of every replica)."""
    budget.agreed(clock[1])
    budget.cut = budget.cut or clock[0]
