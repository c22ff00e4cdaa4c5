"""Contextual tuning: run a whole function again and again, stepping each inner ``triton.autotune`` kernel
through its configs, one step per run, in agreement with every rank of a group.

One call of a tuned function is a :class:`Session`:

1. **Run** the function with every ``triton.autotune`` launch of this context intercepted
   (:mod:`triton_dist_tune.intercept`). A launch whose (kernel, key) is decided runs its config exactly as stock
   Triton would; any other launch runs the config its schedule (:class:`~triton_dist_tune.schedule.Track`) says,
   with its own arguments, timed (CUDA events read after the run, or the host clock). A launch that raises is
   recorded and skipped; the run's output is discarded anyway.
2. **Exchange**: one ``allgather`` on the tuner's control channel carries each rank's newly met (kernel, key)s,
   launch times and errors, and whether the function raised. Every rank then updates the same tracks from the same
   data, so the number of runs and every choice are identical everywhere. New (kernel, key)s are looked up in the
   disk cache by group rank 0 (its answer travels in the same exchange, or one broadcast more).
3. Repeat until every track is decided; then **once more** with all the best configs, whose result is returned.

While tuning, each launch of a (kernel, key) being tuned is a benchmarking launch as ``Autotuner._bench`` makes
it (the config's and the autotuner's ``pre_hook``, the launch, the autotuner's ``post_hook``: ``reset_to_zero``
zeroed, ``restore_value`` restored), so repeated runs leave those tensors as one run would; the final run makes the
reset Triton makes after tuning, then real launches. A bound (``max_runs``) ends a call that keeps meeting new
keys with the best configs so far. Each tuning run is under the watchdog, and each (kernel, key) has a crash
journal per rank, so that a config that hangs or crashes a rank is left out after a restart.

A later (*hot*) call is a single run with no communication at all. A key the group has not decided, met in a hot
call, runs with a local default (the first config its pruning keeps) and is *pending*; every ``sync_every`` calls
the group makes one exchange, and when any rank holds pending keys that call tunes, on every rank (see
docs/contextual.md, "Ranks that meet different keys").
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ..disk import logs
from ..disk.cache import DiskCache, entry_id, source_of
from ..errors import AutotuneError, BadInputError, describe_error
from ..faults.journal import Journal, merge
from ..faults.watchdog import WATCHDOG, exchange_timeout
from ..group.channel import Group, SingleGroup, default_timeout
from ..group.resolve import resolve_group
from ..measure.timing import make_clock
from ..settings import env_flag
from ..space import describe
from . import intercept
from .schedule import PruningError, Track

log = logging.getLogger("triton_dist_tune")

#: consecutive runs without progress after which unfinished tracks are ended with what they have
MAX_IDLE_RUNS = 2

_ALONE = SingleGroup()
#: autotuner -> {(group, key): config}: the choices made in this process, per group, so that a choice made by one
#: group (or by a rank alone) is never taken for another group's
_decided: weakref.WeakKeyDictionary[Any, dict[tuple[tuple, tuple], Any]] = weakref.WeakKeyDictionary()
_decided_lock = threading.Lock()


def decided_config(autotuner: Any, key: tuple, group: Group) -> Any:
    """The config a contextual tuning on ``group`` chose for ``autotuner`` and ``key`` in this process, or None."""
    table = _decided.get(autotuner)  # read without the lock: a dict lookup is atomic, writers hold the lock
    return None if table is None else table.get((group.identity, key))  # name and ranks: never id()


def _decide(autotuner: Any, key: tuple, config: Any, group: Group) -> None:
    with _decided_lock:
        _decided.setdefault(autotuner, {})[(group.identity, key)] = config
    autotuner.cache[key] = config  # later stock launches hit


def _undecide(autotuner: Any, key: tuple, group: Group) -> None:
    with _decided_lock:
        _decided.get(autotuner, {}).pop((group.identity, key), None)
    autotuner.cache.pop(key, None)


#: (id of group, (track id, key text)) -> config index: every choice a group made in this process, also for the
#: (kernel, key)s this rank did not launch, so that a rank meeting one later uses the group's choice
_choices: dict[tuple[tuple, tuple[str, str]], int] = {}
#: the session whose run the watchdog guards (an inner tuning on another group leaves it to the outer one)
_watch_owner: Any = None
_watch_lock = threading.Lock()


def compiles() -> bool:
    """Whether kernels are compiled here (a GPU, and not Triton's interpreter), so precompiling is worth it."""
    return _on_gpu()


def _on_gpu() -> bool:
    if env_flag("TRITON_INTERPRET"):
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


class LocalTrack:
    """What this rank knows of one (kernel, key): its autotuners, key, pruning, journal and compile failures."""

    def __init__(self, autotuner: Any, key: tuple, args: tuple, kwargs: dict[str, Any], session: Session) -> None:
        self.autotuners = [autotuner]
        self.key = key
        self.prune_error: Exception | None = None
        try:
            self.pruned: list[int] | str = intercept.pruned_indices(autotuner, args, kwargs)
        except Exception as exc:
            self.pruned, self.prune_error = describe_error(exc), exc
        self.errors: dict[int, str] = {}  # configs that cannot run here (compile failures, earlier attempts)
        self.unreported: dict[int, str] = {}
        self.sample: tuple[tuple, dict[str, Any]] | None = (args, kwargs)  # for precompiling, then dropped
        self.used: set[int] = set()
        self.measured: set[int] = set()  # configs this rank's journal shows measured by the group
        self.descriptions = [describe(c) for c in autotuner.configs]
        self.space_text = "\n".join(self.descriptions)
        self.entry = entry_id(intercept.kernel_id(autotuner) + "\n" + source_of(autotuner.base_fn), repr(key),
                              self.space_text, session.group.size)
        self.journal = open_journal(session.cache, self.entry, session.group)
        self.records = self.journal.read()
        for index, outcome in sorted(merge([self.records], self.descriptions).items()):
            if outcome["state"] == "measured":
                self.measured.add(index)
            else:  # failed, hung or crashed here in an earlier attempt: never launched again
                self.errors[index] = self.unreported[index] = str(outcome.get("error"))
        self.journaled: set[tuple[int, str]] = {(r["index"], r["state"]) for r in self.records}

    def first_index(self) -> int | None:
        """The config this rank launches first: the first kept one not excluded here (None: pruning failed)."""
        if not isinstance(self.pruned, list) or not self.pruned:
            return None
        fresh = [i for i in self.pruned if i not in self.errors]
        return next((i for i in fresh if i not in self.measured), fresh[0] if fresh else self.pruned[0])

    def info(self) -> dict[str, Any]:
        """What the group needs to know about it (sent once, in the run it was first met)."""
        at = self.autotuners[0]
        return {"name": intercept.kernel_name(at), "descriptions": self.descriptions,
                "names": [str(c) for c in at.configs], "space_text": self.space_text, "pruned": self.pruned,
                "entry": self.entry, "journal": self.records}

    def note(self, index: int, state: str, **fields: Any) -> None:
        """Append to this rank's journal of the track, once per (config, state)."""
        if (index, state) not in self.journaled:
            self.journaled.add((index, state))
            self.journal.append(index, state, config=self.descriptions[index], **fields)


def open_journal(cache: DiskCache, entry: str, group: Group) -> Journal:
    """This rank's crash journal of one (kernel, key) entry (the one place that builds a Journal here)."""
    return Journal(cache.folder / f"{entry}.rank{group.rank}.journal")


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


class Session:
    """One call of a contextual tuned function (see the module docstring).

    ``tuning``: every rank of the group takes part (the group's first call, or a call the group agreed to tune
    in); otherwise the call is *hot*: no communication, and a key the group has not decided runs with a local
    default and is *pending* until the group's next agreement.
    """

    def __init__(self, tuner: ContextualTuner, group: Group, tuning: bool) -> None:
        self.tuner, self.group, self.tuning = tuner, group, tuning
        self.label = tuner.label
        self.tracks: dict[tuple[str, str], Track] = {}
        self.local: dict[tuple[str, str], LocalTrack] = {}
        self.lock = threading.Lock()
        self.runs = 0
        self.needs_tuning = False
        #: undecided keys run with a local default, without communication (hot calls on a group, or past the bound)
        self.pending_mode = not tuning and group.size > 1
        #: (autotuner id, key) of every launch this call tuned: benchmark launches until the final run
        self.session_keys: set[tuple[int, tuple]] = set()
        self.final_run = False
        self._reset: set[tuple[int, tuple]] = set()
        self._new: list[tuple[str, str]] = []
        self._records: dict[tuple[str, str], list[tuple[int, Any, str | None]]] = {}
        self._inflight: list[tuple[tuple[str, str], int]] = []
        self._armed = False
        self._started = time.monotonic()
        self._idle, self._last_state = 0, ()

    # what a hot call never needs is made on first use

    @functools.cached_property
    def clock(self) -> Any:
        """Times the tuning launches of this call."""
        return make_clock()

    @functools.cached_property
    def cache(self) -> DiskCache:
        """The contextual disk cache (and the folder of the journals)."""
        return DiskCache("contextual")

    @functools.cached_property
    def timeout(self) -> float:
        """Seconds of the watchdog per run and of each exchange."""
        return self.tuner.timeout if self.tuner.timeout is not None else default_timeout()

    @functools.cached_property
    def log(self) -> logging.Logger:
        """This rank's log file."""
        return logs.rank_log()

    # -- intercepted launches (inside the function) ----------------------------------------------------------------

    def launch(self, autotuner: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Run one intercepted launch (see :class:`~triton_dist_tune.intercept.Handler`)."""
        key = intercept.tuning_key(autotuner, args, kwargs)
        config = decided_config(autotuner, key, self.group)
        if config is not None:
            if self.session_keys and (id(autotuner), key) in self.session_keys:
                return self._decided_launch(autotuner, key, config, args, kwargs)
            return intercept.launch_with(autotuner, config, args, kwargs)
        tid = (intercept.track_id(autotuner), repr(key))
        chosen = _choices.get((self.group.identity, tid))
        if chosen is not None:  # the group decided it without this rank (met by the others only)
            config = autotuner.configs[chosen]
            _decide(autotuner, key, config, self.group)
            return intercept.launch_with(autotuner, config, args, kwargs)
        if self.pending_mode and tid not in self.tracks:
            return self._pending(tid, autotuner, key, args, kwargs)
        with self.lock:
            track = self.tracks.get(tid)
            if track is not None and track.done:
                config = autotuner.configs[track.best]
                _decide(autotuner, key, config, self.group)
            else:
                self.needs_tuning = True
                local = self.local.get(tid)
                if local is None:
                    local = self.local[tid] = LocalTrack(autotuner, key, args, kwargs, self)
                    self._new.append(tid)
                elif not any(a is autotuner for a in local.autotuners):
                    local.autotuners.append(autotuner)
                index = track.current() if track is not None else local.first_index()
                records = self._records.setdefault(tid, [])
                if index is not None and index in local.errors:
                    records.append((index, None, local.errors[index]))
                    index = None
        if config is not None:
            return intercept.launch_with(autotuner, config, args, kwargs)
        if index is None:
            return None
        return self._timed(tid, autotuner, key, index, args, kwargs)

    def _decided_launch(self, autotuner: Any, key: tuple, config: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A launch of a key this call tuned, once decided: a benchmark launch (hooks restore what it changes)
        until the final run, where it is the real launch, after the reset Triton makes once tuning is done."""
        if not self.final_run:
            return intercept.bench_launch(autotuner, config, args, kwargs)
        if (id(autotuner), key) not in self._reset:
            self._reset.add((id(autotuner), key))
            intercept.reset_before_use(autotuner, config, args, kwargs)
        return intercept.launch_with(autotuner, config, args, kwargs)

    def _pending(self, tid: tuple[str, str], autotuner: Any, key: tuple, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A key the group has not decided, met where this rank cannot ask the group: run the first config its
        pruning keeps (a real launch), and remember the key for the group's next agreement."""
        # (a single process tunes a new key in its next call: nothing to agree on, nothing kept)
        pending = self.tuner.pending.setdefault(self.group.identity, {}) if self.group.size > 1 else {}
        slot = (id(autotuner), key)
        index = pending.get(slot, (None, None))[1]
        if index is None:
            try:
                kept = intercept.pruned_indices(autotuner, args, kwargs)
            except Exception:
                kept = []  # the group's tuning reports it; the local default is the first config
            index = kept[0] if kept else 0
            pending[slot] = (tid, index)
            self.log.info("%s kernel=%s key=%s is not decided by group '%s' and cannot be tuned in this call; "
                          "running config %d until the group's next agreement", self.label, tid[0], tid[1],
                          self.group.name, index)
        return intercept.launch_with(autotuner, autotuner.configs[index], args, kwargs)

    def _timed(self, tid: tuple[str, str], autotuner: Any, key: tuple, index: int, args: tuple,
               kwargs: dict[str, Any]) -> Any:
        config = autotuner.configs[index]
        local = self.local[tid]
        with self.lock:
            self.session_keys.add((id(autotuner), key))
            self._inflight.append((tid, index))
            local.note(index, "started")
        self._arm()
        try:
            start = self.clock.start()
            out = intercept.bench_launch(autotuner, config, args, kwargs)
            record = (index, self.clock.stop(start), None)
        except Exception as exc:  # a config that fails is data: recorded, skipped, left out on every rank
            out, record = None, (index, None, describe_error(exc))
            local.note(index, "local_failure", error=record[2])
        with self.lock:
            self._records.setdefault(tid, []).append(record)
            local.used.add(index)
        return out

    # -- the watchdog ----------------------------------------------------------------------------------------------

    def _arm(self) -> None:
        """Put this run under the watchdog (once per run; not when an outer tuning already has it)."""
        global _watch_owner
        if self._armed:
            return
        with _watch_lock:
            if _watch_owner is not None:
                return
            _watch_owner = self
        self._armed = True
        WATCHDOG.arm(self.timeout, f"{self.label} run {self.runs - 1}", self._hung)

    def _disarm(self) -> None:
        global _watch_owner
        if self._armed:
            WATCHDOG.disarm()
            self._armed = False
            with _watch_lock:
                _watch_owner = None

    def _hung(self) -> None:
        """The watchdog fired: every config this rank launched in the run is journaled as hung."""
        for tid, index in sorted(set(self._inflight)):
            self.local[tid].journal.append(index, "hung", config=self.local[tid].descriptions[index],
                                           error=f"run {self.runs - 1} exceeded {self.timeout:g} s")

    # -- the loop --------------------------------------------------------------------------------------------------

    def call(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Run the function until every track is decided, then once more; return that run's result."""
        try:
            return self._loop(args, kwargs)
        finally:
            for local in self.local.values():
                local.journal.close()

    def _loop(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        while True:
            self.final_run = all(t.done for t in self.tracks.values())
            out, error = self._run_once(args, kwargs)
            if not self.tuning and not self.needs_tuning:
                if error is not None:
                    raise error
                return out  # every launch was decided (or pending): no communication at all
            created = self._exchange(error)
            if self.final_run and not created:
                self._summary()
                return out
            if self.runs >= self.tuner.max_runs and not all(t.done for t in self.tracks.values()):
                return self._bounded(args, kwargs)
            self._precompile()
            self._idle_check(created)

    def _bounded(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """The bound on runs per call is reached (on every rank at the same run): end every track with the best
        config so far, run once more without communication, and return that run's result."""
        undone = sorted(tid for tid, t in self.tracks.items() if not t.done)
        message = (f"{self.label} reached max_runs={self.tuner.max_runs} with {len(undone)} kernel key(s) still "
                   f"tuning ({', '.join(f'{k} {t}' for k, t in undone)}): using the best config measured so far for "
                   "each; raise max_runs (or TRITON_DIST_AUTOTUNE_MAX_RUNS) to tune them fully")
        self.log.warning("%s", message)
        log.warning("triton_dist_tune: %s", message)
        for tid in undone:
            self.tracks[tid].force("best so far at max_runs")
            self._decided(self.tracks[tid])
        self.pending_mode, self.tuning, self.needs_tuning, self.final_run = True, False, False, True
        out, error = self._run_once(args, kwargs)
        if error is not None:
            raise error
        self._summary()
        return out

    def _run_once(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, Exception | None]:
        self.runs += 1
        self._new, self._records, self._inflight, self._reset = [], {}, [], set()
        if self.tuning and not self.final_run:
            self._arm()
        try:
            with intercept.intercepting(self):
                try:
                    return self.tuner.fn(*args, **kwargs), None
                except Exception as exc:
                    return None, exc
        finally:
            self._disarm()

    def _exchange(self, error: Exception | None) -> bool:
        """Share this run's data, update every track alike; returns whether new tracks were created."""
        self.clock.synchronize()
        launches = {tid: [(i, None if tok is None else self.clock.read(tok), e) for i, tok, e in recs]
                    for tid, recs in self._records.items()}
        new = {tid: self.local[tid].info() for tid in self._new}
        errors = {tid: dict(local.unreported) for tid, local in self.local.items() if local.unreported}
        for local in self.local.values():
            local.unreported = {}
        failed_here = any(e for recs in launches.values() for _, _, e in recs)
        raised = describe_error(error) if error is not None else None
        disk = self._lookup(new) if self.group.rank == 0 else {}
        mine = {"new": new, "launches": launches, "errors": errors, "raised": raised,
                "excused": raised is not None and failed_here, "disk": disk}
        gathered = self.group.allgather(mine, f"{self.label} end of run {self.runs - 1}",
                                        timeout=exchange_timeout(self.timeout))
        try:
            created = self._create(gathered)
        except PruningError as exc:
            local = next((lt.prune_error for lt in self.local.values() if lt.prune_error is not None), None)
            raise pruning_error(str(exc)) from local
        for tid in sorted(self.tracks):
            self._step(tid, self.tracks[tid], gathered)
        raisers = [(r, m["raised"]) for r, m in enumerate(gathered) if m["raised"] and not m["excused"]]
        if raisers:
            text = "; ".join(f"rank {r}: {m}" for r, m in raisers)
            self.log.error("%s the function raised in run=%d: %s", self.label, self.runs - 1, text)
            raise AutotuneError(f"{self.label} the tuned function raised during tuning run {self.runs - 1} on group "
                                f"'{self.group.name}': {text}") from error
        return created

    def _create(self, gathered: list[dict[str, Any]]) -> bool:
        infos: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
        for rank, message in enumerate(gathered):
            for tid, info in message["new"].items():
                infos.setdefault(tid, {})[rank] = info
        created = []
        for tid in sorted(infos):
            track = self.tracks.get(tid)
            if track is not None:
                done, revision = track.done, track.revision
                track.join(infos[tid])
                self._revised(track, done, revision)
            else:
                track = self.tracks[tid] = Track(tid[0], tid[1], infos[tid], self.tuner.n_warmup, self.tuner.n_repeat)
                track.resume(merge([infos[tid].get(r, {}).get("journal", []) for r in range(self.group.size)],
                                   track.descriptions))
                created.append(tid)
        found = dict(gathered[0]["disk"])
        missing = [tid for tid in created if tid not in found]
        if missing:  # met on other ranks only: rank 0 looks them up now
            wanted = {tid: infos[tid][min(infos[tid])] for tid in missing}
            found.update(self.group.broadcast(self._lookup(wanted) if self.group.rank == 0 else None,
                                              f"{self.label} disk cache", timeout=self.timeout))
        for tid in created:
            track = self.tracks[tid]
            index = found.get(tid)
            if not track.done and index is not None and index in track.order and index not in track.failed:
                track.finish(index, "disk cache")
            if track.done:
                self._decided(track)
        return bool(created)

    def _revised(self, track: Track, was_done: bool, revision: int) -> None:
        """A late failure changed a decided track: publish its new choice, or take the old one back."""
        if track.revision == revision:
            return
        self.log.warning("%s %s: the chosen config failed on a rank that met it late; %s", self.label, track.label,
                         f"choosing config {track.best} instead" if track.done else "tuning it again")
        if track.done:
            self._decided(track)
        elif was_done:
            _choices.pop((self.group.identity, (track.kernel, track.key_text)), None)
            local = self.local.get((track.kernel, track.key_text))
            for autotuner in local.autotuners if local is not None else []:
                _undecide(autotuner, local.key, self.group)

    def _lookup(self, infos: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], int | None]:
        """Group rank 0 only: the disk cache's config index for each (kernel, key) of ``infos``."""
        if env_flag("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE"):
            return dict.fromkeys(infos)
        found = {}
        for tid, info in infos.items():
            data = self.cache.load(info["entry"], info["space_text"])
            index = data["index"] if data is not None else -1
            ok = 0 <= index < len(info["descriptions"]) and data["config"] == info["descriptions"][index]
            found[tid] = index if ok else None
        return found

    def _step(self, tid: tuple[str, str], track: Track, gathered: list[dict[str, Any]]) -> None:
        done, revision = track.done, track.revision
        for rank, message in enumerate(gathered):
            for index, error in message["errors"].get(tid, {}).items():
                track.fail(index, f"rank {rank}: {error}")
        if done:
            self._revised(track, done, revision)
            return
        step_config, (phase, iteration) = track.current(), track.phase()
        per_rank = {r: m["launches"][tid] for r, m in enumerate(gathered) if tid in m["launches"]}
        outcome = track.advance(per_rank)
        own = per_rank.get(self.group.rank)
        if own is not None:
            times = ", ".join("failed" if ms is None else f"{ms:.4f}" for _, ms, _ in own)
            used = sorted({i for i, _, _ in own})
            self.log.info("%s step run=%d %s config=%s phase=%s iter=%d launches=%d times_ms=[%s] outcome=%s | %s",
                          self.label, self.runs - 1, track.label, used[0] if len(used) == 1 else used, phase,
                          iteration, len(own), times, outcome, track.descriptions[step_config])
        if outcome == "failed":
            self.log.info("%s %s config=%d FAILED: %s", self.label, track.label, step_config,
                          track.failed.get(step_config))
        self._journal_outcomes(tid, track)
        if track.done:
            self._decided(track)

    def _journal_outcomes(self, tid: tuple[str, str], track: Track) -> None:
        """Journal the group outcomes this rank has not written yet (configs it took part in)."""
        local = self.local.get(tid)
        if local is None:
            return
        for index in sorted(local.used):
            if index in track.times and index not in track.resumed:
                local.note(index, "measured", time=track.times[index],
                           per_rank=[track.per_rank[index][r] for r in sorted(track.per_rank[index])])
            elif index in track.failed:
                local.note(index, "failed", error=track.failed[index])

    def _decided(self, track: Track) -> None:
        tid = (track.kernel, track.key_text)
        _choices[(self.group.identity, tid)] = track.best
        local = self.local.get(tid)
        timings = {i: [track.times[i]] if i in track.times else [float("inf")] for i in track.order}
        if local is not None:
            for autotuner in local.autotuners:
                config = autotuner.configs[track.best]
                _decide(autotuner, local.key, config, self.group)
                if track.how not in ("only config",):
                    by_config = {autotuner.configs[i]: t for i, t in timings.items()}
                    autotuner.configs_timings = by_config
                    autotuner.bench_time = time.monotonic() - self._started
                    cached = track.how == "disk cache"
                    intercept.notify_listener(autotuner, local.key, config, by_config,
                                              None if cached else autotuner.bench_time, cached)
            local.sample = None
        ms = track.times.get(track.best)
        self.tuner.decisions[tid] = {"index": track.best, "config": track.descriptions[track.best],
                                     "how": track.how, "time_ms": ms, "runs": track.runs, "table": track.table()}
        self.log.info("%s decision %s config=%d group_ms=%s how=%s after %d run(s) | %s%s", self.label,
                      track.label, track.best, "-" if ms is None else f"{ms:.4f}", track.how, track.runs,
                      track.descriptions[track.best], f"; table: {track.table()}" if track.runs else "")
        if track.how in ("disk cache", "only config"):
            if local is not None:
                local.journal.remove()
            return
        if self.group.rank == 0:
            decision = {"index": track.best, "config": track.descriptions[track.best], "key": track.key_text,
                        "kernel": track.kernel, "function": self.tuner.name, "group_size": self.group.size,
                        "time_ms": ms, "how": track.how, "measurements": track.table()}
            try:
                self.cache.store(track.entry, decision, track.space_text)
            except (OSError, ValueError) as exc:
                log.warning("triton_dist_tune: could not write the contextual cache (%s)", exc)
            if logs.printing_enabled(None):
                logs.console().info(
                    "Triton autotuning for function %s,\nwith key as %s,\nfinished after %.2fs on %d rank(s) of group "
                    "'%s' (%d run(s) of %s),\nbest config selected: %s;\n%s\ncache file: %s\nlogs: %s", track.name,
                    track.key_text, time.monotonic() - self._started, self.group.size, logs.group_title(self.group),
                    track.runs, self.tuner.name, track.names[track.best], logs.format_table(track.outcomes(),
                                                                                              track.best),
                    self.cache.path(track.entry), logs.job_dir())
        if local is not None:
            local.journal.remove()  # after the decision is in the cache (rank 0), so a crash loses nothing

    def _precompile(self) -> None:
        """Compile the configs of newly met tracks in parallel (GPUs only; never under the interpreter)."""
        for tid, local in self.local.items():
            track = self.tracks.get(tid)
            if local.sample is None or track is None:
                continue
            args, kwargs = local.sample
            local.sample = None  # the arguments of the first launch are not kept longer than this
            if track.done or not self.tuner.precompile or not compiles():
                continue
            todo = [i for i in track.order if i not in local.used and i not in track.failed and i not in track.times]
            failures = intercept.precompile(local.autotuners[0], todo, args, kwargs)
            local.errors.update(failures)
            local.unreported.update(failures)
            for index, error in failures.items():
                self.log.info("%s %s config=%d does not compile here: %s", self.label, track.label, index, error)

    def _idle_check(self, created: bool) -> None:
        """End tracks that no longer advance: after MAX_IDLE_RUNS runs in which no track moved."""
        state = tuple((tid, t.progress, t.best) for tid, t in sorted(self.tracks.items()))
        self._idle = 0 if created or state != self._last_state else self._idle + 1
        self._last_state = state
        if self._idle >= MAX_IDLE_RUNS:
            for track in self.tracks.values():
                if not track.done:
                    self.log.warning("%s %s: not launched by every rank for %d runs; ending it", self.label,
                                     track.label, self._idle)
                    track.force()
                    self._decided(track)

    def _summary(self) -> None:
        tuned = [t for t in self.tracks.values() if t.how == "tuned"]
        self.log.info("%s done after %d run(s): %d kernel key(s) decided (%d tuned) in %.2f s", self.label,
                      self.runs, len(self.tracks), len(tuned), time.monotonic() - self._started)


#: default bound on the runs of one call (``max_runs`` / ``TRITON_DIST_AUTOTUNE_MAX_RUNS``)
DEFAULT_MAX_RUNS = 1000
#: default number of calls between the group's agreements on pending keys (``sync_every`` /
#: ``TRITON_DIST_AUTOTUNE_SYNC_EVERY``)
DEFAULT_SYNC_EVERY = 64


def _setting(value: int | None, variable: str, default: int, what: str) -> int:
    if value is None:
        text = os.environ.get(variable, "")
        if not text:
            return default
        if not text.isdigit():
            raise BadInputError(f"{variable} must be a positive whole number, not {text!r}")
        value = int(text)
    if not isinstance(value, int) or value < 1:
        raise BadInputError(f"{what} must be a positive whole number, got {value!r}")
    return value


class ContextualTuner:
    """The state behind one function decorated with :func:`~triton_dist_tune.autotuner.contextual_autotune`."""

    def __init__(self, fn: Callable[..., Any], is_dist: Any, n_repeat: int, n_warmup: int, *,
                 timeout: float | None, precompile: bool, name: str | None, max_runs: int | None = None,
                 sync_every: int | None = None) -> None:
        if n_warmup < 0 or n_repeat < 1:
            raise BadInputError(f"need n_warmup >= 0 and n_repeat >= 1, got {n_warmup} and {n_repeat}")
        self.fn, self.is_dist = fn, is_dist
        self.n_repeat, self.n_warmup, self.timeout, self.precompile = n_repeat, n_warmup, timeout, precompile
        self.max_runs = _setting(max_runs, "TRITON_DIST_AUTOTUNE_MAX_RUNS", DEFAULT_MAX_RUNS, "max_runs")
        self.sync_every = _setting(sync_every, "TRITON_DIST_AUTOTUNE_SYNC_EVERY", DEFAULT_SYNC_EVERY, "sync_every")
        self.name = name or getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
        self.label = f"[contextual {self.name}]"
        #: (track id, key text) -> the group's decision and its table of measurements
        self.decisions: dict[tuple[str, str], dict[str, Any]] = {}
        #: runs of the function in the last call
        self.last_runs = 0
        #: calls in which the group agreed to tune (pending keys), for inspection
        self.agreed_calls: list[int] = []
        #: group identity -> {(autotuner id, key): (track id, local default index)}: keys met in hot calls that the
        #: group has not decided, run with a local default until the group's next agreement
        self.pending: dict[tuple, dict[tuple[int, tuple], tuple[Any, int]]] = {}
        self._called: set[tuple] = set()
        self._calls: dict[tuple, int] = {}

    def group(self) -> Group:
        """The group this function tunes with: alone, the default group, or the given one."""
        if self.is_dist is False or self.is_dist is None:
            return _ALONE
        group = resolve_group(None if self.is_dist is True else self.is_dist)
        return _ALONE if group.size == 1 else group

    def __call__(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        group = self.group()
        outer = intercept.active_handler()
        if isinstance(outer, Session) and outer.group is group:
            return self.fn(*args, **kwargs)  # nested in a tuning of the same group: that tuning steps our kernels
        gid = group.identity
        calls = self._calls[gid] = self._calls.get(gid, 0) + 1
        tuning = gid not in self._called or (group.size > 1 and calls % self.sync_every == 0 and self._agree(group,
                                                                                                           calls))
        session = Session(self, group, tuning)
        try:
            out = session.call(args, kwargs)
        finally:
            self.last_runs = session.runs
        self._called.add(gid)
        return out

    def _agree(self, group: Group, calls: int) -> bool:
        """Every ``sync_every`` calls, one exchange: does any rank hold pending keys? Then this call tunes, on
        every rank alike (the pending keys are met again and tuned like new ones)."""
        pending = self.pending.pop(group.identity, {})
        mine = sorted({f"{tid[0]} {tid[1]}" for tid, _ in pending.values()})
        everyone = group.allgather(mine, f"[contextual {self.name}] agreement at call {calls}", timeout=self.timeout)
        if not any(everyone):
            return False
        self.agreed_calls.append(calls)
        logs.rank_log().info("[contextual %s] call %d: the group tunes pending key(s): %s", self.name, calls,
                             "; ".join(f"rank {r}: {p}" for r, p in enumerate(everyone) if p))
        return True
