"""The options of :func:`~triton_dist_tune.autotune`, checked in one place.

:class:`TuneOptions` holds every keyword option of the decorator (what each means is in its docstring).
Building one checks every option that can be checked without the function; :meth:`TuneOptions.for_function` then
checks the argument names of ``restore_value`` and ``reset_to_zero`` against the function's parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from .. import checks, ported
from ..errors import BadInputError
from ..measure.arguments import check_names
from ..measure.lockstep import Plan
from ..measure.race import RacePlan
from ..measure.timing import (
    FAR_BEHIND_RACE,
    FAST_LEADER_MS,
    HEAVY_CYCLES,
    POWER_SETTLE_ABOVE_MS,
    SETTLED_CYCLES,
    SETTLED_LEADERS,
    SETTLED_LEADERS_FAST,
    SETTLED_LEADERS_HEAVY,
    SIFT_AFTER,
    SIFT_AFTER_GROUP,
    SIFT_CYCLES,
    SIFT_TOP,
    timing_mode,
)
from .policy import check_policy


@dataclass(frozen=True)
class TuneOptions:
    """Every keyword option of :func:`~triton_dist_tune.autotune`, with its defaults; checked on construction.

    Options:
        n_warmup: untimed runs per config before the race (identical on every rank); in steady timing the probe's
            3 calls and every sample's settling calls warm it further.
        n_repeat: the most rounds of the race: a config still running gets one sample per round (a batch of
            back-to-back calls in steady timing, one call in cold timing). A sample's group time is the MAX over
            ranks; a config's time is the median of its samples.
        timeout: seconds one measurement phase or exchange may take before the watchdog ends a hung rank
            (default ``TRITON_DIST_AUTOTUNE_TIMEOUT`` or 300).
        reset_to_zero: names of tensor arguments zeroed before every measured run.
        restore_value: names of tensor arguments restored before every measured run.
        pre_hook / post_hook: ``hook(config, *args, **kwargs)`` around every measured run, for state that is not
            a tensor argument (buffers, signal flags, phase counters); ``post_hook`` runs after a run that raised
            too.
        ref_prog: the reference, called with the same arguments; a config whose result (and in-place outputs)
            differ from it on any rank is left out on every rank.
        rtol / atol: tolerances of that check (both or neither; neither means torch's defaults for the dtype).
        early_stop: a factor: after any round, a config whose median is more than this times the leader's
            leaves the race at once (besides the statistical rule, which needs 3 rounds).
        sharded: for functions that talk to no other rank: each rank measures its share of the configs.
        precompile_fn: ``precompile_fn(config, *args, **kwargs)`` compiles a config's kernels (e.g. with
            ``kernel.warmup(..., grid=...)``); run in a thread pool for this rank's share of the node's configs,
            overlapping the warm-up (each config's compile is waited for just before its warm-up), and a config
            that fails to compile on any rank is left out on every rank. Without it, on GPUs, the compile pass
            does the same for the function's Triton launches.
        compile_threads: threads for ``precompile_fn`` and the compile pass (default
            ``TRITON_DIST_AUTOTUNE_COMPILE_THREADS`` or min(16, CPUs)).
        refine_top: after 3 rounds, at most this many configs (the best medians) stay in the race, and the settled
            rounds time at most this many: a race with more left screens on to 3 rounds first; a race of heavy
            calls (0.5 ms or more, on a device) keeps the best this many after its first settled round, the sift
            (0: no limit). Replicas race at least 2 leaders again, or this many.
        name: the cache folder's name (default: the function's name).
        timing: ``"steady"`` (default: back-to-back batches, as a model layer runs) or ``"cold"`` (one call after
            an L2 flush and an alignment of the ranks); ``TRITON_DIST_AUTOTUNE_TIMING`` overrides it for a job.
        batch: calls per steady sample (default: measured per config, long enough to hide the launch gap).
        budget: seconds a tuning of one key may take, from its start, checked on the group's agreed clock between
            its steps (warm-ups, rounds, settled blocks, search stages): at the bound it ends with the best config
            measured so far, cut and provisional (tuned again by the next job); default: no limit.
        cache_key_extra: state of your own that a decision depends on (a string, or a function returning one,
            called at each tuning), made part of the disk cache's entry: change it to re-tune. The entry already
            covers the function's source, the Triton kernels it names (their sources), ``key_fn``'s and
            ``prune_fn``'s sources, the key, the config space, the group size, the devices and the GPU model.
        undecided: a key not decided yet is tuned now (``"tune"``, default), or served with no tuning: the
            ``"nearest"`` decided key's choice that ``prune_fn`` keeps for the call, or the ``"first"`` kept config
            (a function that is not rank-local agrees on it in one exchange per key; docs/campaign.md).
        distance: ``distance(key, decided_key) -> float | None`` for ``"nearest"`` (default: numeric parts, L1).
        search: ``"auto"`` (default: search when more than 64 configs are kept after pruning), ``"search"``
            (always) or ``"exhaustive"`` (race every kept config); ``TRITON_DIST_AUTOTUNE_SEARCH`` overrides it for
            a job. The search screens a part of the space in stages (a first look, then the neighbourhoods of the
            best configs on the parameter grid) and races the best it found (docs/search.md).
    """

    n_warmup: int = 1
    n_repeat: int = 10
    timeout: float | None = None
    reset_to_zero: Iterable[str] | None = ()
    restore_value: Iterable[str] | None = ()
    pre_hook: Callable[..., Any] | None = None
    post_hook: Callable[..., Any] | None = None
    ref_prog: Callable[..., Any] | None = None
    rtol: float | None = None
    atol: float | None = None
    early_stop: float | None = None
    sharded: bool = False
    precompile_fn: Callable[..., Any] | None = None
    compile_threads: int | None = None
    refine_top: int = 0
    name: str | None = None
    timing: str | None = None
    batch: int | None = None
    budget: float | None = None
    cache_key_extra: str | Callable[[], str] | None = None
    undecided: str | None = None
    distance: Callable[[Any, Any], float | None] | None = None
    search: str = "auto"

    def __post_init__(self) -> None:
        checks.whole(self.n_warmup, "n_warmup", 0)
        checks.whole(self.n_repeat, "n_repeat", 1)
        checks.timeout(self.timeout)
        checks.number(self.early_stop, "early_stop", 1, "a slowdown factor > 1")
        checks.tolerance(self.rtol, "rtol")
        checks.tolerance(self.atol, "atol")
        if (self.rtol is None) != (self.atol is None):
            raise BadInputError("give both rtol and atol, or neither (then torch's defaults for the dtype apply)")
        if self.rtol is not None and self.ref_prog is None:
            raise BadInputError("rtol and atol are the tolerances of the check against ref_prog, and no ref_prog is "
                                "given: no config's result would be checked; give ref_prog=... too, or drop them")
        extra = self.cache_key_extra
        if extra is not None and not (isinstance(extra, str) or callable(extra)):
            raise BadInputError("cache_key_extra must be a string or a function returning one")
        checks.whole(self.refine_top, "refine_top", 0)
        checks.whole(self.batch, "batch", 1, optional=True)
        checks.number(self.budget, "budget", 0, "a positive number of seconds")
        checks.flag(self.sharded, "sharded")
        checks.whole(self.compile_threads, "compile_threads", 1, optional=True)
        checks.folder_name(self.name, "name")
        for option in ("pre_hook", "post_hook", "ref_prog", "precompile_fn"):
            checks.function(getattr(self, option), option)
        if self.timing is not None and not isinstance(self.timing, str):
            raise BadInputError(f"timing must be 'steady', 'cold' or None, got {self.timing!r}")
        check_policy(self.undecided)
        checks.function(self.distance, "distance")
        checks.search(self.search)
        timing_mode(self.timing)  # reject a bad mode now; the environment may still override it per call

    def for_function(self, fn: Callable[..., Any], tuned: frozenset[str] = frozenset()) -> TuneOptions:
        """These options, with ``restore_value`` and ``reset_to_zero`` checked to name parameters of ``fn`` that are
        no config's (``tuned``: a config's value is no argument to restore) (and made tuples); a hook written for
        ``triton.autotune`` (``reset_only``, ``exception``) is refused (``ported.hook_signature``)."""
        ported.hook_signature(self.pre_hook, "pre_hook", fn, tuned)
        ported.hook_signature(self.post_hook, "post_hook", fn, tuned)
        return replace(self, restore_value=check_names(fn, self.restore_value, "restore_value", tuned),
                       reset_to_zero=check_names(fn, self.reset_to_zero, "reset_to_zero", tuned))

    def plan(self, timeout: float, timing: str, seed: str, ranks: int = 1) -> Plan:
        """How one tuning measures: warm-up, the race's rules, timing mode and batch length; ``ranks``: the size of
        the group that measures (a heavy race of several ranks screens 2 rounds before its sift, one rank's 1:
        :data:`~triton_dist_tune.measure.timing.SIFT_AFTER_GROUP`)."""
        race = RacePlan(max_rounds=self.n_repeat, budget_s=self.budget, early_stop=self.early_stop,
                        far_behind=FAR_BEHIND_RACE if timing == "steady" else 0.0,
                        keep_top=self.refine_top or None, seed=seed,
                        final_top=SETTLED_LEADERS if timing == "steady" else 0, final_rounds=SETTLED_CYCLES,
                        final_top_fast=SETTLED_LEADERS_FAST if timing == "steady" else 0,
                        fast_below_ms=FAST_LEADER_MS,
                        final_top_heavy=SETTLED_LEADERS_HEAVY if timing == "steady" else 0,
                        heavy_from_ms=POWER_SETTLE_ABOVE_MS,
                        sift_after=SIFT_AFTER if ranks == 1 else SIFT_AFTER_GROUP, sift_rounds=SIFT_CYCLES,
                        sift_top=SIFT_TOP, heavy_rounds=HEAVY_CYCLES)
        return Plan(self.n_warmup, timeout, race, timing, self.batch)
