"""The replicas' leaders (:mod:`~triton_dist_tune.measure.replicas`, step 4): which configs of the gathered first pass
are raced again on every replica, the plan of that race, and the decision among them."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from .. import stats
from ..records import Decision, Outcome
from .race import RacePlan

#: leaders at the least: the replicas race at least this many again, whatever ``refine_top``
MIN_LEADERS = 2


def leaders_plan(plan: RacePlan, count: int, heavy: bool | None = None) -> RacePlan:
    """The plan of the leaders' race (``count`` leaders), in which every leader runs every round on every replica:
    each replica's race decides on its own group's samples alone, so a leader that left it on one replica (a sift, a
    settled block of fewer than the leaders, clearly slower, ``early_stop``, ``far_behind``, a near-tie block's
    leavers) held fewer samples there than on another, of the screening alone where it left before the settled
    rounds, and its MAX over replicas joined that time to another replica's settled one, the ranks' tables of the
    same leaders differing (:mod:`~triton_dist_tune.measure.replicas`). So ``refine_top`` chose them and bounds their
    race no further (its ``keep_top`` would sift or cut 2 leaders to 1 on each replica alone), its settled block holds
    every leader (``final_top`` at least ``count``, a heavy race's ``final_top_heavy`` above it and ``sift_top`` that
    ``final_top``: in steady timing; with ``refine_top`` 4 or more a heavy race of the leaders sifted them to 3), no
    config leaves the race before its end (``stops`` off: on a device clock a leader 2x another on one replica alone
    was ``far_behind`` there after one round, and the other, left alone, ended that replica's race with one screening
    sample; in cold timing a leader clearly slower on one replica left it after 2 of 10 rounds;
    tests/test_replicas.py), and no near-tie block runs (``tie_blocks``: more rounds on one replica alone). The
    leaders are few (:data:`MIN_LEADERS`, or ``refine_top``): all of them run ``max_rounds`` (cold timing) or the
    settled rounds. ``heavy``: whether the race is heavy (:func:`heavy_leaders`, the same on every replica; None:
    each replica's race judges it on its own screening leader)."""
    return replace(plan, keep_top=None, final_top=max(plan.final_top, count) if plan.final_top else 0,
                   final_top_heavy=max(plan.final_top_heavy, count + 1) if plan.final_top_heavy else 0, sift_top=0,
                   heavy=heavy, stops=False, tie_blocks=0)


def heavy_leaders(outcomes: Sequence[Outcome], top: Collection[int], owners: Mapping[int, int],
                  plan: RacePlan) -> bool:
    """Whether the leaders' race (``top``) is heavy on every replica: the slowest replica's best leader (each
    replica's least time among the leaders it measured in the first pass, ``owners``) takes ``heavy_from_ms`` or
    more, as a race judges its screening leader, whose time is the MAX over the ranks that time it (here every rank
    of every replica). Judged by each replica on its own leader, a replica on faster devices raced the leaders light
    (medians of ``final_rounds`` settled rounds, least samples under noise) where another raced them heavy
    (``heavy_rounds``, drift-free times under either statistic): a leader's MAX over replicas then joined two
    statistics (tests/test_sift.py). From the gathered table: the same on every rank."""
    best: dict[int, float] = {}
    for o in outcomes:
        if o.index in top and o.usable and o.index in owners:
            best[owners[o.index]] = min(best.get(owners[o.index], float("inf")), float(o.time))
    return plan.heavy_from_ms > 0 and bool(best) and max(best.values()) >= plan.heavy_from_ms


def decision(outcomes: list[Outcome], top: Sequence[int], timing: str, rounds: int,
             screened: Collection[int] = ()) -> Decision:
    """The least over the leaders of their time (the MAX over replicas), ties to the lower index, a leader of
    ``screened`` (where the first pass decides: a survivor a cut left with screening times alone) only where no
    other is usable; the runner-up is the next leader. Index -1 when every leader failed."""
    usable = sorted((o for o in outcomes if o.index in top and o.usable),
                    key=lambda o: (o.index in screened, o.time, o.index))
    if not usable:
        return Decision(-1, "", float("nan"), None, False, None, outcomes, timing, rounds)
    chosen = usable[0]
    runner_up = usable[1] if len(usable) > 1 else None
    margin = runner_up.time / chosen.time - 1 if runner_up is not None and chosen.time else None
    near_tie = runner_up is not None and stats.near_tie(margin, (chosen.spread, runner_up.spread))
    return Decision(chosen.index, chosen.config, chosen.time, margin, near_tie,
                    runner_up.index if runner_up is not None else None, outcomes, timing, rounds)


def leaders(outcomes: Sequence[Outcome], count: int, screened: Collection[int] = (),
            owners: Mapping[int, int] | None = None, within: Sequence[Outcome] | None = None) -> list[int]:
    """The leaders of the gathered table, by index: each replica's best survivor (``owners``: index -> the replica
    that measured it; ranked inside its share, whose times all come from one replica's devices), and up to
    ``max(count, 2)`` in all, the usable configs that ended their replica's race still running (``measured``: each
    replica's settled survivors, whose times are of one kind) with the least times, those a time budget cut before
    they settled (``screened``) after the others, then, where those are fewer, the other usable configs with the
    least times (ties: the lower index). Each replica's times come from its own devices, which may run every config
    faster or slower than another's: ranked across shares alone, one replica's survivors could take every leader
    place, and another's best was never raced again (:mod:`~triton_dist_tune.measure.replicas`). A
    time of a config that left its race in the screening is of another kind: on a device at its power limit the
    screening's short samples read faster in ms than any settled one, and such a config would take the place of
    some replica's settled winner (:mod:`~triton_dist_tune.measure.replicas`). ``within``: the same outcomes with
    the times each share's best is ranked by (default: ``outcomes``';
    :func:`~triton_dist_tune.measure.replicas.settled_alike` gives the others one kind across shares, where a
    share's own times are each of one kind)."""
    def ranked(table: Sequence[Outcome]) -> list[Outcome]:
        return sorted((o for o in table if o.usable),
                      key=lambda o: (o.state != "measured", o.index in screened, o.time, o.index))

    usable = ranked(outcomes)
    firsts: dict[int, int] = {}  # each replica's best survivor: the first of its share in that order
    for o in ranked(within) if within is not None else usable:
        if o.state == "measured" and owners is not None and o.index in owners:
            firsts.setdefault(owners[o.index], o.index)
    chosen = set(firsts.values())
    for o in usable:
        if len(chosen) >= max(count, MIN_LEADERS):
            break
        chosen.add(o.index)
    return sorted(chosen)

