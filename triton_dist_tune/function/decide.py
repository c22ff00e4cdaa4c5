"""Step 6 of a tuning: the group's choice from the outcomes every rank shares, and its cache record."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ..disk import logs
from ..disk.entries import MAX_ENTRY_BYTES
from ..disk.files import read_regular
from ..errors import AllConfigsFailedError, one_cause
from ..group.channel import Group
from ..group.leaving import result_kept_if_interrupted
from ..measure.noise import retaken, statistic
from ..measure.once import untimed_decision
from ..measure.race import Race
from ..measure.trial import Trial
from ..records import LEAST, MEDIAN, Decision, Outcome, finite_number, recorded_statistic
from ..stats import near_tie as near_tie_within
from .tuned import TunedFunction

log = logging.getLogger("triton_dist_tune")

#: when this process started using the tuner: a cache entry written since then was written by this job
_STARTED = time.time()


def decide(outcomes: list[Outcome], race: Race | None, timing: str) -> Decision:
    """The group's choice from outcomes every rank shares: the race's winner (the least median among the configs
    still running), else the least time among resumed or sharded outcomes; index -1 when nothing is usable. Every
    time of it is of its statistic (:func:`of_statistic`). A race that chose nothing (every config in it failed: a
    search's finalists) leaves the least time among the outcomes sampled outside it, never a probe's stand-in while
    one sampled is left; a stand-in chosen is provisional (``cut``: the next job tunes the key again). The only config
    of a key's space, run once untimed (:mod:`~triton_dist_tune.measure.once`), is chosen with no time or margin."""
    once = untimed_decision(outcomes, timing)
    if once is not None:
        return once
    told = statistic(race.location()) if race is not None else MEDIAN
    outcomes = of_statistic(outcomes, race, told)
    by_index = {o.index: o for o in outcomes}
    winner = race.winner() if race is not None else None
    usable = [o for o in outcomes if o.usable]
    if winner is None and usable:
        sampled = [o for o in usable if not o.probed]  # a probe's stand-in is a bound, never a sample
        candidates = [o for o in sampled if o.state == "measured"] or sampled or usable
        winner = min(candidates, key=lambda o: (o.time, o.index)).index
    rounds = race.rounds if race is not None else max((o.samples for o in outcomes), default=0)
    if winner is None:
        return Decision(-1, "", float("nan"), None, False, None, outcomes, timing, rounds)
    others = [o for o in usable if o.index != winner]
    runner_up = race.runner_up(winner) if race is not None and winner in race.entrants else None
    if race is not None and runner_up is not None:  # judged on the samples it shares with the winner
        margin, undecided = race.margin(winner, runner_up)  # not told apart yet: a near tie only within the spread
        near_tie = undecided and near_tie_within(margin, [o.spread for o in outcomes if o.index in (winner, runner_up)])
    elif others:
        runner_up = min(others, key=lambda o: (o.time, o.index)).index
        best = by_index[winner].time
        margin = by_index[runner_up].time / best - 1 if best > 0 else None
        near_tie = near_tie_within(margin, (by_index[winner].spread, by_index[runner_up].spread))
    else:
        margin, near_tie = None, False
    chosen = by_index[winner]
    decision = Decision(winner, chosen.config, chosen.time, margin, near_tie, runner_up, outcomes, timing, rounds)
    decision.cut = bool(race is not None and race.cut) or chosen.probed  # a bound chosen: provisional
    decision.statistic = told
    return decision


def of_statistic(outcomes: list[Outcome], race: Race | None, told: str) -> list[Outcome]:
    """``outcomes``, each usable one from outside ``race`` (the race that decides: a search's screening, an outcome
    read back from an earlier attempt's journal) with its time taken again from its group samples
    (``round_times``), of the statistic ``told``: their least (:data:`~triton_dist_tune.records.LEAST`), else their
    median. Its time was of another statistic, or another race's: a screening's median of 2-4 samples, or the
    statistic of the earlier attempt's race when it left it. Exact: a noisy race's time is the least of all its
    samples (a heavy race's settled leader keeps its drift-free time, its ``settled_time``, read back too); a quiet
    one's is their median for a config without settled samples (a screened or stopped one), and a settled leader's
    drift-free time (its ``drift_free``: a near-tie block's leaver read back). A probe's stand-in keeps its bound; with
    no race, every time is kept (sharded times are medians; read back all, a settled leader's time is drift-free)."""
    if race is None or not race.entrants:  # sharded (medians already) or every config resumed (an empty race): a
        return outcomes  # settled leader's time read back is drift-free
    raced = set(race.entrants)
    return retaken(outcomes, told == LEAST, lambda o: o.index not in raced)


def cache_record(name: str, key_text: str, group: Group, decision: Decision, source: str,
                 origin: str, rank_local: dict[str, Any] | None = None, replicas: int | None = None) -> dict[str, Any]:
    """The disk cache's record of ``decision``: the choice, how sure it is, and every config's outcome; ``source``:
    the fingerprint of the function's code (:attr:`~.tuned.TunedFunction.source_print`), ``origin``: where it is
    defined (:attr:`~.tuned.TunedFunction.origin`); ``rank_local``: a rank-local campaign's decision, tuned by one
    rank alone for a whole group (:class:`~triton_dist_tune.disk.entries.RankLocal`'s fields), recorded as is;
    ``replicas``: the replica count of a layout tuned as one (``autotune_replicas``; recorded where above 1: ``group``
    is then replica 0's group, and the entry serves every replica's)."""
    return {"function": name, "key": key_text, "source": source, "origin": origin, "group_size": group.size,
            "group": logs.group_title(group), "index": decision.index, "config": decision.config,
            "time_ms": decision.time_or_none, "statistic": decision.statistic,
            "margin": decision.margin, **({"untimed": True} if decision.untimed else {}),
            "near_tie": decision.near_tie, "runner_up": decision.runner_up,
            "timing": decision.timing, "search": decision.search, "clock": decision.clock, "rounds": decision.rounds,
            "tuning_seconds": decision.seconds,
            **({"breakdown": decision.breakdown.to_json()} if decision.breakdown is not None else {}),
            "created": time.time(), "measurements": [o.to_json() for o in decision.outcomes],
            **({"provisional": True} if decision.cut else {}),
            **({"rank_local": rank_local} if rank_local is not None else {}),
            **({"replicas": replicas} if replicas is not None and replicas > 1 else {})}


def served(data: dict[str, Any]) -> dict[str, Any]:
    """What group rank 0 shares of a cache record it serves: the choice and the measured outcomes (pruned and
    unscreened configs left out), so that every rank's ``tuner.decisions`` holds the decision (the seeds of a later
    search of a nearby key come from it, as after a tuning)."""
    keep = ("index", "config", "time_ms", "statistic", "margin", "near_tie", "runner_up", "timing", "search", "clock",
            "rounds", "untimed")
    outcomes = [o for o in data.get("measurements") or [] if isinstance(o, dict) and o.get("state") != "pruned"]
    return {**{k: data.get(k) for k in keep}, "measurements": outcomes}


def decision_from_record(record: Any, index: int, description: str) -> Decision:
    """The :class:`Decision` of a served cache record (:func:`served`): config ``index`` with the record's times;
    anything malformed in it is left out (the choice itself was checked against the space)."""
    data = record if isinstance(record, dict) else {}
    outcomes = [o for o in (Outcome.from_json(m) for m in data.get("measurements") or []) if o is not None]

    def number(value: Any) -> float | None:
        return float(value) if finite_number(value) else None

    runner_up = data.get("runner_up")
    decision = Decision(index, description, number(data.get("time_ms")) or float("nan"), number(data.get("margin")),
                        data.get("near_tie") is True, runner_up if type(runner_up) is int else None, outcomes,
                        str(data.get("timing") or "steady"), data.get("rounds") if type(data.get("rounds")) is int
                        else 0)
    decision.search = str(data.get("search") or "")
    decision.clock = str(data.get("clock") or "eager")
    decision.statistic = recorded_statistic(data)
    decision.cached = True
    decision.untimed = data.get("untimed") is True
    return decision


def failure_text(outcomes: list[Outcome], ranks: int) -> str:
    """The end of the message when every config failed: each config's error, or, when every failed config failed
    with the same error, that error once, as what it most likely is (the function or its environment: a missing
    ``init_process_group``, no GPU driver), not the configs. ``ranks``: how many ranks' errors ``outcomes`` hold (the
    group's size; times the replicas' where replicas tune as one). Where they hold one rank's, this process's, the
    errors' ``rank 0`` is this process, named by its rank in the job (in a job of several processes tuning alone,
    each would say rank 0); a one-rank replica's errors hold every replica's, each ``rank 0`` of its own group (a
    ``replica j: rank 0``), and every rank says the same (tests/test_replicas.py: rank 1 named replica 0's failures
    its own)."""
    failed = [o for o in outcomes if o.state == "failed"]
    me = logs.global_rank()
    errors = [(o.error or "?") if ranks > 1 or me == 0 else re.sub(r"\brank 0: ", f"rank {me}: ", o.error or "?")
              for o in failed]
    same = one_cause(errors)
    if same is not None:
        return same
    return " on some rank: " + "; ".join(f"config {o.index} ({o.config}): {e}" for o, e in zip(failed, errors,
                                                                                                strict=True))


def raise_with_own_cause(error: AllConfigsFailedError, trial: Trial | None, label: str) -> NoReturn:
    """Raise ``error`` (every config failed) chained to the last exception a config's run raised on this rank, if
    any (``trial.last_error``), whose traceback the rank's log gets too: the user's frames, not only its text."""
    own = trial.last_error if trial is not None else None
    if own is None:
        raise error
    logs.rank_log().error("%s the last error a config raised on this rank:", label, exc_info=own)
    raise error from own


def conclude(group: Group, label: str, decision: Decision, timeout: float,
             store: Callable[[], Any] | None, replicas: int = 1, keep_now: Callable[[], None] | None = None,
             keep_later: Callable[[Any], None] | None = None) -> None:
    """Every rank raises the same error when no config is usable (``replicas``: how many replicas of ``group``
    tuned as one, whose errors the decision holds: :func:`failure_text`); else group rank 0 calls ``store`` (None:
    this rank does not write the cache), and the group waits for it; nothing is logged (:func:`say_decision`). The
    decision itself is already identical on every rank (it was computed from exchanged data only), but for a
    search's summary (:attr:`Decision.search`): its seconds are each rank's own (a rank leaves the group's last
    exchange at its own time), so the exchange that waits for the write carries rank 0's, the one the cache holds,
    and every rank takes and logs it, and keeps the decision (``keep_now``). Where an interruption ends this rank's
    wait for that exchange's result, or comes before ``keep_now`` has kept it, the group reads the result at this
    rank's next call on it and gives it to ``keep_later`` (:func:`decision_kept_later`).
    (The decision's own :attr:`~Decision.seconds` and :attr:`~Decision.breakdown`, and each outcome's ``own``, stay
    this rank's: figures of this rank, which nothing agreed reads.)"""
    if decision.index < 0:
        if decision.search:  # no exchange on this path: this rank's own summary
            logs.rank_log().info("%s %s", label, decision.search)
        text = failure_text(decision.outcomes, group.size * replicas)
        logs.rank_log().error("%s every config failed%s", label, text)
        raise AllConfigsFailedError(f"{label} every config failed{text}")
    if group.rank == 0 and store is not None:
        try:
            store()
        except OSError as exc:
            log.warning("triton_dist_tune: could not write the cache (%s)", exc)
    # an interruption before the decision is kept is read at the next call, only where it came in that exchange or
    # after it: one before it (in the cache write, or before the exchange's first step) left the previous exchange's
    # result awaited, which is no decision (before, that was read as one at the next call: the key decided on this
    # rank alone, the others tuning it again)
    with result_kept_if_interrupted(group, keep_later):
        agreed = group.broadcast(decision.search if group.rank == 0 else None, f"{label} decision written",
                                 timeout=timeout)
        decision.search = agreed if isinstance(agreed, str) else ""
        if keep_now is not None:
            keep_now()


def keep_decision(tuner: TunedFunction, group: Group, key: Any, agreed: Callable[[dict[str, Any]], Any] | None,
                  decision: Decision, index: int) -> None:
    """Keep ``decision`` (config ``index``) of ``key``, which every rank of ``group`` has now: the tuner's record of
    it (``tuner.decisions``), and the caller's (``agreed``, given the config)."""
    tuner.decisions[(group.name, key)] = decision
    if agreed is not None:
        agreed(tuner.space[index])


def decision_kept_later(tuner: TunedFunction, group: Group, key: Any,
                        agreed: Callable[[dict[str, Any]], Any] | None, decision: Decision, label: str,
                        remove_journal: Callable[[], None]) -> Callable[[Any], None]:
    """What to do with the result of :func:`conclude`'s exchange where an interruption ended this rank's wait for
    it, read at its next call on the group (:meth:`~triton_dist_tune.group.channel.Group.keep_unread`): the tuning
    ended well on every rank, so this rank keeps ``decision`` as its peers did, removes its crash journal of the
    tuning (``remove_journal``), as a tuning that ends does, and logs it."""

    def keep(agreed_search: Any) -> None:
        decision.search = agreed_search if isinstance(agreed_search, str) else ""
        keep_decision(tuner, group, key, agreed, decision, decision.index)
        try:
            if not decision.cut:  # (a cut's choice is provisional: its journals stay for the next job to resume)
                remove_journal()
        except OSError as exc:  # (a journal that cannot be removed is the journal's to say; the decision stands)
            log.warning("triton_dist_tune: %s could not remove this rank's journal of the tuning: %s", label, exc)
        logs.rank_log().info("%s the decision's last exchange, which an interruption ended this rank's wait for, "
                             "read at this rank's next call on the group: kept, as on every rank", label)
        say_decision(label, decision)

    return keep


def say_decision(label: str, decision: Decision) -> None:
    """The rank log's lines of a decision every rank has (:func:`conclude`): the search's summary, then the choice."""
    if decision.search:
        logs.rank_log().info("%s %s", label, decision.search)
    if decision.untimed:
        logs.rank_log().info("%s decision: config %d (%s)%s", label, decision.index, decision.config,
                             logs.margin_text(decision))
        return
    logs.rank_log().info("%s decision: config %d (%s), group time %.4f ms%s; timed %s%s%s%s", label, decision.index,
                         decision.config, decision.time, logs.margin_text(decision),
                         "on the device (CUDA graph replays)" if decision.clock == "graph" else "eagerly",
                         f"; {decision.search}" if decision.search else "",
                         "; cut short by the time budget: provisional (a later job tunes it again)"
                         if decision.cut else "", f"; {logs.LEAST_NOTE}" if decision.statistic == LEAST else "")


def warn_if_another_group_chose_otherwise(path: Path, name: str, key_text: str, group: Group,
                                          decision: Decision) -> None:
    """Group rank 0, before writing ``path``: when another group of this job (the file was written since this
    process started, by another group) chose another config for the same key, say so: one entry holds one choice
    per key and group size, so the last writer wins. Tensor-parallel replicas should be tuned as one."""
    try:
        if path.stat().st_mtime < _STARTED:
            return
        data = json.loads(read_regular(path, MAX_ENTRY_BYTES))  # a FIFO there: refused, never waited on
    except Exception:  # (RecursionError too) an unreadable file is the cache's to report; this is only a warning
        return
    if not isinstance(data, dict) or data.get("group") is None or data.get("index") is None:  # a damaged file: the
        return  # cache reports it, not this warning
    other, title = data.get("group"), logs.group_title(group)
    if other == title or data.get("index") == decision.index:
        return
    message = (f"[{name}] key={key_text}: group '{title}' chose config {decision.index} ({decision.config}), but group "
               f"'{other}' of this job chose config {data.get('index')} ({data.get('config')}) for the same key and "
               "group size; both share one cache entry, which keeps the last choice. To tune replicated "
               "tensor-parallel groups once and give them one choice, pass autotune_replicas= (the group that links "
               "the replicas; see docs/scale.md)")
    log.warning("triton_dist_tune: %s", message)
    logs.rank_log().warning("%s", message)
