"""``autotune``: the function-level tuner whose every rank measures the same configs and ends on the same choice.

This module is the public decorator and its hot path; the tuner itself (options, call routing, the protocol of one
tuning, the decision) is :mod:`triton_dist_tune.function`.

Once a key is decided, a call is a ``key_fn`` call, a dict lookup and the function call: no communication.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from . import checks, ported, settings
from .capture import capturing, eagerly, tuning_in_capture
from .contextual.stock_watch import watch_decided_calls, watching
from .errors import BadInputError
from .function import TuneOptions, Tuner
from .group.leaving import UNREAD, unread_on
from .group.resolve import find_group
from .space import CALL_KEYWORDS


def to_hashable(tensor: Any) -> tuple:
    """A hashable key part for a tensor: ``(shape, stride, dtype)``, as Triton-distributed's ``to_hashable``.

    The device type is not part of it; the tuner adds the device types of the call's tensors to the disk cache's
    entry itself. Anything without a shape, stride and dtype is a :class:`~triton_dist_tune.errors.BadInputError`
    saying what to do with it."""
    try:
        return (tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)
    except (AttributeError, TypeError):
        pass
    what = type(tensor).__name__
    if isinstance(tensor, (list, tuple)):
        hint = (f"for a {what} of tensors, use tuple(to_hashable(t) for t in the {what}); a {what} of plain "
                f"values is hashable as tuple(...)")
    else:
        hint = "pass plain hashable values (ints, strings, tuples) into the key as they are"
    raise BadInputError(f"to_hashable takes one tensor (anything with .shape, .stride() and .dtype), not a {what}: "
                        f"{hint}")


def autotune(config_space: Sequence[dict[str, Any]] | None = None, key_fn: Callable[..., Hashable] | None = None,
             prune_fn: Callable[..., bool] | None = None, *, n_warmup: int = 1, n_repeat: int = 10,
             timeout: float | None = None, reset_to_zero: Iterable[str] = (), restore_value: Iterable[str] = (),
             pre_hook: Callable[..., Any] | None = None, post_hook: Callable[..., Any] | None = None,
             ref_prog: Callable[..., Any] | None = None, rtol: float | None = None, atol: float | None = None,
             early_stop: float | None = None, sharded: bool = False,
             precompile_fn: Callable[..., Any] | None = None, compile_threads: int | None = None,
             refine_top: int = 0, name: str | None = None, timing: str | None = None, batch: int | None = None,
             budget: float | None = None, cache_key_extra: str | Callable[[], str] | None = None,
             undecided: str | None = None, distance: Callable[[Any, Any], float | None] | None = None,
             search: str = "auto", **unknown: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Tune a whole (distributed) function over ``config_space``, with every rank of the group in lock-step.

    ``config_space`` holds dicts of keyword arguments (values may be ``triton.Config``), one merged into each
    call; ``key_fn(*args, **kwargs)`` returns the hashable key a decision is made and cached for;
    ``prune_fn(config, *args, **kwargs)`` returns True to keep ``config`` (kept only if every rank keeps it).
    The keyword options are documented one by one on :class:`~triton_dist_tune.function.options.TuneOptions`,
    which checks them when decorating.

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

    Only work done inside the call is tuned: a generator function, a coroutine function or an async generator is a
    :class:`~triton_dist_tune.errors.BadInputError` when decorating (their work runs after the call returns), and
    so is an option the decorator does not have (naming the nearest one: ``restore_valu`` -> ``restore_value``), a
    callable whose parameters Python cannot read (a builtin such as ``max``), and a config that leaves out a required
    parameter other configs set.
    """
    # ``configs=``, ``key=`` (triton.autotune's), TileLang's and Helion's names: each says what to write instead
    ported.no_unknown_options(unknown, _OPTIONS, "autotune", other_tuners=ported.hint)
    if config_space is None:
        raise BadInputError("autotune needs a config_space: autotune(config_space, key_fn=...) (a list of dicts of "
                            "keyword arguments, one merged into each call)")
    if key_fn is None:  # ``@autotune`` without its arguments: the function arrived as ``config_space``
        if callable(config_space) and not isinstance(config_space, Sequence):
            raise BadInputError(
                f"@autotune was applied to {getattr(config_space, '__qualname__', config_space)!r} without its "
                "arguments: call it with them, @autotune(config_space, key_fn=...), as in "
                "@autotune([{'BLOCK': 64}, {'BLOCK': 128}], key_fn=lambda x: to_hashable(x))")
        raise BadInputError("autotune needs a key_fn: autotune(config_space, key_fn=...) (key_fn(*args, **kwargs) "
                            "returns the hashable key a decision is made and cached for; for one decision for every "
                            "call, as Triton-distributed's key_fn=None makes, key_fn=lambda *args, **kwargs: None)")
    options = functools.partial(
        TuneOptions, n_warmup=n_warmup, n_repeat=n_repeat, timeout=timeout, reset_to_zero=reset_to_zero,
        restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook, ref_prog=ref_prog, rtol=rtol, atol=atol,
        early_stop=early_stop, sharded=sharded, precompile_fn=precompile_fn, compile_threads=compile_threads,
        refine_top=refine_top, name=name, timing=timing, batch=batch, budget=budget, cache_key_extra=cache_key_extra,
        undecided=undecided, distance=distance, search=search)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        ported.not_a_kernel(fn, "autotune")
        checks.runs_inside(fn, "autotune")
        checks.readable_signature(fn, "autotune")  # a builtin without one (max): said here, not by inspect
        with settings.overlooking():  # a malformed variable fails the first tuning on every rank alike (tuner.py)
            tuner = Tuner(fn, config_space, key_fn, prune_fn, options())
            lost = ported.config_hooks(tuner.space, fn, tuner.name)
            if lost is not None:  # a triton.Config's pre_hook no launch would run: said at the decorator's line
                warnings.warn(lost, UserWarning, stacklevel=2)
            return _hot_path(tuner, fn, key_fn)

    return decorate


