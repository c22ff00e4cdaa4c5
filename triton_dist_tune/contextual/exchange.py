"""The exchange at the end of each tuning run, and how every rank updates the same tracks from it.

One ``allgather`` on the tuner's control channel carries each rank's :class:`~.state.RunRecord` (newly met
(kernel, key)s, launch times and errors), whether the function raised, and whether the rank compiles ahead. Every
rank then applies the same data in the same order: new tracks are created (:func:`create_tracks`: resumed from the
journals every rank gathered before the first run, looked up in the disk cache by group rank 0), then every track
takes one step (:func:`step_track`), so the number of runs and every choice are identical everywhere. What the
exchange told (:class:`~.state.Exchanged`) decides what is compiled ahead before the next run (:mod:`~.compiling`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import settings
from ..errors import AutotuneError, BadInputError, GroupTimeoutError, MismatchError, describe_error, per_rank
from ..faults.watchdog import exchange_timeout
from ..group.agreement import difference, from_root
from ..group.leaving import result_kept_if_interrupted
from . import intercept
from .compiling import compiles_ahead
from .decisions import record_decision
from .holding import holding, undeferred
from .schedule import PruningError, Track
from .state import CallState, Exchanged
from .tracks import TrackId, TrackInfo, earlier_outcomes, forget_choice, undecide

if TYPE_CHECKING:
    from .options import ContextualOptions


def exchange(session: CallState, error: Exception | None) -> Exchanged:
    """Share this run's data, update every track alike; returns what the exchange told. Raises on every rank when
    the function raised on some rank (other than because of a failing config). Where an interruption ends this
    rank's wait for the result, its message written, the group reads the result at this rank's next call on it
    (:func:`applied_late`)."""
    group = session.group
    message = _message(session, error)
    try:
        # (an interruption once the result is read, before this rank applies it, keeps it too: the checks change
        # nothing of the call; before, the result was lost on this rank, as one in the application still is where
        # it is not the user's code, which is held: :func:`_applied`)
        with _kept_if_interrupted(session, lambda late: applied_late(session, late)):
            gathered = group.allgather(message, f"{session.label} end of run {session.runs - 1}",
                                       timeout=exchange_timeout(session.timeout))
            checked(session, gathered)
    except GroupTimeoutError as exc:  # the peers never came: say what this rank's run raised, the likelier cause
        if error is None:
            raise
        raise type(exc)(f"{exc}; on this rank, run {session.runs - 1} had raised {describe_error(error)}") from error
    with holding(session) as held:
        exchanged = _applied(session, gathered, error)
    if held:  # the whole result is applied, as on every rank: the call ended where that was its last exchange
        if _ended(session, exchanged):
            session.tuner.tuned(session.group)
        held.raise_now()
    return exchanged


def checked(session: CallState, gathered: list[dict[str, Any]]) -> None:
    """The checks of an exchange's result before any rank applies it (the same error on every rank)."""
    check_same_steps(session.label, [message.get("steps") for message in gathered])
    check_same_kernels(session, gathered)


def _ended(session: CallState, exchanged: Exchanged) -> bool:
    """Whether the exchange that told ``exchanged`` was the call's last (every track decided before it, or none)."""
    return (session.final_run or not session.tracks) and not exchanged.created


def _applied(session: CallState, gathered: list[dict[str, Any]], error: Exception | None) -> Exchanged:
    """Update every track from the exchange's result ``gathered`` (:func:`exchange`), as every rank does, once it
    is :func:`checked`. An interruption the user's code raises in it (a line of this rank's log, Triton's listener)
    is held (:func:`~.holding.holding`), for the caller to raise once the whole result is applied."""
    try:
        created = create_tracks(session, gathered)
    except PruningError as exc:
        local = next((lt.prune_error for lt in session.local.values() if lt.prune_error is not None), None)
        raise pruning_error(str(exc)) from local
    for tid in sorted(session.tracks):
        step_track(session, tid, session.tracks[tid], gathered)
    raise_if_raised(session, [(r, m["raised"]) for r, m in enumerate(gathered) if m["raised"] and not m["excused"]],
                    error)
    met: dict[TrackId, list[int]] = {}
    launched: dict[TrackId, set[int]] = {}
    for rank, message in enumerate(gathered):
        for tid in message["new"]:
            met.setdefault(tid, []).append(rank)
        for tid, records in message["launches"].items():
            launched.setdefault(tid, set()).update(index for index, _, _ in records)
    return Exchanged(created, met, launched, all(message["compiles"] for message in gathered))


