"""What happens on every rank when a track is decided: the choice goes to the kernel's autotuners (their
``cache``, ``configs_timings``, Triton's listener), to the process-wide tables, to ``tuner.decisions`` and the
rank's log; group rank 0 writes it to the disk cache and prints Triton's summary; the track's journal is removed
(where nothing was tuned, a disk cache hit or a single config, only this job's or this process's records of it; so
too after a tuning under ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE``, which resumed from this job's records only: another
job's may be that job's between two attempts).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .. import settings
from ..disk import logs
from ..disk.failures import say_failures
from ..records import LEAST
from . import intercept, report
from .holding import hold
from .schedule import Track
from .state import CallState
from .tracks import LocalTrack, decide, remember_choice

log = logging.getLogger("triton_dist_tune")


def record_decision(session: CallState, track: Track) -> None:
    """Publish ``track``'s choice (decided now, or again after a late failure) on this rank."""
    tid = (track.kernel, track.key_text)
    remember_choice(session.group, tid, track.best)
    local = session.local.get(tid)
    if local is not None:
        _publish(session, track, local)
    ms = track.times.get(track.best)
    session.tuner.decisions[tid] = {"index": track.best, "config": track.descriptions[track.best],
                                    "how": track.how, "time_ms": ms, "runs": track.runs, "table": report.table(track),
                                    "cut": track.cut}
    session.log.info("%s decision %s config=%d group_ms=%s how=%s after %d run(s) | %s%s%s", session.label,
                     track.label, track.best, "-" if ms is None else f"{ms:.4f}", track.how, track.runs,
                     track.descriptions[track.best], f"; table: {report.table(track)}" if track.runs else "",
                     f"; {logs.LEAST_NOTE}" if track.runs and track.statistic == LEAST else "")
    if track.how in ("disk cache", "only config"):
        if track.how == "disk cache" and session.group.rank == 0 and logs.printing_enabled(None):
            logs.print_cache_hit(track.name, track.key_text, session.group, track.descriptions[track.best],
                                 session.cache.path(track.entry))
        if local is not None:  # this job's (or process's) cut attempt's records only: another job's unlocked
            local.journal.remove(own=True)  # journal may be that job's between two attempts, resumed from next
        return
    if session.group.rank == 0:
        _store(session, track, ms)
    if local is not None and not track.cut:  # after the decision is in the cache (rank 0), so a crash loses nothing
        local.journal.remove(own=settings.current().always_tune)  # (ALWAYS_TUNE: the records it resumed from)
    # a cut's choice is provisional: the journals stay, so that the next job's tuning goes on from them


def _publish(session: CallState, track: Track, local: LocalTrack) -> None:
    """Set the choice on each autotuner of the track (and its timings; Triton's listener is called: where it raises,
    the error is logged on this rank and the call goes on, since the other ranks go on to the function's next
    collective: ``test_contextual_semantics.py::test_a_listener_that_raises_on_one_rank_is_said_there_...``)."""
    timings = {i: stock_timings(track.times.get(i, track.cached_times.get(i)), track.samples.get(i, []))
               for i in track.order}
    for autotuner in local.autotuners:
        config = autotuner.configs[track.best]
        decide(autotuner, local.key, config, session.group)
        if track.how not in ("only config",):
            by_config = {autotuner.configs[i]: t for i, t in timings.items()}
            autotuner.configs_timings = by_config
            autotuner.bench_time = time.monotonic() - session.started
            cached = track.how == "disk cache"
            try:
                intercept.notify_listener(autotuner, local.key, config, by_config,
                                          None if cached else autotuner.bench_time, cached)
            except Exception as exc:  # an observer's own error: said here, never taking this rank out of its group
                text = (f"triton_dist_tune: rank {logs.global_rank()}: {session.label} Triton's autotuning listener "
                        f"raised for {track.label}: {type(exc).__name__}: {exc} (the decision stands on every rank "
                        "and the call goes on: a listener's error must not leave this rank out of its group's "
                        "next step)")
                log.warning(text)
                session.log.warning(text, exc_info=True)
            except BaseException as exc:  # an interruption in it: raised once the whole result is applied
                hold(session.held, exc)
    local.sample = None


def stock_timings(ms: float | None, samples: list[float]) -> list[float]:
    """A config's ``configs_timings`` entry as stock Triton's (``do_bench``'s quantiles 0.5, 0.2 and 0.8, in ms):
    the group's time, then the 20th and 80th percentiles of its group samples (linear, as ``torch.quantile``), or
    the time again where no sample is at hand (a time read from the disk cache); ``[inf] * 3`` for no time."""
    if ms is None:
        return [float("inf")] * 3
    ordered = sorted(samples)
    return [ms, *(_quantile(ordered, q) if ordered else ms for q in (0.2, 0.8))]


def _quantile(ordered: list[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _store(session: CallState, track: Track, ms: float | None) -> None:
    """Group rank 0: write the decision to the disk cache, and print Triton's summary when asked to."""
    decision = {"index": track.best, "config": track.descriptions[track.best], "key": track.key_text,
                "kernel": track.kernel, "function": session.tuner.options.name, "group_size": session.group.size,
                "time_ms": ms, "statistic": track.statistic, "how": track.how, "kept": list(track.order),
                "measurements": report.table(track)}
    if track.cut:  # never served as a decision: a later job tunes the key again (from the journals kept)
        decision["provisional"] = True
    written: Path | str = session.cache.path(track.entry)
    try:
        session.cache.store(track.entry, decision, track.space_text)
    except (OSError, ValueError) as exc:
        log.warning("triton_dist_tune: could not write the contextual cache (%s)", exc)
        written = f"none written ({type(exc).__name__}: {getattr(exc, 'strerror', None) or exc})"
    if logs.printing_enabled(None):  # its table lists the failed configs; else they are said in one warning
        _print_summary(session, track, written)
    else:
        name = session.tuner.options.name
        say_failures(name, f"[{name} kernel={track.name} key={track.key_text}]", report.outcomes(track),
                     session.tuner.failures_said)


def _print_summary(session: CallState, track: Track, written: Path | str) -> None:
    """Triton's summary of one tuned (kernel, key) (``TRITON_PRINT_AUTOTUNING=1``), with the group and files."""
    logs.console().info(
        "Triton autotuning for function %s,\nwith key as %s,\nfinished after %.2fs on %d rank(s) of group "
        "'%s' (%d run(s) of %s),\nbest config selected: %s;\n%s\ncache file: %s\nlogs: %s", track.name,
        track.key_text, time.monotonic() - session.started, session.group.size, logs.group_title(session.group),
        track.runs, session.tuner.options.name, track.descriptions[track.best],
        logs.format_table(report.outcomes(track, session.group.rank), track.best, track.statistic), written,
        logs.logs_text())