#: the options of :func:`autotune`, for the message of a misspelt one
_OPTIONS = [name for name, p in inspect.signature(autotune).parameters.items() if p.kind is p.KEYWORD_ONLY
            or name in ("key_fn", "prune_fn")]


def _hot_path(tuner: Tuner, fn: Callable[..., Any], key_fn: Callable[..., Hashable]) -> Callable[..., Any]:
    """The decorated function: a decided key goes straight to ``fn``; anything else to ``tuner.call``."""
    decided, decided_in, keywords, params = tuner.decided, tuner.decided_in, CALL_KEYWORDS, tuner.params
    alone = tuner.alone
    limit, tuned_names = tuner.positional_limit, tuner.space_names
    known: set[str] = set()  # keyword names met in calls that are no tuner typo nor tuned parameter (checked once)
    said: list[bool] = []  # whether a callable returned from a call was warned of (once per function)

    def slow(args: tuple, kwargs: dict[str, Any]) -> Any:
        result = _slow_path(tuner, key_fn, args, kwargs)
        if not said and callable(result):  # a kernel builder tuned on its build time (TileLang's habit)
            builder = ported.returned_builder(fn, result)
            if builder is not None:
                said.append(True)
                warnings.warn(builder, UserWarning, stacklevel=3)  # at the caller's line
        return result

    @functools.wraps(fn)
    def tuned(*args: Any, **kwargs: Any) -> Any:
        if len(args) > limit:  # a tuned parameter passed by position: the slow path names it
            return slow(args, kwargs)
        if kwargs and not known.issuperset(kwargs):  # a keyword name not met before: a typo, a tuned parameter?
            for name in kwargs:  # an ``autotune*`` keyword the tuner does not know, or a parameter a config sets
                # (never added to ``known``): the slow path names the mistake
                if (name[:8] == "autotune" and name not in keywords and name not in params) or name in tuned_names:
                    return slow(args, kwargs)
            if len(known) < 1024:
                known.update(kwargs)
        given = kwargs  # what the slow path gets, tuner keywords and all
        if kwargs and not keywords.isdisjoint(kwargs):
            # ``autotune=True``, ``autotune_pg=None``, ``autotune_verbose=...`` as Triton-distributed's callers pass
            # them on every call (``ag_gemm(a, b, ctx=ctx, autotune=args.autotune)``): no-ops once a key is decided,
            # so a decided call stays a lookup (through the slow path it cost ~10x the hot path's time)
            kwargs = {k: v for k, v in kwargs.items() if k not in keywords or not _idle(k, v)}
            if not keywords.isdisjoint(kwargs):
                pg = kwargs.pop("autotune_pg", None)
                replicas = kwargs.pop("autotune_replicas", None)
                if pg is not None and keywords.isdisjoint(kwargs):  # a TP layer's call: its group, decided key
                    # (with ``autotune_replicas``: a DP x TP layer's, decided for its group and replicas' group)
                    place = _decided_under(pg, replicas)
                    if place is not None:
                        try:
                            config = decided_in.get((*place, key_fn(*args, **kwargs)))
                        except Exception:
                            config = None
                        if config is not None and not (UNREAD and unread_on(place)):
                            return fn(*args, **kwargs, **config)
                return slow(args, given)
        if alone:  # keys tuned by this rank alone before the job's group existed: dropped once it does
            tuner.forget_alone()
        try:
            config = decided.get(key_fn(*args, **kwargs))
        except Exception:  # an unhashable key or a failing key_fn: the slow path reports it to the group
            config = None
        if config is None or (UNREAD and unread_on(None)):  # (a result an interruption left unread: read first)
            return slow(args, given)
        return fn(*args, **kwargs, **config)

    watch_decided_calls(tuned.__code__)  # a stock kernel choosing a config in a decided call is said (its ``tuner``)
    tuned.tuner = tuner  # type: ignore[attr-defined]
    tuned.fn = fn  # type: ignore[attr-defined]  # the undecorated function, as Triton-distributed's tuner has it
    tuned.best_configs = tuner.decided  # type: ignore[attr-defined]  # (the same dict) as its AutoTuner's
    return tuned


