"""The intercepted launches of one call: what a :class:`~triton_dist_tune.contextual.session.Session` does with
each ``triton.autotune`` launch made inside the tuned function (it is the call's
:class:`~triton_dist_tune.contextual.intercept.Handler`).

- a (kernel, key) decided for the session's group runs its config as stock Triton would (:func:`launch`); one
  tuned in this call is a benchmarking launch until the final run (:func:`decided_launch`);
- one the group decided without this rank (met by the others only) takes the group's choice at once;
- one that cannot be tuned in this call (a hot call on a group, or past ``max_runs``) runs a local default and is
  *pending* until the group's next agreement (:func:`pending_launch`);
- any other runs the config its track's schedule says, timed and journaled (:func:`timed_launch`); what this rank
  saw goes into the run's :class:`~.state.RunRecord`, sent at the end of the run (:mod:`~.exchange`). Two
  exceptions: a config the pruning of a rank meeting the key late drops is never launched there
  (:func:`dropped_launch`), and a key this rank's pruning cuts to one config is launched as Triton launches it
  (:func:`plain_launch`).
"""

from __future__ import annotations

from typing import Any

from ..disk import logs
from ..errors import describe_error
from . import intercept
from .state import CallState
from .tracks import LocalTrack, TrackId, decide, decided_config, group_choice


