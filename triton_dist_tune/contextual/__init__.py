"""``contextual_autotune``: tune the ``triton.autotune`` kernels inside a function, in their real context.

Collective kernels often cannot be benchmarked alone: they wait on other ranks, have side effects, or only behave
realistically inside the real sequence of a layer. ``contextual_autotune`` runs the whole function again and
again and steps each inner ``triton.autotune`` kernel through its configs, one step per run, every rank of the
group in lock-step (see :mod:`triton_dist_tune.contextual.session` for the protocol)::

    @triton.autotune(configs=[...], key=["M", "N", "K"])
    @triton.jit
    def gemm_kernel(...): ...

    @contextual_autotune(is_dist=True)
    def layer(x):
        y = torch.empty(...)
        dist.all_gather_single(...)  # torch 2.13+; or dist.all_gather_into_tensor before
        gemm_kernel[grid](...)
        return y

    y = layer(x)   # tunes (the first time), returns the result of a run with every kernel's best config

The schedule (``n_warmup=1, n_repeat=1`` for brevity; kernel-0 has 2 configs, kernel-1 has 3): warm-ups config by
config, then a race of rounds in a shuffled order shared by the group (one round here)::

    run    kernel-0            kernel-1
    0      config-0 warmup     config-0 warmup
    1      config-1 warmup     config-1 warmup
    2      round 0: config-1   config-2 warmup
    3      round 0: config-0   round 0: config-2
    4      best                round 0: config-0
    5      best                round 0: config-1
    final  best                best

The modules, from the decorator down (each imports only modules listed below it, type annotations included, and
the package's measure/, group/, faults/, disk/ and its errors, records, settings and space)::

    __init__   contextual_autotune: the decorator
    tuner      ContextualTuner: one decorated function across calls: its group, call counts, sync_every agreement
    hot        HotCall: a decided call's launches, with no session unless an undecided key is met
    session    Session: one call, the run loop (run, exchange, repeat, final run), the bound
    launches   each intercepted launch of a call: decided, pending, or a timed step
    exchange   the exchange after each tuning run, and how every rank updates the same tracks from it
    compiling  compiling the configs of newly met kernels ahead, between runs, once per node (GPUs only)
    decisions  a decided track: to the autotuners, tuner.decisions, the disk cache, the log and the printed summary
    report     a Track's measurements as table rows and outcomes
    state      what the modules above act on: TunerState (a function across calls), CallState (one call: its
               tracks, the run's RunRecord, clock, cache, log, the journals gathered, the watchdog), Exchanged
    newkeys    whether a hot call tunes the undecided keys its ranks met (settled in the store, no exchange)
    options    ContextualOptions: the decorator's options, with the environment's defaults, checked once
    tracks     LocalTrack (this rank's view of a (kernel, key)), its journal, the process-wide tables of choices
    schedule   Track: the group's schedule of one (kernel, key): warm-ups, then the race; failures however late
    stages     which configs a Track warms up and races: all at once, or a search's stages, then its finalists
    intercept  the scoped interception of Autotuner.run, and the Triton internals it relies on
    stock_watch  an autotune function's call, decided or not: a stock @triton.autotune kernel tuning itself there
                 is said
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .. import checks, ported, settings
from ..capture import eagerly, is_compiling
from ..group.mpi import is_communicator
from .options import ContextualOptions
from .tuner import ContextualTuner


def contextual_autotune(is_dist: Any = None, n_repeat: int = 5, n_warmup: int = 3, *, timeout: float | None = None,
                        precompile: bool = True, name: str | None = None, max_runs: int | None = None,
                        sync_every: int | None = None, search: str = "auto", **unknown: Any) -> Any:
    """Decorate a function so that each call tunes the ``triton.autotune`` kernels it launches, in context.

    :param is_dist: ``None`` (the default) or ``True``: the default ``torch.distributed`` group when it is
        initialized (every rank of the job tunes together and ends on the same choices), else this process alone.
        ``False``: this process tunes alone, even in a multi-rank job (each rank may choose differently, and runs the
        function as many times as its own race takes: not for a function with collectives among the ranks). Or a
        ``torch.distributed`` process group or an ``mpi4py`` communicator to tune with. Anything else is a
        :class:`~triton_dist_tune.errors.BadInputError` when decorating. The tuner talks to the group through a
        control channel of its own (the job's store, or a duplicate communicator), never through the user's
        collectives. (Triton-distributed's default, ``is_dist=False``, tunes each rank alone; here a bare
        ``@contextual_autotune`` in a multi-rank job tunes with the job's default group, so that the ranks never
        diverge silently.)
    :param n_repeat: the most rounds of the race (one timed step per running config each), closing rounds aside.
    :param n_warmup: untimed steps (runs) per config before the race.
    :param timeout: seconds each tuning run may take under the watchdog (a run past it ends the hung rank), and
        seconds a rank waits for the others at each exchange (default ``TRITON_DIST_AUTOTUNE_TIMEOUT`` or 300); a
        rank that does not arrive makes the others raise :class:`~triton_dist_tune.errors.GroupTimeoutError`.
    :param precompile: on GPUs, compile the configs of a newly met kernel and key ahead, between runs, in a thread
        pool, each config once per node (the node's ranks split them; a config that fails to compile on some rank
        is left out on every rank). Done only when every rank of the group compiles ahead.
    :param name: the name used in logs and recorded in its decisions (default: the function's qualified name).
    :param max_runs: the most runs of the function in one call (default ``TRITON_DIST_AUTOTUNE_MAX_RUNS`` or
        1000); when reached, every unfinished (kernel, key) takes its best config so far (a warning says which).
    :param sync_every: on a group, every this many calls the ranks make one exchange to tune the keys that some
        rank met in a call without tuning (default ``TRITON_DIST_AUTOTUNE_SYNC_EVERY`` or 64; 1: every call).
    :param search: ``"auto"`` (default: a kernel with more than 64 configs kept after pruning is searched: stages
        of configs screened by one timed step each, then the best race), ``"search"`` (always) or ``"exhaustive"``
        (every kept config races); ``TRITON_DIST_AUTOTUNE_SEARCH`` overrides it for a job (docs/search.md).

    Each run advances each (kernel, key) by one step: ``n_warmup`` untimed launches per config, then a race of at
    most ``n_repeat`` rounds with the rules and statistics of :func:`~triton_dist_tune.autotune` (clearly slower
    configs leave after each round), then 2 x (``n_repeat`` - 1) closing rounds for the 3 best still close to the
    leader (their time: the closing rounds' median); kernels with fewer configs finish first. When all are done,
    the function runs once more with every best config and that result is returned. A step's sample is the maximum
    over ranks; a config's time the median of its samples; a config that fails on any rank (compile error,
    out of resources, any exception) is left out on every rank. Choices go into each kernel's own ``cache`` (later
    stock launches use them) and into the disk cache (``<cache root>/contextual/``; group rank 0 reads it and
    broadcasts). A later call runs the function once, with no communication; a key met there that the group has not
    decided runs with its first kept config and is tuned in that call when every rank met it (settled in the store
    within ``TRITON_DIST_AUTOTUNE_NEW_KEY_GRACE`` s), else when every rank meets it, or at the next ``sync_every``.

    Triton's autotuner semantics hold while tuning: every tuning launch zeroes ``reset_to_zero``, restores
    ``restore_value`` and calls the autotuner's ``pre_hook``/``post_hook`` (with the exception); meta-parameters
    the caller passes (``BLOCK=...``, ``num_warps=...``, ``**config.all_kwargs()``) are overridden by the config
    under test; ``prune_configs_by`` (``early_config_prune``, ``perf_model``, ``top_k``) is applied on every rank
    and agreed. Runs are guarded by the watchdog and journaled, as with ``autotune``.

    Outside a tuned call ``triton.autotune`` is untouched; interception is scoped to the calling thread or task
    (``contextvars``), so other threads launch stock. A tuned function called inside the tuning of another on
    the same group is stepped by the outer one. Logs: ``./.autotune_logs/rank-{i}.log``; set
    ``TRITON_PRINT_AUTOTUNING=1`` for Triton's summary per decision on group rank 0. Also usable bare.

    Only the launches made inside the call are tuned: a generator function, a coroutine function or an async
    generator (whose kernels launch after the call returns, outside the interception) is a
    :class:`~triton_dist_tune.errors.BadInputError` when decorating, and so is an option the decorator does not
    have (naming the nearest one).
    """
    ported.no_unknown_options(unknown, _OPTIONS, "contextual_autotune", ported.CONTEXTUAL_TRITON_NAMES,
                              ported.CONTEXTUAL_ELSEWHERE, ported.contextual_hint)
    if callable(is_dist) and not _is_group(is_dist):
        return contextual_autotune()(is_dist)

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        ported.not_a_kernel(fn, "contextual_autotune")
        checks.runs_inside(fn, "contextual_autotune")
        with settings.overlooking():  # a malformed variable fails the first tuning on every rank alike (tuner.py)
            options = ContextualOptions.build(fn, is_dist, n_repeat, n_warmup, timeout=timeout,
                                              precompile=precompile, name=name, max_runs=max_runs,
                                              sync_every=sync_every, search=search)
        tuner = ContextualTuner(fn, options)
        compiling = is_compiling()

        @functools.wraps(fn)
        def tuned(*args: Any, **kwargs: Any) -> Any:
            if compiling():  # traced by torch.compile: run eagerly, launches intercepted (a graph break)
                return eagerly(tuner, args, kwargs)
            return tuner(args, kwargs)

        tuned.tuner = tuner  # type: ignore[attr-defined]
        tuned.fn = fn  # type: ignore[attr-defined]  # the undecorated function, as Triton-distributed's has it
        return tuned

    return decorator


#: the options of :func:`contextual_autotune`, for the message of a misspelt one
_OPTIONS = [name for name in inspect.signature(contextual_autotune).parameters if name != "unknown"]


def _is_group(obj: Any) -> bool:
    module = type(obj).__module__
    return is_communicator(obj) or module.startswith("mpi4py") or module.startswith("torch")


__all__ = ["contextual_autotune"]
