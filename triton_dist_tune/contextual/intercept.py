"""Scoped interception of ``triton.autotune`` kernel launches, and the few Triton internals it relies on.

From the first call of a contextual tuned function on (or an ``autotune`` function's first undecided call, which
:mod:`~.stock_watch` watches), ``Autotuner.run`` is replaced (once per process, under a lock) by a wrapper
that looks up the handler of the *current* context (a :class:`contextvars.ContextVar`):

- with a handler (inside a tuned function, in the thread or task that called it), the launch goes to the handler;
- without one (other threads, code outside the tuned function), the wrapper calls the original ``run`` exactly,
  through :mod:`~.stock_watch`'s observer for a kernel with more than one config (it counts the kernel's cache
  before and after, to say a choice made inside a decided ``autotune`` call).

The wrapper stays in place, so that a decided call pays one context set and reset, not a patch and a restore (a
class attribute set twice per call, under a lock); outside tuned calls Triton's own ``run`` does everything, as
before, after one context lookup (and two cache lengths).

The key of a launch is computed exactly as ``Autotuner.run`` computes it (the same code in Triton 3.6 and 3.9):
the values of the ``key`` arguments, then the dtype of every argument that has one. Writing
``autotuner.cache[key] = config`` therefore makes later stock launches hit.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Protocol

from ..errors import BadInputError
from ..space import describe

#: a ``triton.runtime.autotuner.Autotuner`` (Triton is imported only when a tuning starts)
Autotuner = Any


class Handler(Protocol):
    """What receives the intercepted launches of one context."""

    def launch(self, autotuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Launch ``autotuner``'s kernel for a ``kernel[grid](*args, **kwargs)`` call; return what it returns."""


_ACTIVE: ContextVar[Handler | None] = ContextVar("triton_dist_tune_contextual", default=None)
_patch_lock = threading.Lock()
_installed = False
_original_run: Any = None
_class: type | None = None
#: what runs a launch that may tune (more than one config) outside every handler's context (:func:`observe_unhandled`)
_unhandled: Any = None


def _autotuner_class() -> type:
    global _class
    if _class is None:
        from triton.runtime.autotuner import Autotuner as cls

        _class = cls
    return _class


def _intercepted_run(self: Autotuner, *args: Any, **kwargs: Any) -> Any:
    handler = _ACTIVE.get()
    if kwargs.get("warmup") or len(self.configs) <= 1:
        return _original_run(self, *args, **kwargs)
    if handler is None:
        return _original_run(self, *args, **kwargs) if _unhandled is None else _unhandled(self, args, kwargs)
    return handler.launch(self, args, kwargs)


def install() -> None:
    """Replace ``Autotuner.run`` by :func:`_intercepted_run`, once per process (the first contextual call), and
    leave it there: outside a tuned call it calls the original ``run`` exactly, after one context lookup, and a
    decided call pays no installing and restoring. A replacement made later by someone else is left in place
    (it calls ours in turn, as Triton-distributed's did)."""
    global _installed, _original_run
    if _installed:
        return
    with _patch_lock:
        if not _installed:
            cls = _autotuner_class()
            current = cls.__dict__.get("run")
            if current is not _intercepted_run:
                _original_run = current
            cls.run = _intercepted_run
            _installed = True


@contextlib.contextmanager
def intercepting(handler: Handler) -> Iterator[None]:
    """Send every ``triton.autotune`` launch of the current context to ``handler`` while the block runs."""
    install()
    token = _ACTIVE.set(handler)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def observe_unhandled(observer: Any) -> None:
    """Send every launch of a kernel with more than one config made outside a handler's context to
    ``observer(autotuner, args, kwargs)``, which runs it through :func:`original_run` (set once: a decided
    ``autotune`` call's stock launches, :mod:`~.stock_watch`)."""
    global _unhandled
    _unhandled = observer


def original_run() -> Any:
    """The ``Autotuner.run`` that launches outside a tuned call reach (Triton's own, or what replaced it before
    the first contextual call); None before that call."""
    return _original_run