def launch(session: CallState, autotuner: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Run one intercepted launch (see :class:`~triton_dist_tune.contextual.intercept.Handler`)."""
    group = session.group
    key = intercept.tuning_key(autotuner, args, kwargs)
    config = decided_config(autotuner, key, group)
    if config is not None:
        if autotuner.cache.get(key) is not config:  # cleared since (``kernel.cache.clear()``) or overwritten by a
            autotuner.cache[key] = config  # launch outside: the group's choice again, for later stock launches
        if session.plain_keys and (id(autotuner), key) in session.plain_keys:
            return plain_launch(autotuner, config, args, kwargs, session.final_run)
        if session.session_keys and (id(autotuner), key) in session.session_keys:
            return decided_launch(session, autotuner, key, config, args, kwargs)
        return intercept.launch_with(autotuner, config, args, kwargs)
    tid = (intercept.track_id(autotuner), repr(key))
    chosen = group_choice(group, tid)
    if chosen is not None and _kept_here(autotuner, chosen, args, kwargs):
        # the group decided it without this rank (met by the others only), among configs this rank's pruning keeps
        config = autotuner.configs[chosen]
        decide(autotuner, key, config, group)
        return intercept.launch_with(autotuner, config, args, kwargs)
    track = session.tracks.get(tid)  # (the tracks change only between runs)
    if chosen is not None and track is None and session.pending_mode:
        return instead_of_a_pruned_choice(session, tid, autotuner, key, chosen, args, kwargs)
    # a choice that the pruning of a rank meeting the key late drops: never launched here (a tuning call's exchange
    # hears of it and fails it on every rank; a call that cannot ask the group runs a stand-in). A rank that met the
    # key already runs the choice, as Triton runs a key's cached choice whatever its later launches would prune
    dropped = (track is not None and track.done and tid not in session.local
               and not _kept_here(autotuner, track.best, args, kwargs, early=True))
    if session.pending_mode and (track is None or dropped):
        return pending_launch(session, tid, autotuner, key, args, kwargs)
    with session.lock:
        if track is not None and track.done and not dropped:
            config = autotuner.configs[track.best]
            decide(autotuner, key, config, group)
        else:
            session.needs_tuning = True
            local = session.local.get(tid)
            if local is None:
                _tensor_in_key(autotuner, key)
                _own_benchmarking(autotuner)
                local = session.local[tid] = LocalTrack(autotuner, key, args, kwargs, session.cache, group,
                                                        session.earlier, session.tuner.options.search,
                                                        session.attempt)
                session.record.new.append(tid)
            elif not any(a is autotuner for a in local.autotuners):
                local.autotuners.append(autotuner)
            index = track.current() if track is not None else local.first_index()
            session.record.launches.setdefault(tid, [])
    if config is not None:
        return intercept.launch_with(autotuner, config, args, kwargs)
    if index is None:
        return None
    if track is not None and index not in _early(session.local[tid]):
        return dropped_launch(session, tid, autotuner, key, args, kwargs)
    if track is None and _one_kept(session.local[tid]):
        with session.lock:
            session.plain_keys.add((id(autotuner), key))
        return plain_launch(autotuner, autotuner.configs[index], args, kwargs, False)
    return timed_launch(session, tid, autotuner, key, index, args, kwargs)


def instead_of_a_pruned_choice(session: CallState, tid: TrackId, autotuner: Any, key: tuple, chosen: int,
                               args: tuple, kwargs: dict[str, Any]) -> Any:
    """The group decided the key without this rank, on config ``chosen``, which this rank's pruning leaves out for
    its launch, met in a call that cannot ask the group (a hot call). Settling it waited the new-key grace at every
    agreement for nothing, since the group never tunes a key it decided (0.55 s a call on 2 ranks). This rank takes
    the first config its pruning keeps as its own choice for the key (said once in its log) and launches it; later
    calls launch it without looking again."""
    try:
        kept = intercept.pruned_indices(autotuner, args, kwargs)
    except Exception:
        kept = []  # the pruning's error: the group's choice, as a tuning would report it
    index = kept[0] if kept else chosen
    decide(autotuner, key, autotuner.configs[index], session.group)
    session.log.warning("%s kernel=%s key=%s: the group chose config %d without this rank, which this rank's pruning "
                        "leaves out; running config %d here", session.label, tid[0], tid[1], chosen, index)
    return intercept.launch_with(autotuner, autotuner.configs[index], args, kwargs)


def _one_kept(local: LocalTrack) -> bool:
    """Whether this rank's pruning keeps one config of the key, one that Triton launches plainly
    (:func:`~triton_dist_tune.contextual.intercept.plain_when_pruned_to_one`): the group decides it at once
    (``only config``: it keeps no more than this rank does), with no measurement."""
    return isinstance(local.pruned, list) and len(local.pruned) == 1 and intercept.plain_when_pruned_to_one()


def plain_launch(autotuner: Any, config: Any, args: tuple, kwargs: dict[str, Any], final: bool) -> Any:
    """A launch of a key this rank's pruning cuts to one config, as Triton launches it (:func:`_one_kept`): no
    benchmarking and no reset. In the ``final`` run a plain launch; before it, one whose writes to the tensors the
    autotuner resets or restores are undone after it, so that the call leaves them as that one plain launch does
    (a ``reset_to_zero`` tensor the caller filled is added to, as by Triton, not zeroed)."""
    if final:
        return intercept.launch_with(autotuner, config, args, kwargs)
    return intercept.undone_launch(autotuner, config, args, kwargs)


def dropped_launch(session: CallState, tid: TrackId, autotuner: Any, key: tuple, args: tuple,
                   kwargs: dict[str, Any]) -> Any:
    """The config the group's schedule launches now (a step of the race, or the choice) is one the early
    pruning of this rank drops: this rank meets the key late, in this run. It is not launched here; the
    run's exchange hears of this rank's pruning and fails the config on every rank
    (:meth:`~triton_dist_tune.contextual.schedule.Track.join`). The first config this rank keeps runs in its place:
    in a tuning run a timed launch that counts as no step (the other ranks launched the dropped one); in the final run,
    whose result the call returns, a real launch, as a rank meeting a key the group decided without it makes."""
    spare = session.local[tid].first_index()
    if spare is None:
        return None
    if session.final_run:
        return intercept.launch_with(autotuner, autotuner.configs[spare], args, kwargs)
    return timed_launch(session, tid, autotuner, key, spare, args, kwargs)


def _early(local: LocalTrack) -> list[int]:
    """The configs this rank's ``early_config_prune`` keeps for the track (none when its pruning failed)."""
    return local.pruning[0] if local.pruning is not None else []


def _kept_here(autotuner: Any, index: int, args: tuple, kwargs: dict[str, Any], early: bool = False) -> bool:
    """Whether this rank's own pruning keeps config ``index`` for this launch (a choice the group made without this
    rank is taken only then: a config the current pruning leaves out is never launched). ``early``: its
    ``early_config_prune`` alone (what the group's :meth:`~triton_dist_tune.contextual.schedule.Track.join` asks
    of a rank that meets a key late; a perf model's ``top_k`` is the group's)."""
    if not autotuner.early_config_prune and (early or not autotuner.perf_model):
        return True
    try:
        kept = intercept.pruning(autotuner, args, kwargs)[0] if early else intercept.pruned_indices(autotuner, args,
                                                                                                      kwargs)
        return index in kept
    except Exception:
        return False  # the tuning path reports the pruning's error


def decided_launch(session: CallState, autotuner: Any, key: tuple, config: Any, args: tuple,
                   kwargs: dict[str, Any]) -> Any:
    """A launch of a key this call tuned, once decided: a benchmark launch (hooks restore what it changes) until
    the final run, where it is the real launch, after the reset Triton makes once tuning is done."""
    if not session.final_run:
        return intercept.bench_launch(autotuner, config, args, kwargs)
    if (id(autotuner), key) not in session.record.reset:
        session.record.reset.add((id(autotuner), key))
        intercept.reset_before_use(autotuner, config, args, kwargs)
    return intercept.launch_with(autotuner, config, args, kwargs)


def pending_launch(session: CallState, tid: TrackId, autotuner: Any, key: tuple, args: tuple,
                   kwargs: dict[str, Any]) -> Any:
    """A key the group has not decided, met where this rank cannot ask the group: run the first config its
    pruning keeps (a real launch), and remember the key for the group's next agreement. In the first run of a hot
    call the key is also settled at the end of the run (:mod:`~.newkeys`): when every rank met it, the call goes
    on as a tuning call, so its track is made ready here."""
    group, tuner = session.group, session.tuner
    # (a single process tunes a new key in its next call: nothing to agree on, nothing kept)
    with tuner.meeting:  # hot calls of other threads meet keys too, and an agreement reads them (tuner.py)
        pending = tuner.pending.setdefault(group.identity, {}) if group.size > 1 else {}
        met_since = tuner.met_since.setdefault(group.identity, {}) if group.size > 1 else {}
        meetings, last_call = met_since.get(tid, (0, None))
        if last_call != session.call_number:
            meetings, last_call = meetings + 1, session.call_number
            met_since[tid] = (meetings, last_call)
    slot = (id(autotuner), key)
    # settled (waiting the grace for the others) in the 1st, 2nd, 4th, 8th ... hot call that meets it since the
    # group's last agreement, not in every one: a key the others do not meet costs log2(sync_every) + 1 graces at
    # most, and is tuned in the window of the next agreement (contextual/tuner.py)
    settle = session.met is not None and tid not in session.local and meetings & (meetings - 1) == 0
    if settle:
        with session.lock:
            session.local[tid] = LocalTrack(autotuner, key, args, kwargs, session.cache, group,
                                            session.earlier, session.tuner.options.search, session.attempt)
            session.record.new.append(tid)
            session.met.append(tid)
    index = pending.get(slot, (None, None))[1]
    if index is None:
        local = session.local.get(tid)
        if local is not None:
            kept = local.pruned if isinstance(local.pruned, list) else []
        else:
            try:
                kept = intercept.pruned_indices(autotuner, args, kwargs)
            except Exception:
                kept = []  # the group's tuning reports it; the local default is the first config
        failed = failed_before(tuner.decisions, tid[0])
        index = next((i for i in kept if i not in failed), kept[0] if kept else 0)
        with tuner.meeting:
            pending[slot] = (tid, index)
        session.log.info("%s kernel=%s key=%s is not decided by group '%s'; running config %d until the group "
                         "tunes it", session.label, tid[0], tid[1], group.title, index)
        try:
            return intercept.launch_with(autotuner, autotuner.configs[index], args, kwargs)
        except Exception as exc:  # a config this device cannot run (out of resources): the next one kept, if any
            spare = next((i for i in kept if i != index and i not in failed), None)
            if spare is None:
                raise
            session.log.warning("%s kernel=%s key=%s: config %d raised %s; running config %d until the group tunes "
                                "it", session.label, tid[0], tid[1], index, describe_error(exc), spare)
            with tuner.meeting:
                pending[slot] = (tid, spare)
            index = spare
    return intercept.launch_with(autotuner, autotuner.configs[index], args, kwargs)


def failed_before(decisions: dict[TrackId, dict[str, Any]], kernel: str) -> set[int]:
    """The configs of ``kernel`` that failed on the group at some key it decided: a stand-in for a key not decided
    yet avoids them (a config a device cannot run, out of resources, fails at every key)."""
    return {row["index"] for (k, _), decision in list(decisions.items()) if k == kernel
            for row in decision.get("table") or () if row.get("state") == "failed"}


#: a timed launch is preceded by a spin kernel of this many ms on its stream (where the device has one): the host
#: needs 50-90 us to go from the start event through the interception to the kernel's launch, and a kernel shorter
#: than that would otherwise be timed at the host's pace (on an H100, every config of a 10 us GEMM read 88-97 us and
#: the choice was 1.16-2.5x slower than the best); held, the event pair times what the device spends on the kernel
HOLD_BEFORE_TIMED_MS = 0.3


def timed_launch(session: CallState, tid: TrackId, autotuner: Any, key: tuple, index: int, args: tuple,
                 kwargs: dict[str, Any]) -> Any:
    """A step of a track: a benchmarking launch of config ``index``, under the watchdog, timed by the session's
    clock and journaled; a launch that raises is recorded as that config's failure here, and skipped."""
    config = autotuner.configs[index]
    local = session.local[tid]
    with session.lock:
        session.session_keys.add((id(autotuner), key))
        session.record.inflight.append((tid, index))
        local.started(index)
    session.arm()
    try:
        session.clock.hold(HOLD_BEFORE_TIMED_MS)  # the launch is queued before the device reaches its start event
        start = session.clock.start()
        out = intercept.bench_launch(autotuner, config, args, kwargs)
        record = (index, session.clock.stop(start), None)
    except Exception as exc:  # a config that fails is data: recorded, skipped, left out on every rank
        out, record = None, (index, None, describe_error(exc))
        local.note(index, "local_failure", error=record[2])
    with session.lock:
        session.record.launches.setdefault(tid, []).append(record)
        local.used.add(index)
    return out


def _tensor_in_key(autotuner: Any, key: tuple) -> None:
    """Warn once per kernel whose ``key=`` names a tensor argument: Triton keys by the tensor object (every new
    tensor a new key, tuned again, as stock Triton benchmarks again), and the group names the key by the tensor's
    values, so ranks holding different values tune apart (each later call waits out the new-key grace)."""
    if autotuner.__dict__.get("_tdt_tensor_key_said") or not any(hasattr(v, "data_ptr") for v in key):
        return
    autotuner.__dict__["_tdt_tensor_key_said"] = True
    text = (f"the @triton.autotune kernel {intercept.jit_id(autotuner)} has a tensor among its key arguments "
            f"(key={list(autotuner.keys)}): every new tensor is a new key, tuned again (stock Triton benchmarks "
            "again too), and ranks holding different values meet different keys; key by a size or another number "
            "instead")
    logs.warn(text, RuntimeWarning, stacklevel=2)


def _own_benchmarking(autotuner: Any) -> None:
    """Log once per kernel, in the rank's log, that its own ``do_bench=`` (or the deprecated ``warmup=``, ``rep=``,
    ``use_cuda_graph=``, which Triton turns into one) is not called: the tuner times every tuning launch itself,
    alike on every rank (docs/contextual.md). Stock Triton calls it for every config."""
    if autotuner.__dict__.get("_tdt_bench_said"):
        return
    autotuner.__dict__["_tdt_bench_said"] = True
    given = [name for name, attribute in (("warmup", "num_warmups"), ("rep", "num_reps"))
             if getattr(autotuner, attribute, None) is not None]
    if getattr(autotuner, "use_cuda_graph", False) is True:
        given.append("use_cuda_graph")
    if not given and getattr(autotuner, "_do_bench", None) is not None:  # (Triton builds one from those above)
        given.append("do_bench")
    if given:
        logs.rank_log().info("triton_dist_tune: %s: its own %s= (triton.autotune): not used while it is tuned in "
                             "context: the tuner times each tuning launch itself, n_warmup and n_repeat (with the "
                             "race) set how often", intercept.kernel_name(autotuner), "=, ".join(given))