def applied_late(session: CallState, gathered: list[dict[str, Any]]) -> None:
    """The result of a run's exchange whose wait an interruption ended on this rank (its message written, so the
    exchange completed without it), read at this rank's next call on the group (``Group.read_unread``): this rank
    applies it as its peers did, so that it decides the keys they decided there, and, where it was the call's last
    exchange (every track decided before it, or none), counts the call ended, as they do: its next call is theirs
    (before: it tuned the keys again as the group's first call, alone, and waited ``T`` at the journal exchange; or,
    its peers' call having raised, it tuned a key alone that they had decided, and could choose another config).
    Nothing is applied where the peers stopped before their steps: a key met by ranks other than 0 alone is looked up
    in an exchange of its own, which this rank's leaving ended on them, and an error in the result is theirs (every
    rank raised it). The journals the steps write to are closed again."""
    met = {tid for message in gathered for tid in message["new"]} - set(session.tracks)
    if met - set(gathered[0]["disk"]):
        return
    try:
        checked(session, gathered)
        with holding(session) as held:  # (an interruption in its lines: raised once the call counts as ended)
            exchanged = _applied(session, gathered, None)
    except AutotuneError as exc:  # raised on every rank in that exchange (a mismatch, a pruning's, the function's)
        session.log.info("%s the result of run %d's exchange, read at this rank's next call: %s", session.label,
                         session.runs - 1, describe_error(exc))
        return
    finally:
        for local in session.local.values():
            local.journal.close()
    ended = _ended(session, exchanged)
    if ended:
        session.tuner.tuned(session.group)
    session.log.info("%s run %d's exchange, which an interruption ended this rank's wait for, read at this rank's "
                     "next call on the group: applied, as on every rank%s", session.label, session.runs - 1,
                     f"; the call ended after {session.runs} run(s) on every rank" if ended else "")
    held.raise_now()


def raise_if_raised(session: CallState, raisers: list[tuple[int, str]], error: Exception | None) -> None:
    """The same :class:`AutotuneError` on every rank (``raisers``: the ranks whose run raised, by gathered data,
    with what), chaining this rank's own ``error``; nothing when no rank's run raised."""
    if not raisers:
        return
    text = per_rank(raisers, session.tuner.options.name)
    session.log.error("%s the function raised in run=%d: %s", session.label, session.runs - 1, text)
    session.not_blamed(f"interrupted: the tuned function raised its own error in run {session.runs - 1}, not "
                       f"the config's: {text}")
    raise AutotuneError(f"{session.label} the tuned function raised during tuning run {session.runs - 1} on "
                        f"group '{session.group.title}': {text}") from error


def ended_alike(session: CallState, error: Exception | None) -> None:
    """After the run that follows a ``max_runs`` cut (no exchange of tracks): one ``allgather`` of whether the run
    raised, so that a run that raised on some rank is the same :class:`AutotuneError` on every rank, as any tuning
    run's is (:func:`raise_if_raised`). Otherwise the raising ranks' call ended with their own error, the others'
    returned, and their next calls parted: the first tuned again as the group's first call, the others ran hot."""
    raised = describe_error(error) if error is not None else None
    with _kept_if_interrupted(session, lambda late: _ended_late(session, late)):  # (the call's last result)
        gathered = session.group.allgather(raised, f"{session.label} end of run {session.runs - 1} (after max_runs)",
                                           timeout=exchange_timeout(session.timeout))
    raise_if_raised(session, [(r, text) for r, text in enumerate(gathered) if text], error)


def _kept_if_interrupted(session: CallState, keep: Callable[[Any], None]) -> Any:
    """Where an interruption (Ctrl-C, SIGTERM, a cancelled task) ends this rank's wait for the result of the
    exchange inside, its message written: the group keeps the result for ``keep`` to read at this function's next
    call on it (:func:`~..group.leaving.result_kept_if_interrupted`, :meth:`~.state.TunerState.left_unread`)."""
    group = session.group
    return result_kept_if_interrupted(group, keep, lambda: session.tuner.left_unread(group))


