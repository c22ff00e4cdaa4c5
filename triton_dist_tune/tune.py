"""``autotune``: the function-level tuner whose every rank measures the same configs and ends on the same choice.

The protocol of one tuning (one key, one group), every step on every rank of the group:

1. **Agree**: one exchange of (key, config-space fingerprint, group size, local problems). Any difference, or a
   ``key_fn`` that raised, or a config that clashes with the call's keywords, raises the same error everywhere.
2. **Cache**: group rank 0 alone reads the disk cache and broadcasts what it found.
3. **Prune**: ``prune_fn`` runs on every rank; a config is kept only where every rank keeps it.
4. **Resume**: the ranks gather their crash journals; configs already measured are not measured again, configs
   that crashed, hung or failed in an earlier attempt are left out.
5. **Measure**: see :mod:`triton_dist_tune.measure` (lock-step, or sharded for rank-local functions).
6. **Decide**: group rank 0 picks the least group time (ties: the earlier config), writes the cache atomically and
   broadcasts the choice. The function is then called once with it and its result returned.

Once a key is decided, a call is a ``key_fn`` call, a dict lookup and the function call: no communication.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from . import logs
from .cache import DiskCache, entry_id, env_flag, source_of
from .comm import Group, agree, default_timeout, resolve_group
from .errors import AllConfigsFailedError, BadInputError, MismatchError
from .journal import Journal, merge
from .measure import Measurer, Plan, Reference, Trial, describe_error
from .precompile import precompile
from .replicas import Layout, settle
from .side_effects import ArgumentState, check_names, named_arguments
from .space import CALL_KEYWORDS, check_no_clash, describe, validate_space
from .timing import make_timer

log = logging.getLogger("triton_dist_tune")


def to_hashable(tensor: Any) -> tuple:
    """A hashable key part for a tensor: shape, dtype, strides and device type (not the device index, which
    differs between ranks)."""
    return (tuple(tensor.shape), str(tensor.dtype), tuple(tensor.stride()), tensor.device.type)


class Tuner:
    """The state behind one decorated function: its space, options and decisions (see :func:`autotune`)."""

    def __init__(self, fn: Callable[..., Any], config_space: Sequence[dict[str, Any]],
                 key_fn: Callable[..., Hashable], prune_fn: Callable[..., bool] | None, *, n_warmup: int,
                 n_repeat: int, timeout: float | None, reset_to_zero: Iterable[str], restore_value: Iterable[str],
                 pre_hook: Callable[..., Any] | None, post_hook: Callable[..., Any] | None,
                 ref_prog: Callable[..., Any] | None, rtol: float | None, atol: float | None,
                 early_stop: float | None, sharded: bool, precompile_fn: Callable[..., Any] | None,
                 compile_threads: int | None, refine_top: int, name: str | None) -> None:
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
        self.space = validate_space(config_space)
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
        self.refine_top = refine_top
        self.name = name or fn.__name__
        self.cache = DiskCache(self.name)
        self.source = source_of(fn)
        #: decisions of calls on the default group, key -> config (the hot path reads this)
        self.decided: dict[Hashable, dict[str, Any]] = {}
        #: decisions of calls with an explicit group, (id of autotune_pg, key) -> config
        self.decided_in: dict[tuple[int, Hashable], dict[str, Any]] = {}
        #: the last decision's table of measurements, per (group name, key), for inspection
        self.tables: dict[tuple[str, Hashable], list[dict[str, Any]]] = {}

    # -- calls that are not the hot path -------------------------------------------------------------------------

    def call(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A call that carries tuner keywords or whose key is not decided yet."""
        enabled = kwargs.pop("autotune", True)
        verbose = kwargs.pop("autotune_verbose", None)
        pg = kwargs.pop("autotune_pg", None)
        replicas = kwargs.pop("autotune_replicas", None)
        if not enabled:
            return self.fn(*args, **kwargs, **self._first_config(args, kwargs))
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
        table, slot = (self.decided, key) if pg is None else (self.decided_in, (id(pg), key))
        if replicas is not None:
            table, slot = self.decided_in, (id(pg), id(replicas), key)
        config = table.get(slot) if key_error is None else None
        if config is None:
            config = table[slot] = self._tune(group, key, key_error, args, kwargs, verbose, layout)
        return self.fn(*args, **kwargs, **config)

    def _first_config(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        for config in self.space:
            if self.prune_fn is None or self.prune_fn(config, *args, **kwargs):
                check_no_clash(config, kwargs)
                return config
        raise BadInputError(f"{self.name}: prune_fn keeps no config for this call (autotune=False)")

    # -- one tuning ----------------------------------------------------------------------------------------------

    def _tune(self, group: Group, key: Any, key_error: str | None, args: tuple, kwargs: dict[str, Any],
              verbose: bool | None, layout: Layout | None = None) -> dict[str, Any]:
        started = time.perf_counter()
        rank_log = logs.rank_log()
        key_text = repr(key)
        label = f"[{self.name} key={key_text}]"
        if layout is not None:
            layout.agree(self.name, key_text, self.space_text, self.timeout, key_error)
        self._agree(group, key_text, key_error, kwargs)
        entry = entry_id(self.source, key_text, self.space_text, group.size)
        timeout = self.timeout if self.timeout is not None else default_timeout()

        def read_cache() -> int | None:
            data = None if env_flag("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE") else self.cache.load(entry, self.space_text)
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
            return self.space[found]

        rank_log.info("%s tuning %d configs on %d rank(s) of group '%s'", label, len(self.space), group.size,
                      group.name)
        kept = self._prune(group, label, args, kwargs, timeout)
        if layout is not None:
            kept = layout.keep_everywhere(kept, f"{label} prune", timeout)
        suffix = layout.journal_suffix() if layout is not None else ""
        journal = Journal(self.cache.folder / f"{entry}.rank{group.rank}{suffix}.journal")
        try:  # the journal is locked while this tuning runs; on an error its records stay for the next attempt
            gathered = group.allgather(journal.read(), f"{label} journal exchange", timeout=timeout)
            earlier = merge(gathered, self.descriptions)
            rows = self._measure(group, label, kept, earlier, journal, args, kwargs, timeout, verbose, layout)
            index = self._decide(group, label, entry, key_text, rows, timeout, layout is None or layout.reads_cache)
            if layout is not None:  # every replica decided from the same table; replica 0's choice is the rule
                index = layout.replicas.broadcast(index, f"{label} decision across replicas", timeout=timeout)
            journal.remove()
        finally:
            journal.close()
        self.tables[(group.name, key)] = rows
        if group.rank == 0 and logs.printing_enabled(verbose):
            logs.console().info(
                "Triton autotuning for function %s,\nwith key as %s,\nfinished after %.2fs on %d rank(s) of group "
                "'%s',\nbest config selected: %s;\n%s", self.name, key_text, time.perf_counter() - started,
                group.size, group.name, self.descriptions[index], logs.format_table(rows, index))
        return self.space[index]

    def _agree(self, group: Group, key_text: str, key_error: str | None, kwargs: dict[str, Any]) -> None:
        problem = key_error
        if problem is None:
            try:
                for config in self.space:
                    check_no_clash(config, kwargs)
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
                 journal: Journal, args: tuple, kwargs: dict[str, Any], timeout: float,
                 verbose: bool | None, layout: Layout | None = None) -> list[dict[str, Any]]:
        named = named_arguments(self.fn, args, kwargs)
        state = ArgumentState(named, self.restore_value, self.reset_to_zero) if (
            self.restore_value or self.reset_to_zero) else None
        trial = Trial(self.fn, args, kwargs, make_timer(), state, self.pre_hook, self.post_hook)
        if self.ref_prog is not None:
            if state is not None:
                state.before_run()
            out = self.ref_prog(*args, **kwargs)
            trial.reference = Reference((out, *state.outputs) if state is not None else (out,), self.rtol, self.atol)
        measurer = Measurer(group, trial, Plan(self.n_warmup, self.n_repeat, timeout, self.early_stop), journal,
                            logs.rank_log(), label)
        rows: list[dict[str, Any]] = []
        todo = []
        share = set(kept) if layout is None else layout.share(kept)
        for i in sorted(share):
            if i in earlier:
                row = {"own": None, **earlier[i], "resumed": True}
                rows.append(row)
                logs.rank_log().info("%s config %d from the journal: %s", label, i, row)
            else:
                todo.append((i, self.space[i], self.descriptions[i]))
        if self.precompile_fn is not None and todo:
            failed = precompile(group, label, self.precompile_fn, todo, args, kwargs, self.compile_threads, timeout)
            for i, error in sorted(failed.items()):
                rows.append(measurer.fail(i, self.descriptions[i], error))
            todo = [t for t in todo if t[0] not in failed]
        progress = logs.Progress(label, len(todo), group.rank == 0 and logs.printing_enabled(verbose))
        try:
            if self.sharded:
                rows += measurer.sharded(todo)
            else:
                for i, config, desc in todo:
                    times = [r["time"] for r in rows if r["state"] == "measured"]
                    rows.append(measurer.lockstep(i, config, desc, min(times) if times else None))
                    progress.step()
                if layout is None:
                    self._refine(measurer, rows)
                else:
                    rows = settle(layout, measurer, rows, self._candidate, self.refine_top, label, timeout,
                                  len(share))
        finally:
            if state is not None:
                state.put_back()
        return sorted(rows, key=lambda r: r["index"])

    def _refine(self, measurer: Measurer, rows: list[dict[str, Any]]) -> None:
        """With ``refine_top``, time the leading configs again, interleaved, and keep only those in the running."""
        healthy = sorted((r for r in rows if r["state"] == "measured" and not r.get("early_stop")),
                         key=lambda r: (r["time"], r["index"]))
        if not self.refine_top or len(healthy) <= self.refine_top:
            return
        leaders = healthy[: self.refine_top]
        refined = measurer.refine([(r["index"], self.space[r["index"]], r["config"]) for r in leaders])
        for row in leaders:
            outcome = refined[row["index"]]
            if isinstance(outcome, str):
                row.update(state="failed", error=f"refine: {outcome}")
            else:
                row.update(first_time=row["time"], time=outcome, refined=True)

    def _candidate(self, index: int) -> tuple[int, dict[str, Any], str]:
        return index, self.space[index], self.descriptions[index]

    def _decide(self, group: Group, label: str, entry: str, key_text: str, rows: list[dict[str, Any]],
                timeout: float, writes: bool = True) -> int:
        choice: int | str | None = None
        if group.rank == 0:
            healthy = [r for r in rows if r["state"] == "measured" and not r.get("early_stop")]
            healthy = [r for r in healthy if r.get("refined")] or healthy  # refined leaders alone compete
            if healthy:
                choice = min(healthy, key=lambda r: (r["time"], r["index"]))["index"]
                decision = {"index": choice, "config": self.descriptions[choice], "key": key_text,
                            "function": self.name, "group_size": group.size, "time_ms": rows_time(rows, choice),
                            "measurements": rows}
                try:
                    if writes:
                        self.cache.store(entry, decision, self.space_text)
                except OSError as exc:
                    log.warning("triton_dist_tune: could not write the cache (%s)", exc)
            else:
                choice = "; ".join(f"config {r['index']} ({r['config']}): {r.get('error')}" for r in rows)
        choice = group.broadcast(choice, f"{label} decision", timeout=timeout)
        if isinstance(choice, str):
            logs.rank_log().error("%s every config failed: %s", label, choice)
            raise AllConfigsFailedError(f"{label} every config failed on some rank: {choice}")
        logs.rank_log().info("%s decision: config %d (%s), group time %.4f ms", label, choice,
                             self.descriptions[choice], rows_time(rows, choice))
        return choice


