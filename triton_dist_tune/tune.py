"""``autotune``: the function-level tuner whose every rank measures the same configs and ends on the same choice.

The protocol of one tuning (one key, one group), every step on every rank of the group:

1. **Agree**: one exchange of (key, config-space fingerprint, group size, local problems). Any difference, or a
   ``key_fn`` that raised, or a config that clashes with the call's keywords, raises the same error everywhere.
2. **Cache**: group rank 0 alone reads the disk cache and broadcasts what it found.
3. **Prune**: ``prune_fn`` runs on every rank; a config is kept only where every rank keeps it.
4. **Resume**: the ranks gather their crash journals; configs already measured are not measured again, configs
   that crashed, hung or failed in an earlier attempt are left out.
5. **Measure**: see :mod:`triton_dist_tune.measure`: a warm-up, then a race of interleaved rounds in which
   clearly slower configs leave early (or sharded measuring, for rank-local functions).
6. **Decide**: the least group time among the configs left in the race wins (ties: the lower index); group rank 0
   writes the cache atomically, with every config's median and spread and the margin over the runner-up, and
   broadcasts the choice. The function is then called once with it and its result returned.

Once a key is decided, a call is a ``key_fn`` call, a dict lookup and the function call: no communication.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from . import settings
from .disk import logs
from .disk.cache import DiskCache, dependency_text, entry_id, source_of
from .errors import AllConfigsFailedError, BadInputError, MismatchError, describe_error
from .faults.journal import Journal, merge
from .group.channel import Group, agree
from .group.resolve import channel_entries, resolve_group
from .measure.arguments import ArgumentState, check_names, named_arguments
from .measure.lockstep import Measurer, Plan, Reference, Trial
from .measure.precompile import precompile
from .measure.race import Race, RacePlan
from .measure.replicas import Layout, settle
from .measure.timing import make_clock, timing_mode
from .records import Decision, Outcome
from .space import (
    CALL_KEYWORDS,
    check_call,
    check_no_clash,
    check_space_signature,
    describe,
    describe_key,
    fingerprint,
    validate_space,
)

log = logging.getLogger("triton_dist_tune")


def to_hashable(tensor: Any) -> tuple:
    """A hashable key part for a tensor: ``(shape, stride, dtype)``, as Triton-distributed's ``to_hashable``.

    The device type is not part of it; the tuner adds the device types of the call's tensors to the disk cache's
    entry itself."""
    return (tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)


def _tensor_devices(args: tuple, kwargs: dict[str, Any]) -> str:
    kinds = {v.device.type for v in (*args, *kwargs.values()) if hasattr(v, "device") and hasattr(v, "data_ptr")}
    return ",".join(sorted(kinds))


class Tuner:
    """The state behind one decorated function: its space, options and decisions (see :func:`autotune`)."""

    def __init__(self, fn: Callable[..., Any], config_space: Sequence[dict[str, Any]],
                 key_fn: Callable[..., Hashable], prune_fn: Callable[..., bool] | None, *, n_warmup: int,
                 n_repeat: int, timeout: float | None, reset_to_zero: Iterable[str], restore_value: Iterable[str],
                 pre_hook: Callable[..., Any] | None, post_hook: Callable[..., Any] | None,
                 ref_prog: Callable[..., Any] | None, rtol: float | None, atol: float | None,
                 early_stop: float | None, sharded: bool, precompile_fn: Callable[..., Any] | None,
                 compile_threads: int | None, refine_top: int, name: str | None, timing: str | None = None,
                 batch: int | None = None, budget: float | None = None,
                 cache_key_extra: str | Callable[[], str] | None = None) -> None:
        if not callable(key_fn):
            raise BadInputError("key_fn must be callable")
        if prune_fn is not None and not callable(prune_fn):
            raise BadInputError("prune_fn must be callable or None")
        if n_warmup < 0 or n_repeat < 1:
            raise BadInputError(f"need n_warmup >= 0 and n_repeat >= 1, got {n_warmup} and {n_repeat}")
        if timeout is not None and not 0 < timeout < float("inf"):
            raise BadInputError(f"timeout must be a positive number of seconds, got {timeout}")
        if early_stop is not None and early_stop <= 1:
            raise BadInputError(f"early_stop is a slowdown factor and must be > 1, got {early_stop}")
        if (rtol is None) != (atol is None):
            raise BadInputError("give both rtol and atol, or neither (then torch's defaults for the dtype apply)")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "tuned")
        self.space = validate_space(config_space)
        check_space_signature(fn, self.space, self.name)
        try:
            self.params = frozenset(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            self.params = frozenset()
        if cache_key_extra is not None and not (isinstance(cache_key_extra, str) or callable(cache_key_extra)):
            raise BadInputError("cache_key_extra must be a string or a function returning one")
        self.cache_key_extra = cache_key_extra
        self._dependencies: str | None = None
        self._overwrite_warned: set[str] = set()
        self.descriptions = [describe(c) for c in self.space]
        self.space_text = "\n".join(self.descriptions)
        self.key_fn, self.prune_fn = key_fn, prune_fn
        self.n_warmup, self.n_repeat, self.timeout, self.early_stop = n_warmup, n_repeat, timeout, early_stop
        self.restore_value = check_names(fn, restore_value, "restore_value")
        self.reset_to_zero = check_names(fn, reset_to_zero, "reset_to_zero")
        self.pre_hook, self.post_hook = pre_hook, post_hook
        self.ref_prog, self.rtol, self.atol = ref_prog, rtol, atol
        self.sharded = sharded
        self.precompile_fn, self.compile_threads = precompile_fn, compile_threads
        if refine_top < 0:
            raise BadInputError(f"refine_top must be >= 0, got {refine_top}")
        if batch is not None and not (isinstance(batch, int) and batch >= 1):
            raise BadInputError(f"batch must be a whole number of calls >= 1, got {batch!r}")
        if budget is not None and not 0 < budget < float("inf"):
            raise BadInputError(f"budget must be a positive number of seconds, got {budget!r}")
        self.refine_top = refine_top
        timing_mode(timing)  # reject a bad mode now; the environment may still override it per call
        self.timing, self.batch, self.budget = timing, batch, budget
        self.cache = DiskCache(self.name)
        self.source = source_of(fn)
        #: decisions of calls on the default group, key -> config (the hot path reads this)
        self.decided: dict[Hashable, dict[str, Any]] = {}
        #: decisions of calls with an explicit group, (group identity: kind, name, global ranks; key) -> config
        self.decided_in: dict[tuple[tuple, Hashable], dict[str, Any]] = {}
        #: the last decision per (group name, key), with every config's outcome, for inspection
        self.decisions: dict[tuple[str, Hashable], Decision] = {}

    @property
    def tables(self) -> dict[tuple[str, Hashable], list[dict[str, Any]]]:
        """The last decision's outcomes per (group name, key), as JSON-style rows (a view of ``decisions``)."""
        return {slot: [o.to_json() for o in d.outcomes] for slot, d in self.decisions.items()}

    # -- calls that are not the hot path -------------------------------------------------------------------------

    def call(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A call that carries tuner keywords or whose key is not decided yet."""
        enabled = kwargs.pop("autotune", True)
        verbose = kwargs.pop("autotune_verbose", None)
        pg = kwargs.pop("autotune_pg", None)
        overwrite = bool(kwargs.pop("autotune_allow_arg_overwrite", False))
        replicas = kwargs.pop("autotune_replicas", None)
        typos = sorted(k for k in kwargs if k.startswith("autotune") and k not in self.params)
        problem = (f"{getattr(self.fn, '__qualname__', self.name)}() got unknown tuner keyword(s) {typos}; the "
                   f"tuner's call keywords are {sorted(CALL_KEYWORDS)}") if typos else None
        if not enabled:
            if problem:
                raise BadInputError(problem)
            return self._run(args, kwargs, self._first_config(args, kwargs, overwrite), overwrite)
        group = resolve_group(pg)
        layout = None if replicas is None else Layout(group, resolve_group(replicas))
        if layout is not None and self.sharded:
            raise BadInputError(f"{self.name}: autotune_replicas is for lock-step tuning, not sharded=True")
        try:
            key = self.key_fn(*args, **kwargs)
            hash(key)
            key_error = None
        except Exception as exc:
            key, key_error = None, f"key_fn failed: {describe_error(exc)}"
        table, slot = (self.decided, key) if pg is None else (self.decided_in, (group.identity, key))
        if layout is not None:
            table, slot = self.decided_in, (group.identity, layout.replicas.identity, key)
        config = table.get(slot) if key_error is None else None
        if config is not None and problem:
            raise BadInputError(problem)  # decided: the other ranks are not tuning, so nothing to agree on
        if config is None:
            with group.lock:  # threads tuning on one group take turns, so that their exchanges never interleave
                config = table.get(slot) if key_error is None else None
                if config is None:
                    config = table[slot] = self._tune(group, key, key_error, problem, args, kwargs, verbose,
                                                      overwrite, layout)
        return self._run(args, kwargs, config, overwrite)

    def _run(self, args: tuple, kwargs: dict[str, Any], config: dict[str, Any], overwrite: bool) -> Any:
        """Call the function with ``config``; with ``autotune_allow_arg_overwrite``, the caller's keywords win."""
        if overwrite:
            clash = sorted(set(config).intersection(kwargs))
            for name in clash:
                if name not in self._overwrite_warned:
                    self._overwrite_warned.add(name)
                    log.warning("triton_dist_tune: %s: the caller's %s=%r overrides the tuned config's value "
                                "(autotune_allow_arg_overwrite=True)", self.name, name, kwargs[name])
            return self.fn(*args, **{**config, **kwargs})
        return self.fn(*args, **kwargs, **config)

    def _first_config(self, args: tuple, kwargs: dict[str, Any], overwrite: bool = False) -> dict[str, Any]:
        for config in self.space:
            if self.prune_fn is None or self.prune_fn(config, *args, **kwargs):
                if not overwrite:
                    check_no_clash(config, kwargs)
                return config
        raise BadInputError(f"{self.name}: prune_fn keeps no config for this call (autotune=False)")

    def _entry_extra(self, args: tuple, kwargs: dict[str, Any]) -> str:
        """What the cache entry depends on besides the function's source, key, space and group size."""
        if self._dependencies is None:
            self._dependencies = dependency_text(self.fn, self.key_fn, self.prune_fn, "")
        extra = self.cache_key_extra() if callable(self.cache_key_extra) else (self.cache_key_extra or "")
        return f"{self._dependencies}\ndevices: {_tensor_devices(args, kwargs)}\nextra: {extra}"

    # -- one tuning ----------------------------------------------------------------------------------------------

    def _tune(self, group: Group, key: Any, key_error: str | None, problem: str | None, args: tuple,
              kwargs: dict[str, Any], verbose: bool | None, overwrite: bool = False,
              layout: Layout | None = None) -> dict[str, Any]:
        started = time.perf_counter()
        rank_log = logs.rank_log()
        env = settings.current()
        key_text = ""
        extra = ""
        if key_error is None:
            try:
                key_text = describe_key(key, "the key key_fn returned")
                extra = self._entry_extra(args, kwargs)
            except Exception as exc:  # an unstable key, or a failing cache_key_extra: agreed below
                key_error = str(exc) if isinstance(exc, BadInputError) else f"cache_key_extra: {describe_error(exc)}"
        label = f"[{self.name} key={key_text}]"
        if layout is not None:
            layout.agree(self.name, key_text, self.space_text, self.timeout, key_error or problem)
        self._agree(group, key_text, key_error, kwargs, problem, args, overwrite)
        entry = entry_id(self.source, key_text, self.space_text, group.size, extra)
        timeout = self.timeout if self.timeout is not None else env.timeout

        def read_cache() -> int | None:
            data = None if env.always_tune else self.cache.load(entry, self.space_text)
            index = data["index"] if data is not None else -1
            if 0 <= index < len(self.space) and data["config"] == self.descriptions[index]:
                return index
            return None

        if layout is None:
            found = group.broadcast(read_cache() if group.rank == 0 else None, f"{label} cache lookup",
                                    timeout=timeout)
        else:
            entry = layout.entry(entry)
            found = layout.lookup(read_cache, f"{label} cache lookup", timeout)
        if found is not None:
            rank_log.info("%s cache hit: config %d %s", label, found, self.descriptions[found])
            if group.rank == 0 and logs.printing_enabled(verbose):
                logs.print_cache_hit(self.name, key_text, group, self.descriptions[found], self.cache.path(entry))
            return self.space[found]

        rank_log.info("%s tuning %d configs on %d rank(s) of group '%s'", label, len(self.space), group.size,
                      logs.group_title(group))
        kept = self._prune(group, label, args, kwargs, timeout)
        if layout is not None:
            kept = layout.keep_everywhere(kept, f"{label} prune", timeout)
        journal = self._journal(group, entry, env)
        ended = False
        try:  # the journal is locked while this tuning runs; when it is cut short its records stay for the next
            gathered = group.allgather(journal.read(), f"{label} journal exchange", timeout=timeout)
            earlier = merge(gathered, self.descriptions, only_job=env.job_id if env.always_tune else False)
            seed = fingerprint(f"{key_text}\n{self.space_text}")
            decision = self._measure(group, label, kept, earlier, journal, args, kwargs, timeout, verbose, seed,
                                     layout)
            decision.seconds = time.perf_counter() - started
            try:
                self._decide(group, label, entry, key_text, decision, timeout, layout is None or layout.reads_cache)
            except AllConfigsFailedError:
                ended = True  # every config failed: this tuning is over, and nothing of it may replay later
                raise
            ended = True
        finally:
            if ended:
                journal.remove()
            journal.close()
        self.decisions[(group.name, key)] = decision
        if group.rank == 0 and logs.printing_enabled(verbose):
            logs.print_summary(self.name, key_text, group, decision, self.cache.path(entry))
        return self.space[decision.index]

    def _journal(self, group: Group, entry: str, env: settings.Settings) -> Journal:
        """This rank's crash journal for ``entry``: its file names the group (name and global ranks)."""
        ranks = list(getattr(group, "global_ranks", []) or [])
        tag = fingerprint(repr(group.identity))[:10]
        return Journal(self.cache.folder / f"{entry}.{tag}.rank{group.rank}.journal",
                       {"job": env.job_id, "group": group.name, "ranks": ranks})

    def _agree(self, group: Group, key_text: str, key_error: str | None, kwargs: dict[str, Any],
               call_problem: str | None = None, args: tuple = (), overwrite: bool = False) -> None:
        problem = key_error or call_problem
        if problem is None:
            try:
                check_call(self.fn, self.space, args, kwargs, self.name, overwrite)
            except BadInputError as exc:
                problem = str(exc)
        fields = {"group size": str(group.size), "config space": self.space_text, "key": key_text}
        agreement = agree(group, fields, f"[{self.name}] agree on key and config space", self.timeout, problem)
        if agreement.notes:
            raise BadInputError(f"{self.name}: " + "; ".join(f"rank {r}: {p}" for r, p in agreement.notes))
        for what, holders in agreement.differ.items():
            detail = "; ".join(f"ranks {ranks}: {text}" for ranks, text in holders)
            raise MismatchError(f"{self.name}: the ranks of group '{group.name}' differ in {what}: {detail}")

    def _prune(self, group: Group, label: str, args: tuple, kwargs: dict[str, Any], timeout: float) -> list[int]:
        mine: list[bool] | str
        try:
            mine = [True if self.prune_fn is None else bool(self.prune_fn(c, *args, **kwargs)) for c in self.space]
        except Exception as exc:
            mine = f"prune_fn raised {describe_error(exc)}"
        everyone = group.allgather(mine, f"{label} prune", timeout=timeout)
        errors = [(r, m) for r, m in enumerate(everyone) if isinstance(m, str)]
        if errors:
            raise BadInputError(f"{self.name}: " + "; ".join(f"rank {r}: {m}" for r, m in errors))
        kept = [i for i in range(len(self.space)) if all(m[i] for m in everyone)]
        if not kept:
            raise BadInputError(f"{label} prune_fn left no config that every rank keeps (of {len(self.space)})")
        return kept

    def _measure(self, group: Group, label: str, kept: list[int], earlier: dict[int, dict[str, Any]],
                 journal: Journal, args: tuple, kwargs: dict[str, Any], timeout: float, verbose: bool | None,
                 seed: str, layout: Layout | None = None) -> Decision:
        trial, state = self._prepare(group, label, args, kwargs, timeout)
        timing = timing_mode(self.timing)
        race_plan = RacePlan(max_rounds=self.n_repeat, budget_s=self.budget, early_stop=self.early_stop,
                             keep_top=self.refine_top or None, seed=seed)
        measurer = Measurer(group, trial, Plan(self.n_warmup, timeout, race_plan, timing, self.batch), journal,
                            logs.rank_log(), label)
        outcomes: list[Outcome] = []
        todo = []
        share = kept if layout is None else layout.share(kept)
        for i in share:
            resumed = Outcome.from_json({**earlier[i], "index": i}) if i in earlier else None
            if resumed is not None and resumed.state in ("failed", "stopped"):
                resumed.resumed = True
                outcomes.append(resumed)
                logs.rank_log().info("%s config %d from the journal: %s", label, i, resumed)
            else:  # not measured yet, or still in the race when an earlier attempt ended: race it now
                todo.append((i, self.space[i], self.descriptions[i]))
        outcomes += [Outcome(i, self.descriptions[i], "pruned") for i in range(len(self.space)) if i not in kept]
        if self.precompile_fn is not None and todo:
            failed = precompile(group, label, self.precompile_fn, todo, args, kwargs, self.compile_threads, timeout)
            for i, error in sorted(failed.items()):
                outcomes.append(measurer.fail(i, self.descriptions[i], error))
            todo = [t for t in todo if t[0] not in failed]
        try:
            if layout is not None:  # this replica's share, then the leaders on every replica
                decision = settle(layout, measurer, outcomes + measurer.lockstep(todo), self._todo,
                                  self.refine_top, label, timeout, len(share), timing)
            else:
                outcomes += measurer.sharded(todo) if self.sharded else measurer.lockstep(todo)
        finally:
            if state is not None:
                state.put_back()
        if layout is not None:
            return decision
        return decide(sorted(outcomes, key=lambda o: o.index), getattr(measurer, "race", None), timing)

    def _todo(self, index: int) -> tuple[int, dict[str, Any], str]:
        return index, self.space[index], self.descriptions[index]

    def _prepare(self, group: Group, label: str, args: tuple, kwargs: dict[str, Any],
                 timeout: float) -> tuple[Trial, ArgumentState]:
        """What runs before the first aligned exchange of measuring: the timer, the argument snapshots and
        ``ref_prog``'s reference. Agreed like ``key_fn``: an exception on any rank is the same BadInputError on
        every rank, and no config is blamed for it."""
        state: ArgumentState | None = None
        reference, timer, problem, step = None, None, None, "saving the arguments"
        try:
            state = ArgumentState(named_arguments(self.fn, args, kwargs), self.restore_value, self.reset_to_zero,
                                  label)
            step = "making the clock"
            timer = make_clock()
            if self.ref_prog is not None:
                step = "ref_prog"
                state.before_run()
                out = self.ref_prog(*args, **kwargs)
                state.check_after()
                reference = Reference((out, *state.outputs), self.rtol, self.atol)
        except Exception as exc:
            problem = f"{step} raised {describe_error(exc)}"
        everyone = group.allgather(problem, f"{label} prepare (arguments, timer, ref_prog)", timeout=timeout)
        problems = [(r, p) for r, p in enumerate(everyone) if p]
        if problems:
            if state is not None:
                state.put_back()
            raise BadInputError(f"{label} before measuring any config: "
                                + "; ".join(f"rank {r}: {p}" for r, p in problems))
        assert state is not None
        user_pre_hook = self.pre_hook

        def pre_hook(config: dict[str, Any], *a: Any, **k: Any) -> None:
            state.config_starting(config)  # a config's first run gets its arguments checked afterwards
            if user_pre_hook is not None:
                user_pre_hook(config, *a, **k)

        trial = Trial(self.fn, args, kwargs, timer, state, pre_hook, self.post_hook)
        trial.reference = reference
        return trial, state

    def _decide(self, group: Group, label: str, entry: str, key_text: str, decision: Decision,
                timeout: float, writes: bool = True) -> None:
        """Group rank 0 writes the cache; every rank raises the same error when no config is usable. The decision
        itself is already identical on every rank (it was computed from exchanged data only)."""
        if decision.index < 0:
            text = "; ".join(f"config {o.index} ({o.config}): {o.error}" for o in decision.outcomes
                             if o.state == "failed")
            logs.rank_log().error("%s every config failed: %s", label, text)
            raise AllConfigsFailedError(f"{label} every config failed on some rank: {text}")
        if group.rank == 0 and writes:
            record = {"function": self.name, "key": key_text, "group_size": group.size,
                      "group": logs.group_title(group),
                      "index": decision.index, "config": decision.config, "time_ms": decision.time,
                      "margin": decision.margin, "near_tie": decision.near_tie, "runner_up": decision.runner_up,
                      "timing": decision.timing, "rounds": decision.rounds, "tuning_seconds": decision.seconds,
                      "created": time.time(), "measurements": [o.to_json() for o in decision.outcomes]}
            try:
                self.cache.store(entry, record, self.space_text)
            except OSError as exc:
                log.warning("triton_dist_tune: could not write the cache (%s)", exc)
        group.barrier(f"{label} decision written", timeout=timeout)
        logs.rank_log().info("%s decision: config %d (%s), group time %.4f ms%s", label, decision.index,
                             decision.config, decision.time, logs.margin_text(decision))


def decide(outcomes: list[Outcome], race: Race | None, timing: str) -> Decision:
    """The group's choice from outcomes every rank shares: the race's winner (the least median among the configs
    still running), else the least time among resumed or sharded outcomes; index -1 when nothing is usable."""
    by_index = {o.index: o for o in outcomes}
    winner = race.winner() if race is not None else None
    usable = [o for o in outcomes if o.usable]
    if winner is None and usable:
        candidates = [o for o in usable if o.state == "measured"] or usable
        winner = min(candidates, key=lambda o: (o.time, o.index)).index
    rounds = race.rounds if race is not None else max((o.samples for o in outcomes), default=0)
    if winner is None:
        return Decision(-1, "", float("nan"), None, False, None, outcomes, timing, rounds)
    others = [o for o in usable if o.index != winner]
    runner_up = min(others, key=lambda o: (o.time, o.index)).index if others else None
    if race is not None and winner in race.entrants and runner_up in race.entrants:
        margin, near_tie = race.margin(winner, runner_up)
    elif runner_up is not None and by_index[winner].time > 0:
        margin = by_index[runner_up].time / by_index[winner].time - 1
        near_tie = margin <= (by_index[winner].spread or 0) + (by_index[runner_up].spread or 0)
    else:
        margin, near_tie = None, False
    chosen = by_index[winner]
    return Decision(winner, chosen.config, chosen.time, margin, near_tie, runner_up, outcomes, timing, rounds)


def autotune(config_space: Sequence[dict[str, Any]], key_fn: Callable[..., Hashable],
             prune_fn: Callable[..., bool] | None = None, *, n_warmup: int = 3, n_repeat: int = 10,
             timeout: float | None = None, reset_to_zero: Iterable[str] = (), restore_value: Iterable[str] = (),
             pre_hook: Callable[..., Any] | None = None, post_hook: Callable[..., Any] | None = None,
             ref_prog: Callable[..., Any] | None = None, rtol: float | None = None, atol: float | None = None,
             early_stop: float | None = None, sharded: bool = False,
             precompile_fn: Callable[..., Any] | None = None, compile_threads: int | None = None,
             refine_top: int = 0, name: str | None = None, timing: str | None = None, batch: int | None = None,
             budget: float | None = None, cache_key_extra: str | Callable[[], str] | None = None,
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Tune a whole (distributed) function over ``config_space``, with every rank of the group in lock-step.

    Args:
        config_space: dicts of keyword arguments (values may be ``triton.Config``); one is merged into each call.
        key_fn: ``key_fn(*args, **kwargs)`` returns the hashable key a decision is made and cached for.
        prune_fn: ``prune_fn(config, *args, **kwargs)`` returns True to keep ``config``; a config is kept only
            if every rank keeps it.
        n_warmup: untimed runs per config before the race (identical on every rank).
        n_repeat: the most rounds of the race: a config still running gets one sample per round (a batch of
            back-to-back calls in steady timing, one call in cold timing). A sample's group time is the MAX over
            ranks; a config's time is the median of its samples.
        timeout: seconds one measurement phase or exchange may take before the watchdog ends a hung rank
            (default ``TRITON_DIST_AUTOTUNE_TIMEOUT`` or 300).
        reset_to_zero: names of tensor arguments zeroed before every measured run.
        restore_value: names of tensor arguments restored before every measured run.
        pre_hook / post_hook: ``hook(config, *args, **kwargs)`` around every measured run, for state that is not
            a tensor argument (buffers, signal flags, phase counters).
        ref_prog: the reference, called with the same arguments; a config whose result (and in-place outputs)
            differ from it on any rank is left out on every rank.
        rtol / atol: tolerances of that check (both or neither; neither means torch's defaults for the dtype).
        early_stop: a factor: after any round, a config whose median is more than this times the leader's
            leaves the race at once (besides the statistical rule, which needs 3 rounds).
        sharded: for functions that talk to no other rank: each rank measures its share of the configs.
        precompile_fn: ``precompile_fn(config, *args, **kwargs)`` compiles a config's kernels (e.g. with
            ``kernel.warmup(..., grid=...)``); run for every config in a thread pool before measuring, and a
            config that fails to compile on any rank is left out on every rank.
        compile_threads: threads for ``precompile_fn`` (default ``TRITON_DIST_AUTOTUNE_COMPILE_THREADS`` or
            min(8, CPUs)).
        refine_top: after 3 rounds, at most this many configs (the best medians) stay in the race (0: no limit).
        name: the cache folder's name (default: the function's name).
        timing: ``"steady"`` (default: back-to-back batches, as a model layer runs) or ``"cold"`` (one call after
            an L2 flush and an alignment of the ranks); ``TRITON_DIST_AUTOTUNE_TIMING`` overrides it for a job.
        batch: calls per steady sample (default: measured per config, long enough to hide the launch gap).
        budget: seconds of racing after which the race ends once 3 rounds are done (default: no limit).
        cache_key_extra: state of your own that a decision depends on (a string, or a function returning one,
            called at each tuning), made part of the disk cache's entry: change it to re-tune. The entry already
            covers the function's source, the Triton kernels it names (their sources), ``key_fn``'s and
            ``prune_fn``'s sources, the key, the config space, the group size, the devices and the GPU model.

    Call-time keywords: ``autotune=False`` runs the first config ``prune_fn`` keeps, with no tuning and no
    communication; ``autotune_verbose=True`` prints the measurements on group rank 0; ``autotune_pg=`` is the
    group to tune with (a torch ProcessGroup of any backend or an mpi4py communicator; default: the default group
    when torch.distributed is initialized, else this process alone); ``autotune_allow_arg_overwrite=True`` lets a
    keyword the caller passes win over the config's value of it (with a warning), where it is otherwise an error;
    ``autotune_replicas=`` a group linking the same position of every replica of ``autotune_pg`` tunes all
    replicas as one, splitting the configs between them (see docs/scale.md).
    Tuned parameters are passed by the tuner as keywords: passing one by position is an error.

    Tensor arguments that a run changes in place are restored before every tuning run and before the final call
    (see :mod:`triton_dist_tune.side_effects`); the decorated function's ``.fn`` is the undecorated function.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        tuner = Tuner(fn, config_space, key_fn, prune_fn, n_warmup=n_warmup, n_repeat=n_repeat, timeout=timeout,
                      reset_to_zero=reset_to_zero, restore_value=restore_value, pre_hook=pre_hook,
                      post_hook=post_hook, ref_prog=ref_prog, rtol=rtol, atol=atol, early_stop=early_stop,
                      sharded=sharded, precompile_fn=precompile_fn, compile_threads=compile_threads,
                      refine_top=refine_top, name=name, timing=timing, batch=batch, budget=budget,
                      cache_key_extra=cache_key_extra)
        decided, decided_in, slow, keywords = tuner.decided, tuner.decided_in, tuner.call, CALL_KEYWORDS
        channels = channel_entries()

        @functools.wraps(fn)
        def tuned(*args: Any, **kwargs: Any) -> Any:
            if kwargs and not keywords.isdisjoint(kwargs):
                pg = kwargs.pop("autotune_pg", None)
                if pg is not None and keywords.isdisjoint(kwargs):  # a TP layer's call: its group, decided key
                    entry = channels.get(id(pg))
                    if entry is not None and entry[0]() is pg:  # this very group object's channel (not just its id)
                        try:
                            config = decided_in.get((entry[2], key_fn(*args, **kwargs)))
                        except Exception:
                            config = None
                        if config is not None:
                            return fn(*args, **kwargs, **config)
                kwargs["autotune_pg"] = pg
                return slow(args, kwargs)
            try:
                config = decided.get(key_fn(*args, **kwargs))
            except Exception:  # an unhashable key or a failing key_fn: the slow path reports it to the group
                config = None
            if config is None:
                return slow(args, kwargs)
            return fn(*args, **kwargs, **config)

        tuned.tuner = tuner  # type: ignore[attr-defined]
        tuned.fn = fn  # type: ignore[attr-defined]  # the undecorated function, as Triton-distributed's tuner has it
        return tuned

    return decorate