def _ended_late(session: CallState, gathered: list[Any]) -> None:
    """The result of :func:`ended_alike`'s exchange, the call's last, whose wait an interruption ended on this rank,
    read at its next call on the group: where no rank's run raised, the call ended on every rank (its peers' call
    returned), and counts so here (before: this rank's next call was the group's first again, alone, and waited
    ``T + T/10`` at the journal exchange; and so did every later call). The keys were decided before that run."""
    if any(gathered):  # every rank raised it
        return
    session.tuner.tuned(session.group)
    session.log.info("%s run %d's exchange (after max_runs), which an interruption ended this rank's wait for, read "
                     "at this rank's next call on the group: the call ended after %d run(s) on every rank",
                     session.label, session.runs - 1, session.runs)


def _message(session: CallState, error: Exception | None) -> dict[str, Any]:
    """This rank's part of the exchange (reads the clock's tokens, so after the run's launches are done)."""
    session.clock.synchronize()
    launches = {tid: [(i, None if tok is None else session.clock.read(tok), e) for i, tok, e in recs]
                for tid, recs in session.record.launches.items()}
    new = {tid: session.local[tid].info() for tid in session.record.new}
    failed_here = any(e for recs in launches.values() for _, _, e in recs)
    raised = describe_error(error) if error is not None else None
    disk = lookup(session, new) if session.group.rank == 0 else {}
    return {"new": new, "launches": launches, "raised": raised, "excused": raised is not None and failed_here,
            "disk": disk, "compiles": compiles_ahead(session), "steps": steps_text(session.tuner.options)}


def steps_text(options: ContextualOptions) -> str:
    """The options that set a call's steps on every rank: runs per config, the bound on a call's runs (and so the
    search's budget), and when the ranks agree on pending keys. Any of them may come from the environment
    (``TRITON_DIST_AUTOTUNE_MAX_RUNS``, ``..._SYNC_EVERY``), which may differ between ranks."""
    return (f"n_warmup={options.n_warmup} n_repeat={options.n_repeat} max_runs={options.max_runs} "
            f"sync_every={options.sync_every}")


def check_same_steps(label: str, steps: list[Any]) -> None:
    """MismatchError on every rank (each read the same ``steps``, one per rank) when the ranks' options that set
    the steps differ: they would run different steps from here on."""
    if len({str(s) for s in steps}) > 1:
        held: dict[str, list[int]] = {}
        for rank, text in enumerate(steps):
            held.setdefault(str(text), []).append(rank)
        detail = "; ".join(f"ranks {ranks}: {text}" for text, ranks in held.items())
        raise MismatchError(f"{label} the ranks differ in the options that set the steps of a call (max_runs, "
                            "sync_every: the decorator's or TRITON_DIST_AUTOTUNE_MAX_RUNS / "
                            f"TRITON_DIST_AUTOTUNE_SYNC_EVERY; n_warmup, n_repeat): {detail}")


def check_same_kernels(session: CallState, gathered: list[dict[str, Any]]) -> None:
    """Every rank tunes the same kernels: before a new track's first step, the ``triton.autotune`` wrappers each rank
    met of each jitted kernel in this call (their configs and key names) are compared, from exchanged data only.
    Two ranks of which each met a wrapper the other did not (a config list that depends on the rank, or another
    version of the code on some rank: two tracks that would be tuned apart, each by its own ranks) are a
    :class:`MismatchError` on every rank, naming the kernel and the first entry that differs. (A rank that met
    fewer wrappers of a kernel than another, such as a key met by some ranks only, is no mismatch.)"""
    for rank, message in enumerate(gathered):
        for tid, info in sorted(message["new"].items()):
            if info.kernel is not None:
                seen = session.wrappers.setdefault(info.kernel, {}).setdefault(rank, {})
                seen[tid[0]] = (info.descriptions, info.keys or [])
    for kernel, by_rank in sorted(session.wrappers.items()):
        held: dict[frozenset[str], int] = {}  # each distinct set of wrappers, with the first rank that met it
        for rank in sorted(by_rank):
            held.setdefault(frozenset(by_rank[rank]), rank)
        sets = sorted(held.items(), key=lambda item: item[1])
        for i, (mine, rank) in enumerate(sets):
            for theirs, other in sets[i + 1:]:
                if mine - theirs and theirs - mine:
                    first, second = by_rank[rank][min(mine - theirs)], by_rank[other][min(theirs - mine)]
                    raise MismatchError(_kernels_differ(session.label, kernel, (rank, first), (other, second)))