def _decided_under(pg: Any, replicas: Any) -> tuple | None:
    """The identities a decision for a call on ``pg`` (and ``replicas``, or None) is kept under in
    ``tuner.decided_in``, where each group object already has its channel (else None: the slow path sets it up)."""
    group = find_group(pg)
    if group is None or replicas is None:
        return None if group is None else (group.identity,)
    across = find_group(replicas)
    return None if across is None else (group.identity, across.identity)


def _idle(name: str, value: Any) -> bool:
    """Whether the call keyword ``name=value`` changes nothing for a decided key: ``autotune=True``,
    ``autotune_pg=None``, ``autotune_replicas=None``, ``autotune_allow_arg_overwrite=False`` (each the default) and
    ``autotune_verbose=True`` or ``False`` (a decided key prints nothing). A value that is not the flag's True or
    False is none of these: the slow path names it as the mistake it is."""
    if name == "autotune":
        return value is True
    if name == "autotune_verbose":
        return value is True or value is False
    if name == "autotune_allow_arg_overwrite":
        return value is False
    return value is None  # autotune_pg, autotune_replicas


#: what tunes a key ahead, for the message of a call that would tune inside a CUDA-graph capture
TUNE_AHEAD = ("call the function once with these arguments before capturing (a warm-up call), or run a campaign "
              "for its keys (triton_dist_tune.campaign, or python -m triton_dist_tune campaign); or pass "
              "undecided='first' or 'nearest' (or set TRITON_DIST_AUTOTUNE_UNDECIDED) to serve undecided keys "
              "without tuning")


def _slow_path(tuner: Tuner, key_fn: Callable[..., Hashable], args: tuple, kwargs: dict[str, Any]) -> Any:
    """A call whose key is not decided (or that carries tuner keywords): ``tuner.call``, outside
    ``torch.compile``'s tracing (:func:`~triton_dist_tune.capture.eagerly`: each key is tuned once, by the tuner,
    however often Dynamo recompiles the caller). Inside a CUDA-graph capture a call that would tune raises
    :class:`~triton_dist_tune.errors.CaptureError` (naming the key) before anything runs; a call that the
    ``undecided`` policy serves, or ``autotune=False``, runs. A stock ``@triton.autotune`` kernel that tunes itself
    inside the call (on each rank alone) is warned about (:mod:`~triton_dist_tune.contextual.stock_watch`)."""
    if kwargs.get("autotune", True) is not False and tuner.undecided.current() == "tune" and capturing():
        try:
            key: Any = key_fn(*args, **{k: v for k, v in kwargs.items() if k not in CALL_KEYWORDS})
        except Exception as exc:  # the message names what it can
            key = f"<key_fn failed: {type(exc).__name__}>"
        if tuner.decided_config(key, kwargs.get("autotune_pg"), kwargs.get("autotune_replicas")) is None:
            raise tuning_in_capture(tuner.name, f"key {key!r} is not decided", TUNE_AHEAD)
    return eagerly(_watched_call, tuner, args, kwargs)


def _watched_call(tuner: Tuner, args: tuple, kwargs: dict[str, Any]) -> Any:
    """``tuner.call``, its stock ``@triton.autotune`` launches watched (a kernel tuning itself on each rank alone is
    said: :mod:`~triton_dist_tune.contextual.stock_watch`); run :func:`~triton_dist_tune.capture.eagerly`."""
    with watching(tuner.name):
        return tuner.call(args, kwargs)