def rows_time(rows: list[dict[str, Any]], index: int) -> float:
    """The group time of config ``index`` in a table of measurements."""
    return next(r["time"] for r in rows if r["index"] == index)


def autotune(config_space: Sequence[dict[str, Any]], key_fn: Callable[..., Hashable],
             prune_fn: Callable[..., bool] | None = None, *, n_warmup: int = 3, n_repeat: int = 10,
             timeout: float | None = None, reset_to_zero: Iterable[str] = (), restore_value: Iterable[str] = (),
             pre_hook: Callable[..., Any] | None = None, post_hook: Callable[..., Any] | None = None,
             ref_prog: Callable[..., Any] | None = None, rtol: float | None = None, atol: float | None = None,
             early_stop: float | None = None, sharded: bool = False,
             precompile_fn: Callable[..., Any] | None = None, compile_threads: int | None = None,
             refine_top: int = 0, name: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Tune a whole (distributed) function over ``config_space``, with every rank of the group in lock-step.

    Args:
        config_space: dicts of keyword arguments (values may be ``triton.Config``); one is merged into each call.
        key_fn: ``key_fn(*args, **kwargs)`` returns the hashable key a decision is made and cached for.
        prune_fn: ``prune_fn(config, *args, **kwargs)`` returns True to keep ``config``; a config is kept only
            if every rank keeps it.
        n_warmup: untimed runs per config (identical on every rank).
        n_repeat: timed runs per config; a rank's time is their median, the group's the max over ranks.
        timeout: seconds one measurement phase or exchange may take before the watchdog ends a hung rank
            (default ``TRITON_DIST_AUTOTUNE_TIMEOUT`` or 300).
        reset_to_zero: names of tensor arguments zeroed before every measured run.
        restore_value: names of tensor arguments restored before every measured run.
        pre_hook / post_hook: ``hook(config, *args, **kwargs)`` around every measured run, for state that is not
            a tensor argument (buffers, signal flags, phase counters).
        ref_prog: the reference, called with the same arguments; a config whose result (and in-place outputs)
            differ from it on any rank is left out on every rank.
        rtol / atol: tolerances of that check (both or neither; neither means torch's defaults for the dtype).
        early_stop: a factor: a config whose first quarter of timed runs is already this much slower than the
            best so far is stopped, by group decision.
        sharded: for functions that talk to no other rank: each rank measures its share of the configs.
        precompile_fn: ``precompile_fn(config, *args, **kwargs)`` compiles a config's kernels (e.g. with
            ``kernel.warmup(..., grid=...)``); run for every config in a thread pool before measuring, and a
            config that fails to compile on any rank is left out on every rank.
        compile_threads: threads for ``precompile_fn`` (default ``TRITON_DIST_AUTOTUNE_COMPILE_THREADS`` or
            min(8, CPUs)).
        refine_top: when more configs than this are healthy, the leading ``refine_top`` are timed again,
            interleaved over 3 rounds, and the choice is made among them on those times (lock-step only; 0: off).
        name: the cache folder's name (default: the function's name).

    Call-time keywords: ``autotune=False`` runs the first config ``prune_fn`` keeps, with no tuning and no
    communication; ``autotune_verbose=True`` prints the measurements on group rank 0; ``autotune_pg=`` is the
    group to tune with (a torch ProcessGroup of any backend or an mpi4py communicator; default: the default group
    when torch.distributed is initialized, else this process alone); ``autotune_replicas=`` a group linking the
    same position of every replica of ``autotune_pg`` tunes all replicas as one, splitting the configs between
    them (see docs/scale.md).
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        tuner = Tuner(fn, config_space, key_fn, prune_fn, n_warmup=n_warmup, n_repeat=n_repeat, timeout=timeout,
                      reset_to_zero=reset_to_zero, restore_value=restore_value, pre_hook=pre_hook,
                      post_hook=post_hook, ref_prog=ref_prog, rtol=rtol, atol=atol, early_stop=early_stop,
                      sharded=sharded, precompile_fn=precompile_fn, compile_threads=compile_threads,
                      refine_top=refine_top, name=name)
        decided, decided_in, slow, keywords = tuner.decided, tuner.decided_in, tuner.call, CALL_KEYWORDS

        @functools.wraps(fn)
        def tuned(*args: Any, **kwargs: Any) -> Any:
            if kwargs and not keywords.isdisjoint(kwargs):
                pg = kwargs.pop("autotune_pg", None)
                if pg is not None and keywords.isdisjoint(kwargs):  # a TP layer's call: its group, decided key
                    try:
                        config = decided_in.get((id(pg), key_fn(*args, **kwargs)))
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
        return tuned

    return decorate