def _kernels_differ(label: str, kernel: str, *held: tuple[int, tuple[list[str], list[str]]]) -> str:
    """The message of :func:`check_same_kernels`: the first differing config (or the key names) of two ranks."""
    (rank, (configs, keys)), (other, (their_configs, their_keys)) = held
    if configs != their_configs:
        what, texts = "configs", difference(["\n".join(configs), "\n".join(their_configs)])
    else:
        what, texts = "key", [f"key={keys}", f"key={their_keys}"]
    return (f"{label} the ranks differ in the {what} of triton.autotune kernel {kernel} (a config list or key that "
            f"depends on the rank, or another version of the code on some rank): rank {rank}: {texts[0]}; rank "
            f"{other}: {texts[1]}. Every rank must tune the same kernels, or the ranks would choose apart")


def create_tracks(session: CallState, gathered: list[dict[str, Any]]) -> bool:
    """Create the tracks first met in this run (on any rank), or let ranks that met one late join it; take the
    disk cache's choices. Returns whether a track was created."""
    infos: dict[TrackId, dict[int, TrackInfo]] = {}
    for rank, message in enumerate(gathered):
        for tid, info in message["new"].items():
            infos.setdefault(tid, {})[rank] = info
    created = []
    for tid in sorted(infos):
        track = session.tracks.get(tid)
        if track is not None:
            done, revision = track.done, track.revision
            track.join(infos[tid])
            revised(session, tid, track, done, revision)
        else:
            options = session.tuner.options
            # the choices of the kernel's keys this group decided (shared data), as seeds of a search
            decided = [t.best for other, t in sorted(session.tracks.items())
                       if other[0] == tid[0] and t.best is not None]
            track = session.tracks[tid] = Track(tid[0], tid[1], infos[tid], options.n_warmup, options.n_repeat,
                                                options.max_runs, decided)
            track.resume(earlier_outcomes(session.earlier(track.entry), track.descriptions))
            created.append(tid)
    found = dict(gathered[0]["disk"])
    missing = [tid for tid in created if tid not in found]
    if missing:  # met on other ranks only: rank 0 looks them up now
        wanted = {tid: infos[tid][min(infos[tid])] for tid in missing}
        with undeferred(session):  # (a wait: the signals' handlers are back meanwhile)
            found.update(from_root(session.group, lambda: lookup(session, wanted), f"{session.label} disk cache",
                                   timeout=session.timeout, error=AutotuneError))
    for tid in created:
        track = session.tracks[tid]
        index, kept, times = (list(found.get(tid) or ()) + [None] * 3)[:3]
        # as in Triton, the configs the pruning keeps are part of a decision's identity: a decision made under
        # another kept set is tuned again, and a config the pruning leaves out now is never launched
        usable = index is not None and index in track.order and index not in track.failed
        if not track.done and usable and (kept is None or kept == track.order):
            track.finish(index, "disk cache")
            track.cached_times = {i: t for i, t in enumerate(times if isinstance(times, list) else [])
                                  if type(t) is float}
        if track.done:
            record_decision(session, track)
    return bool(created)


def revised(session: CallState, tid: TrackId, track: Track, was_done: bool, revision: int) -> None:
    """Ranks that met ``track`` late joined it (:meth:`~triton_dist_tune.contextual.schedule.Track.join`): publish a
    choice the join made (their pruning left out the last configs still open: the track is decided here, and is
    stepped no more), a new choice after a late failure of the chosen config, or take the old one back."""
    if track.revision == revision:
        if track.done and not was_done:
            journal_outcomes(session, tid, track)
            record_decision(session, track)
        return
    session.log.warning("%s %s: the chosen config failed on a rank that met it late; %s", session.label,
                        track.label, f"choosing config {track.best} instead" if track.done else "tuning it again")
    if track.done:
        record_decision(session, track)
    elif was_done:
        forget_choice(session.group, tid)
        local = session.local.get(tid)
        for autotuner in local.autotuners if local is not None else []:
            undecide(autotuner, local.key, session.group)


def lookup(session: CallState, infos: dict[TrackId, TrackInfo]) -> dict[TrackId, list | None]:
    """Group rank 0 only: the disk cache's [config index, the configs the pruning kept then, each config's group
    time (:func:`cached_times`)] for each (kernel, key) of ``infos`` (None: not there, or unusable; the kept configs
    None in a record written before they were)."""
    if settings.current().always_tune:
        return dict.fromkeys(infos)
    found: dict[TrackId, list | None] = {}
    for tid, info in infos.items():
        data = session.cache.load(info.entry, info.space_text)
        index = data["index"] if data is not None else -1
        ok = 0 <= index < len(info.descriptions) and data["config"] == info.descriptions[index]
        if ok and data.get("provisional"):
            ok = False  # a cut's choice (max_runs, a stalled track): provisional, tuned again
        kept = data.get("kept") if ok else None
        if kept is not None and not (isinstance(kept, list) and all(type(i) is int for i in kept)):
            ok = False  # a damaged record: tuned again
        found[tid] = [index, kept, cached_times(data, info.descriptions)] if ok else None
    return found


