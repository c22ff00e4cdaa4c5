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

A later call whose launches are all decided is a single run with no communication at all.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from . import intercept, logs
from .cache import DiskCache, entry_id, env_flag, source_of
from .comm import Group, SingleGroup, default_timeout, resolve_group
from .errors import AutotuneError, BadInputError
from .measure import describe_error
from .schedule import Track
from .space import describe

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


class Clock:
    """Times single launches without synchronizing: CUDA events on GPUs, read after the run; else the host."""

    def __init__(self) -> None:
        self.cuda = _on_gpu()

    def start(self) -> Any:
        """A token marking the start of a launch."""
        if self.cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, start: Any) -> Any:
        """A token for the whole launch."""
        if self.cuda:
            import torch

            end = torch.cuda.Event(enable_timing=True)
            end.record()
            return start, end
        return (time.perf_counter() - start) * 1e3

    def read(self, token: Any) -> float:
        """Milliseconds of a launch (after :meth:`sync`)."""
        return float(token[0].elapsed_time(token[1])) if self.cuda else float(token)

    def sync(self) -> None:
        """Wait for the device work of the run."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()


class LocalTrack:
    """What this rank knows of one (kernel, key): its autotuners, key, pruning and compile failures."""

    def __init__(self, autotuner: Any, key: tuple, args: tuple, kwargs: dict[str, Any]) -> None:
        self.autotuners = [autotuner]
        self.key = key
        try:
            self.pruned: list[int] | str = intercept.pruned_indices(autotuner, args, kwargs)
        except Exception as exc:
            self.pruned = describe_error(exc)
        self.errors: dict[int, str] = {}  # configs that cannot run here (compile failures)
        self.unreported: dict[int, str] = {}
        self.sample: tuple[tuple, dict[str, Any]] | None = (args, kwargs)  # for precompiling, then dropped
        self.used: set[int] = set()

    def info(self, group_size: int) -> dict[str, Any]:
        """What the group needs to know about it (sent once, in the run it was first met)."""
        at = self.autotuners[0]
        descriptions = [describe(c) for c in at.configs]
        space_text = "\n".join(descriptions)
        key_text = repr(self.key)
        return {"name": intercept.kernel_name(at), "descriptions": descriptions, "names": [str(c) for c in at.configs],
                "space_text": space_text, "pruned": self.pruned,
                "entry": entry_id(intercept.kernel_id(at) + "\n" + source_of(at.base_fn), key_text, space_text,
                                  group_size)}


class Session:
    """One call of a contextual tuned function (see the module docstring)."""

    def __init__(self, tuner: ContextualTuner, group: Group, first: bool) -> None:
        self.tuner, self.group, self.first = tuner, group, first
        self.label = f"[contextual {tuner.name}]"
        self.clock = Clock()
        self.tracks: dict[tuple[str, str], Track] = {}
        self.local: dict[tuple[str, str], LocalTrack] = {}
        self.lock = threading.Lock()
        self.runs = 0
        self.needs_tuning = False
        self._new: list[tuple[str, str]] = []
        self._records: dict[tuple[str, str], list[tuple[int, Any, str | None]]] = {}
        self._started = time.monotonic()
        self._idle, self._last_state = 0, ()
        self.cache = DiskCache("contextual")
        self.timeout = tuner.timeout if tuner.timeout is not None else default_timeout()
        self.log = logs.rank_log()

    # -- intercepted launches (inside the function) ----------------------------------------------------------------

    def launch(self, autotuner: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Run one intercepted launch (see :class:`~triton_dist_tune.intercept.Handler`)."""
        key = intercept.tuning_key(autotuner, args, kwargs)
        config = decided_config(autotuner, key, self.group)
        if config is not None:
            return intercept.launch_with(autotuner, config, args, kwargs)
        tid = (intercept.kernel_id(autotuner), repr(key))
        with self.lock:
            track = self.tracks.get(tid)
            if track is not None and track.done:
                config = autotuner.configs[track.best]
                _decide(autotuner, key, config, self.group)
            else:
                self.needs_tuning = True
                local = self.local.get(tid)
                if local is None:
                    local = self.local[tid] = LocalTrack(autotuner, key, args, kwargs)
                    self._new.append(tid)
                elif not any(a is autotuner for a in local.autotuners):
                    local.autotuners.append(autotuner)
                if track is not None:
                    index: int | None = track.current()
                elif isinstance(local.pruned, list) and local.pruned:
                    index = next((i for i in local.pruned if i not in local.errors), local.pruned[0])
                else:
                    index = None  # pruning failed here: the exchange raises on every rank
                records = self._records.setdefault(tid, [])
                if index is not None and index in local.errors:
                    records.append((index, None, local.errors[index]))
                    index = None
        if config is not None:
            return intercept.launch_with(autotuner, config, args, kwargs)
        if index is None:
            return None
        return self._timed(tid, autotuner, index, args, kwargs)

    def _timed(self, tid: tuple[str, str], autotuner: Any, index: int, args: tuple, kwargs: dict[str, Any]) -> Any:
        config = autotuner.configs[index]
        try:
            start = self.clock.start()
            out = intercept.launch_with(autotuner, config, args, kwargs)
            record = (index, self.clock.stop(start), None)
        except Exception as exc:  # a config that fails is data: recorded, skipped, left out on every rank
            out, record = None, (index, None, describe_error(exc))
        with self.lock:
            self._records.setdefault(tid, []).append(record)
            self.local[tid].used.add(index)
        return out

    # -- the loop --------------------------------------------------------------------------------------------------

    def call(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Run the function until every track is decided, then once more; return that run's result."""
        while True:
            final = all(t.done for t in self.tracks.values())
            out, error = self._run_once(args, kwargs)
            if self.runs == 1 and not self.first and not self.needs_tuning:
                if error is not None:
                    raise error
                return out  # every launch was decided: no communication at all
            created = self._exchange(error)
            if final and not created:
                self._summary()
                return out
            self._precompile()
            self._idle_check(created)

    def _run_once(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, Exception | None]:
        self.runs += 1
        self._new, self._records = [], {}
        with intercept.intercepting(self):
            try:
                return self.tuner.fn(*args, **kwargs), None
            except Exception as exc:
                return None, exc

    def _exchange(self, error: Exception | None) -> bool:
        """Share this run's data, update every track alike; returns whether new tracks were created."""
        self.clock.sync()
        launches = {tid: [(i, None if tok is None else self.clock.read(tok), e) for i, tok, e in recs]
                    for tid, recs in self._records.items()}
        new = {tid: self.local[tid].info(self.group.size) for tid in self._new}
        errors = {tid: dict(local.unreported) for tid, local in self.local.items() if local.unreported}
        for local in self.local.values():
            local.unreported = {}
        failed_here = any(e for recs in launches.values() for _, _, e in recs)
        raised = describe_error(error) if error is not None else None
        disk = self._lookup(new) if self.group.rank == 0 else {}
        mine = {"new": new, "launches": launches, "errors": errors, "raised": raised,
                "excused": raised is not None and failed_here, "disk": disk}
        gathered = self.group.allgather(mine, f"{self.label} end of run {self.runs - 1}", timeout=self.timeout)

        created = self._create(gathered)
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
            if tid in self.tracks:
                self.tracks[tid].join(infos[tid])
            else:
                self.tracks[tid] = Track(tid[0], tid[1], infos[tid], self.tuner.n_warmup, self.tuner.n_repeat)
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
            if not track.done and index is not None and index in track.order:
                track.finish(index, "disk cache")
            if track.done:
                self._decided(track)
        return bool(created)

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
        if track.done:
            return
        for rank, message in enumerate(gathered):
            for index, error in message["errors"].get(tid, {}).items():
                track.fail(index, f"rank {rank}: {error}")
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
                          track.failed[step_config])
        if track.done:
            self._decided(track)

    def _decided(self, track: Track) -> None:
        tid = (track.kernel, track.key_text)
        local = self.local.get(tid)
        if local is not None:
            for autotuner in local.autotuners:
                _decide(autotuner, local.key, autotuner.configs[track.best], self.group)
            local.sample = None
        ms = track.times.get(track.best)
        self.tuner.decisions[tid] = {"index": track.best, "config": track.descriptions[track.best],
                                     "how": track.how, "time_ms": ms, "runs": track.runs, "table": track.table()}
        self.log.info("%s decision %s config=%d group_ms=%s how=%s after %d run(s) | %s%s", self.label,
                      track.label, track.best, "-" if ms is None else f"{ms:.4f}", track.how, track.runs,
                      track.descriptions[track.best], f"; table: {track.table()}" if track.runs else "")
        if track.how != "tuned":
            return
        if self.group.rank == 0:
            decision = {"index": track.best, "config": track.descriptions[track.best], "key": track.key_text,
                        "kernel": track.kernel, "function": self.tuner.name, "group_size": self.group.size,
                        "time_ms": ms, "measurements": track.table()}
            try:
                self.cache.store(track.entry, decision, track.space_text)
            except (OSError, ValueError) as exc:
                log.warning("triton_dist_tune: could not write the contextual cache (%s)", exc)
            if logs.printing_enabled(None):
                logs.console().info("Triton autotuning for function %s,\nwith key as %s,\nfinished after %.2fs,\n"
                                    "best config selected: %s;", track.name, track.key_text,
                                    time.monotonic() - self._started, track.names[track.best])

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
            todo = [i for i in track.order if i not in local.used and i not in track.failed]
            failures = intercept.precompile(local.autotuners[0], todo, args, kwargs)
            local.errors.update(failures)
            local.unreported.update(failures)
            for index, error in failures.items():
                self.log.info("%s %s config=%d does not compile here: %s", self.label, track.label, index, error)

    def _idle_check(self, created: bool) -> None:
        """End tracks that no longer advance: after MAX_IDLE_RUNS runs in which no track moved."""
        state = tuple((tid, t.pos, t.step, t.best) for tid, t in sorted(self.tracks.items()))
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


class ContextualTuner:
    """The state behind one function decorated with :func:`~triton_dist_tune.autotuner.contextual_autotune`."""

    def __init__(self, fn: Callable[..., Any], is_dist: Any, n_repeat: int, n_warmup: int, *,
                 timeout: float | None, precompile: bool, name: str | None) -> None:
        if n_warmup < 0 or n_repeat < 1:
            raise BadInputError(f"need n_warmup >= 0 and n_repeat >= 1, got {n_warmup} and {n_repeat}")
        self.fn, self.is_dist = fn, is_dist
        self.n_repeat, self.n_warmup, self.timeout, self.precompile = n_repeat, n_warmup, timeout, precompile
        self.name = name or getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
        #: (kernel id, key text) -> the group's decision and its table of measurements
        self.decisions: dict[tuple[str, str], dict[str, Any]] = {}
        #: runs of the function in the last call
        self.last_runs = 0
        self._called: set[tuple] = set()

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
        session = Session(self, group, first=group.identity not in self._called)
        try:
            out = session.call(args, kwargs)
        finally:
            self.last_runs = session.runs
        self._called.add(group.identity)
        return out