def active_handler() -> Handler | None:
    """The handler of the current context, if any."""
    return _ACTIVE.get()


def patched() -> bool:
    """Whether ``Autotuner.run`` is currently replaced (for tests)."""
    return _autotuner_class().__dict__.get("run") is _intercepted_run


# -- Triton internals ------------------------------------------------------------------------------------------------


def arg_name_set(autotuner: Autotuner) -> frozenset[str]:
    """The kernel's argument names as a set, made once per autotuner (the hot path tests membership with it)."""
    cached = autotuner.__dict__.get("_tdt_arg_names")
    if cached is None:
        cached = autotuner.__dict__["_tdt_arg_names"] = frozenset(autotuner.arg_names)
    return cached


def named_arguments(autotuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> tuple[dict, dict]:
    """(the positional arguments by name, every kernel argument of the launch by name: keywords the kernel does not
    take, such as meta-parameters, left out)."""
    nargs = dict(zip(autotuner.arg_names, args, strict=False))
    if not kwargs:
        return nargs, nargs
    known = arg_name_set(autotuner)
    return nargs, {**nargs, **{k: v for k, v in kwargs.items() if k in known}}


def key_of(autotuner: Autotuner, named: dict[str, Any]) -> tuple:
    """The key under which ``Autotuner.run`` caches its choice, from the launch's named arguments (same code in
    3.6 and 3.9): the key arguments' values, then the dtypes of every argument that has one."""
    key = [named[k] for k in autotuner.keys if k in named]
    for value in named.values():
        if hasattr(value, "dtype"):
            key.append(str(value.dtype))
    return tuple(key)


def tuning_key(autotuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> tuple:
    """The key under which ``Autotuner.run`` caches its choice for this launch."""
    return key_of(autotuner, named_arguments(autotuner, args, kwargs)[1])


#: where an autotuner keeps the contextual choices made in this process (see :mod:`~.tracks`)
DECIDED = "_tdt_decided"


def jit_id(autotuner: Autotuner) -> str:
    """The jitted Python function a wrapper tunes, as every rank names it: its module and qualified name."""
    base = autotuner.base_fn
    return f"{base.__module__}.{base.__qualname__}"


def kernel_id(autotuner: Autotuner) -> str:
    """The kernel's identity across ranks and processes: module and qualified name of the jitted Python function,
    and for a wrapper with ``prune_configs_by``, ``+prune@`` and :func:`pruning_id` (so that a decision made under
    one pruning, in this process or in the disk cache, is never taken for a wrapper that prunes otherwise)."""
    pruning_digest = pruning_id(autotuner)
    return jit_id(autotuner) + (f"+prune@{pruning_digest}" if pruning_digest else "")


def pruning_id(autotuner: Autotuner) -> str:
    """A digest of the wrapper's ``prune_configs_by`` (the source and closure values of ``early_config_prune`` and
    ``perf_model``, and ``top_k`` with a perf model), the same on every rank and in every process; "" without
    pruning. Made once per autotuner."""
    cached = autotuner.__dict__.get("_tdt_pruning_id")
    if cached is None:
        parts = []
        if autotuner.early_config_prune:
            parts.append("early_config_prune=" + _callable_text(autotuner.early_config_prune))
        if autotuner.perf_model:
            parts.append("perf_model=" + _callable_text(autotuner.perf_model))
            parts.append(f"top_k={autotuner.configs_top_k!r}")
        cached = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:8] if parts else ""
        autotuner.__dict__["_tdt_pruning_id"] = cached
    return cached


def _callable_text(fn: Any) -> str:
    """A callable's identity across processes: its qualified name, source and the values its closure holds (plain
    values by ``repr``, others by type), with a ``functools.partial``'s arguments."""
    from ..disk.cache import source_of

    extra = ""
    if isinstance(fn, functools.partial):
        extra = f" partial{fn.args!r}{sorted(fn.keywords.items())!r}"
        fn = fn.func
    if not hasattr(fn, "__code__") and not hasattr(fn, "__func__"):
        fn = type(fn)  # a callable object: its class (a repr may hold a memory address, different on each rank)
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            value = None
        plain = isinstance(value, (bool, int, float, str, bytes, tuple, frozenset, type(None)))
        cells.append(repr(value) if plain else type(value).__qualname__)
    name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    return f"{name}{extra}\n{source_of(fn)}\nclosure={cells}"


def track_id(autotuner: Autotuner) -> str:
    """The id of this ``triton.autotune`` wrapper across ranks and processes: :func:`kernel_id` (its pruning
    included) plus a digest of its configs and key names, so that two wrappers of one ``@triton.jit`` body are
    tracked apart."""
    cached = autotuner.__dict__.get("_tdt_track_id")
    if cached is None:
        text = "\n".join(describe(c) for c in autotuner.configs) + "\nkey=" + ",".join(map(str, autotuner.keys))
        cached = f"{kernel_id(autotuner)}@{hashlib.sha256(text.encode()).hexdigest()[:8]}"
        autotuner.__dict__["_tdt_track_id"] = cached
    return cached


def kernel_name(autotuner: Autotuner) -> str:
    """The short name Triton prints (``base_fn.__name__``)."""
    return autotuner.base_fn.__name__


def config_names(autotuner: Autotuner) -> frozenset[str]:
    """Every keyword some config of ``autotuner`` sets (its meta-parameters and compile options)."""
    cached = autotuner.__dict__.get("_tdt_config_names")
    if cached is None:
        cached = frozenset(k for c in autotuner.configs for k in c.all_kwargs())
        autotuner.__dict__["_tdt_config_names"] = cached
    return cached


def first_config_position(autotuner: Autotuner) -> int:
    """The position of the first argument that some config sets (the number of arguments when none is)."""
    cached = autotuner.__dict__.get("_tdt_first_config_position")
    if cached is None:
        names = config_names(autotuner)
        cached = next((i for i, n in enumerate(autotuner.arg_names) if n in names), len(autotuner.arg_names))
        autotuner.__dict__["_tdt_first_config_position"] = cached
    return cached


def without_config_names(autotuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """The launch's arguments without the meta-parameters the caller gave that a config sets (positional ones
    included): they are the config's to choose. Logged once per kernel, in the rank's log."""
    names = config_names(autotuner)
    if len(args) <= first_config_position(autotuner) and names.isdisjoint(kwargs):
        return args, kwargs  # the common case, checked cheaply
    positional = [n for n in autotuner.arg_names[: len(args)] if n in names]
    given = [k for k in kwargs if k in names]
    if not positional and not given:
        return args, kwargs
    if not autotuner.__dict__.get("_tdt_override_logged"):
        autotuner.__dict__["_tdt_override_logged"] = True
        from ..disk import logs

        logs.rank_log().info("triton_dist_tune: %s: the caller's meta-parameters %s are overridden by the config "
                             "under test (contextual tuning)", kernel_name(autotuner), sorted(positional + given))
    named = dict(zip(autotuner.arg_names, args, strict=False))
    cut = min(autotuner.arg_names.index(n) for n in positional) if positional else len(args)
    rest = {n: named[n] for n in autotuner.arg_names[cut: len(args)] if n not in names}
    return args[:cut], {**rest, **{k: v for k, v in kwargs.items() if k not in names}}


def pruned_indices(autotuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> list[int]:
    """Indices into ``autotuner.configs`` of the configs its own pruning (``prune_configs_by``) keeps for this
    launch on this rank, in config order. Raises what Triton's pruning raises."""
    early, estimates, top_k = pruning(autotuner, args, kwargs)
    return best_estimated(early, estimates, top_k)


def pruning(autotuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> tuple[list[int], dict[int, float] | None,
                                                                                 int | float]:
    """Triton's ``prune_configs_by`` for this launch, in two parts that ranks can agree on: the indices that
    ``early_config_prune`` keeps (all configs without one), the ``perf_model``'s estimate of each (None without a
    perf model) and ``top_k``. Raises what ``Autotuner.prune_configs`` raises (``AutotunerError`` when the early
    pruning keeps nothing, ``TypeError`` for a ``top_k`` that is neither an int nor a float <= 1)."""
    args, kwargs = without_config_names(autotuner, args, kwargs)
    nargs = dict(zip(autotuner.arg_names, args, strict=False))
    configs = autotuner.configs
    early = autotuner.early_config_prune(configs, nargs, **kwargs) if autotuner.early_config_prune else configs
    if not early:
        raise empty_pruning_error()
    found = _indices_of(configs, early)
    top_k = autotuner.configs_top_k
    if not autotuner.perf_model:
        return found, None, top_k
    if not isinstance(top_k, int) and not (isinstance(top_k, float) and top_k <= 1.0):
        raise TypeError("Error while pruning configs, top_k must be either 1) a float <= 1.0 or 2) an int")
    estimates = {i: float(autotuner.perf_model(**nargs, **kwargs, **configs[i].all_kwargs())) for i in found}
    return found, estimates, top_k


def best_estimated(indices: list[int], estimates: dict[int, float] | None, top_k: int | float) -> list[int]:
    """The ``top_k`` of ``indices`` with the least estimates (a float ``top_k``: that fraction, at least one), in
    config order, as ``Autotuner.prune_configs`` keeps them; all of them without estimates."""
    if estimates is None:
        return list(indices)
    count = max(1, int(len(indices) * top_k)) if isinstance(top_k, float) else top_k
    if len(indices) <= count:
        return list(indices)
    return sorted(sorted(indices, key=lambda i: (estimates[i], i))[:count])


def _indices_of(configs: list[Any], kept: list[Any]) -> list[int]:
    """The indices of the configs ``early_config_prune`` returned. New ``Config`` objects are matched by value; one
    equal to none of the wrapper's configs is a :class:`~triton_dist_tune.errors.BadInputError` naming it: the
    group tunes the wrapper's configs, by index (stock Triton would benchmark it; dropping it silently, as before,
    tuned fewer configs than the pruning asked for, or raised Triton's "no valid configs" for a pruning that
    returned some)."""
    ids = {id(c) for c in kept}
    found = [i for i, c in enumerate(configs) if id(c) in ids]
    if len(found) < len(kept):  # a pruning function that returned new Config objects: match them by value
        matched: set[int] = set()
        for c in kept:
            same = [i for i, own in enumerate(configs) if own is c or (type(own) is type(c) and own == c)]
            if not same:
                raise BadInputError(
                    f"early_config_prune returned a config that is not one of the kernel's configs ({describe(c)}): "
                    "contextual_autotune tunes the configs given to triton.autotune (every rank agrees on them "
                    "by index), so the pruning must return some of them; add any config it makes to configs=")
            matched.update(same)
        return sorted(matched)
    return found


#: Triton's own message when pruning keeps no config (``str(error)`` is ``"Autotuner error: "`` and this)
EMPTY_PRUNING = "No valid autotuner configs after pruning. `early_config_prune` should return at least one config."


def empty_pruning_error() -> Exception:
    """Triton's own error for a pruning that keeps no config (``AutotunerError`` in 3.6 and newer)."""
    try:
        from triton.runtime.errors import AutotunerError
    except ImportError:  # pragma: no cover - older Triton
        AutotunerError = RuntimeError  # noqa: N806
    return AutotunerError(EMPTY_PRUNING)


def launch_with(autotuner: Autotuner, config: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Launch the kernel with ``config`` exactly as ``Autotuner.run`` does once the key is decided (the config's
    meta-parameters win over the caller's)."""
    args, kwargs = without_config_names(autotuner, args, kwargs)
    autotuner.nargs = dict(zip(autotuner.arg_names, args, strict=False))
    autotuner.best_config = config
    try:
        if config.pre_hook is not None:
            config.pre_hook({**autotuner.nargs, **kwargs, **config.all_kwargs()})
        return autotuner.fn.run(*args, **kwargs, **config.all_kwargs())
    finally:
        autotuner.nargs = None


def bench_launch(autotuner: Autotuner, config: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """One benchmarking launch as ``Autotuner._bench`` makes it: the config's ``pre_hook``, the autotuner's
    ``pre_hook`` (``reset_to_zero`` zeroed, ``restore_value`` saved), the launch, then the autotuner's
    ``post_hook`` with the exception or None (``restore_value`` restored); an exception is raised again."""
    args, kwargs = without_config_names(autotuner, args, kwargs)
    autotuner.nargs = dict(zip(autotuner.arg_names, args, strict=False))
    autotuner.best_config = config
    full = {**autotuner.nargs, **kwargs, **config.all_kwargs()}
    try:
        if config.pre_hook is not None:
            config.pre_hook(full)
        autotuner.pre_hook(full)
        try:
            out = autotuner.fn.run(*args, **kwargs, **config.all_kwargs())
        except Exception as exc:
            autotuner.post_hook(full, exception=exc)
            raise
        autotuner.post_hook(full, exception=None)
        return out
    finally:
        autotuner.nargs = None


def undone_launch(autotuner: Autotuner, config: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """A plain launch (:func:`launch_with`: no autotuner hooks) whose writes to the tensors the autotuner resets or
    restores (``reset_to_zero``, ``restore_value``) are undone after it, raised or not."""
    _, named = named_arguments(autotuner, args, kwargs)
    names = dict.fromkeys([*autotuner.reset_to_zero, *autotuner.restore_value])
    saved = {name: named[name].clone() for name in names if hasattr(named.get(name), "clone")}
    try:
        return launch_with(autotuner, config, args, kwargs)
    finally:
        for name, copy in saved.items():
            named[name].copy_(copy)


@functools.cache
def plain_when_pruned_to_one() -> bool:
    """Whether this Triton's ``Autotuner.run`` launches a key whose pruning keeps one config plainly: not
    benchmarked, no autotuner hooks, no reset after tuning (Triton 3.9: ``len(pruned_configs) == 1``; Triton 3.6
    benchmarks it as any key). Read in the source of Triton's module, since ``Autotuner.run`` is replaced."""
    import inspect
    import sys

    try:
        return "len(pruned_configs) == 1" in inspect.getsource(sys.modules[_autotuner_class().__module__])
    except (OSError, TypeError, KeyError):  # no source: as Triton 3.6
        return False


def reset_before_use(autotuner: Autotuner, config: Any, args: tuple, kwargs: dict[str, Any]) -> None:
    """What ``Autotuner.run`` does after benchmarking, before the launch with the chosen config: the autotuner's
    ``pre_hook`` with ``reset_only=True`` (``reset_to_zero`` zeroed)."""
    args, kwargs = without_config_names(autotuner, args, kwargs)
    nargs = dict(zip(autotuner.arg_names, args, strict=False))
    autotuner.pre_hook({**nargs, **kwargs, **config.all_kwargs()}, reset_only=True)


def notify_listener(autotuner: Autotuner, key: tuple, best: Any, timings: dict[Any, list[float]],
                    duration: float | None, cache_hit: bool) -> None:
    """Call ``triton.knobs.autotuning.listener`` as ``Autotuner.run`` does after tuning a key (Triton versions
    without that knob, 3.6 among them, have nothing to call)."""
    try:
        from triton import knobs
    except ImportError:  # pragma: no cover - older Triton
        return
    listener = getattr(knobs.autotuning, "listener", None)
    if listener is None:
        return
    from triton.runtime.jit import JITFunction

    jit_fn = autotuner.fn
    while not isinstance(jit_fn, JITFunction) and hasattr(jit_fn, "fn"):
        jit_fn = jit_fn.fn
    listener(fn=jit_fn, key=key, best_config=best, configs_timings=timings, duration=duration, cache_hit=cache_hit)
