"""``autotune``: the function-level tuner whose every rank measures the same configs and ends on the same choice.

This module is the public decorator and its hot path; the tuner itself (options, call routing, the protocol of one
tuning, the decision) is :mod:`triton_dist_tune.function`.

Once a key is decided, a call is a ``key_fn`` call, a dict lookup and the function call: no communication.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from .function import TuneOptions, Tuner
from .group.resolve import channel_entries
from .space import CALL_KEYWORDS


def to_hashable(tensor: Any) -> tuple:
    """A hashable key part for a tensor: ``(shape, stride, dtype)``, as Triton-distributed's ``to_hashable``.

    The device type is not part of it; the tuner adds the device types of the call's tensors to the disk cache's
    entry itself."""
    return (tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)


def autotune(config_space: Sequence[dict[str, Any]], key_fn: Callable[..., Hashable],
             prune_fn: Callable[..., bool] | None = None, *, n_warmup: int = 3, n_repeat: int = 10,
             timeout: float | None = None, reset_to_zero: Iterable[str] = (), restore_value: Iterable[str] = (),
             pre_hook: Callable[..., Any] | None = None, post_hook: Callable[..., Any] | None = None,
             ref_prog: Callable[..., Any] | None = None, rtol: float | None = None, atol: float | None = None,
             early_stop: float | None = None, sharded: bool = False,
             precompile_fn: Callable[..., Any] | None = None, compile_threads: int | None = None,
             refine_top: int = 0, name: str | None = None, timing: str | None = None, batch: int | None = None,
             budget: float | None = None, cache_key_extra: str | Callable[[], str] | None = None,
             undecided: str | None = None, distance: Callable[[Any, Any], float | None] | None = None,
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
        undecided: a key not decided yet is tuned now (``"tune"``, default), or served with no tuning and no
            communication: the ``"nearest"`` decided key's choice, or the ``"first"`` kept config (docs/campaign.md).
        distance: ``distance(key, decided_key) -> float | None`` for ``"nearest"`` (default: numeric parts, L1).

    Call-time keywords: ``autotune=False`` runs the first config ``prune_fn`` keeps, with no tuning and no
    communication; ``autotune_verbose=True`` prints the measurements on group rank 0; ``autotune_pg=`` is the
    group to tune with (a torch ProcessGroup of any backend or an mpi4py communicator; default: the default group
    when torch.distributed is initialized, else this process alone); ``autotune_allow_arg_overwrite=True`` lets a
    keyword the caller passes win over the config's value of it (with a warning), where it is otherwise an error;
    ``autotune_replicas=`` a group linking the same position of every replica of ``autotune_pg`` tunes all
    replicas as one, splitting the configs between them (see docs/scale.md).
    Tuned parameters are passed by the tuner as keywords: passing one by position is an error.

    Tensor arguments that a run changes in place are restored before every tuning run and before the final call
    (see :mod:`triton_dist_tune.measure.arguments`); the decorated function's ``.fn`` is the undecorated function.
    """
    options = functools.partial(
        TuneOptions, n_warmup=n_warmup, n_repeat=n_repeat, timeout=timeout, reset_to_zero=reset_to_zero,
        restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook, ref_prog=ref_prog, rtol=rtol, atol=atol,
        early_stop=early_stop, sharded=sharded, precompile_fn=precompile_fn, compile_threads=compile_threads,
        refine_top=refine_top, name=name, timing=timing, batch=batch, budget=budget, cache_key_extra=cache_key_extra,
        undecided=undecided, distance=distance)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        return _hot_path(Tuner(fn, config_space, key_fn, prune_fn, options()), fn, key_fn)

    return decorate


def _hot_path(tuner: Tuner, fn: Callable[..., Any], key_fn: Callable[..., Hashable]) -> Callable[..., Any]:
    """The decorated function: a decided key goes straight to ``fn``; anything else to ``tuner.call``."""
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