def cached_times(data: dict[str, Any], descriptions: list[str]) -> list[float | None]:
    """Each config's group time as a disk cache decision's ``measurements`` recorded it, by config index, for the
    kernel's ``configs_timings`` on a cache hit (as stock Triton's disk cache restores them); None for a config
    with no time there (failed, never measured) or a row that does not fit the configs (a damaged record)."""
    times: list[float | None] = [None] * len(descriptions)
    rows = data.get("measurements")
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or row.get("state") == "failed":
            continue
        index, ms = row.get("index"), row.get("time")
        if type(index) is not int or not 0 <= index < len(descriptions) or row.get("config") != descriptions[index]:
            continue
        try:
            ms = float(ms) if type(ms) in (int, float) else math.nan
        except OverflowError:  # an integer no float holds
            ms = math.nan
        if math.isfinite(ms) and ms >= 0:
            times[index] = ms
    return times


def step_track(session: CallState, tid: TrackId, track: Track, gathered: list[dict[str, Any]]) -> None:
    """Apply the run's launches (every rank's, their failures included) to one track; log this rank's part."""
    if track.done:
        return
    step_config, (phase, iteration) = track.current(), track.phase()
    per_rank = {r: m["launches"][tid] for r, m in enumerate(gathered) if tid in m["launches"]}
    outcome = track.advance(per_rank)
    own = per_rank.get(session.group.rank)
    if own is not None:
        times = ", ".join("failed" if ms is None else f"{ms:.4f}" for _, ms, _ in own)
        used = sorted({i for i, _, _ in own})
        session.log.info("%s step run=%d %s config=%s phase=%s iter=%d launches=%d times_ms=[%s] outcome=%s | %s",
                         session.label, session.runs - 1, track.label, used[0] if len(used) == 1 else used, phase,
                         iteration, len(own), times, outcome, track.descriptions[step_config])
    if outcome == "failed":
        session.log.info("%s %s config=%d FAILED: %s", session.label, track.label, step_config,
                         track.failed.get(step_config))
    journal_outcomes(session, tid, track)
    if track.done:
        record_decision(session, track)


def journal_outcomes(session: CallState, tid: TrackId, track: Track) -> None:
    """Journal the group outcomes this rank has not written yet (configs it took part in): :func:`measured_record`."""
    local = session.local.get(tid)
    if local is None:
        return
    for index in sorted(local.used):
        if index in track.times and index not in track.resumed:
            local.note(index, "measured", **measured_record(track, index))
        elif index in track.failed:
            local.note(index, "failed", error=track.failed[index])


def measured_record(track: Track, index: int) -> dict[str, Any]:
    """The journal fields of config ``index``'s group time: its time, samples and per-rank times, and a close
    contender's drift-free median of its closing rounds (``drift_free``, whatever the race's statistic:
    :attr:`~.schedule.Track.drift_free`), the time a quiet race that reads it back takes."""
    drift_free = track.drift_free.get(index)
    return {"time": track.times[index], "round_times": track.samples.get(index, []),
            "per_rank": [track.per_rank[index][r] for r in sorted(track.per_rank[index])],
            "per_rank_of": sorted(track.per_rank[index]),
            **({"drift_free": drift_free} if drift_free is not None else {})}


_pruning_error_class: type | None = None


def pruning_error(message: str) -> Exception:
    """The error raised on every rank when the kernel's pruning fails or keeps nothing: an instance of Triton's
    ``AutotunerError`` that is also this package's :class:`~triton_dist_tune.errors.BadInputError`."""
    global _pruning_error_class
    if _pruning_error_class is None:
        base = type(intercept.empty_pruning_error())
        def __init__(self: Exception, message: str) -> None:
            Exception.__init__(self, message)
            self.error_message = message

        _pruning_error_class = type("ContextualPruningError", (BadInputError, base),
                                    {"__module__": __name__, "__init__": __init__,
                                     "__str__": lambda self: f"Autotuner error: {self.error_message}"})
    return _pruning_error_class(message)
