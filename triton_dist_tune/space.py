"""Config spaces: validation, stable descriptions and fingerprints that every rank computes alike."""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import numbers
import re
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import BadInputError

log = logging.getLogger("triton_dist_tune")

#: keywords a call of a tuned function may carry for the tuner (any other ``autotune_*`` keyword is a typo)
CALL_KEYWORDS = frozenset({"autotune", "autotune_verbose", "autotune_pg", "autotune_allow_arg_overwrite",
                           "autotune_replicas"})
#: a memory address in a repr: different in every process
#: types whose equal values are one object, so that hashing by identity is hashing by value
_SINGLETON_TYPES = frozenset({"torch.dtype", "torch.layout", "torch.memory_format"})
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|0x[0-9a-fA-F]{6,}")


def describe(value: Any) -> str:
    """The one text of a config (or of a value in one): its identity, equal on every rank and in every process for
    equal configs, and what people read.

    As identity it names a config on disk (a cache entry's ``config``, journal records) and in the ranks' agreement
    on the space: changing it renames every cache entry. People read the same text everywhere a config is shown: the
    console (cache hits, summaries, warnings, errors), the rank logs and tables, the command line (``show``,
    ``list``) and the printed ``fn.tuner.space``, ``fn.tuner.decided`` and ``fn.best_configs``
    (:class:`SpaceEntry`'s repr), so that a printed config is found as it is in the logs and the cache.

    ``triton.Config`` objects are described by their kwargs and launch options (not by ``id``), dicts by their
    sorted items, callables by their qualified name.
    """
    if isinstance(value, Mapping):
        items = ", ".join(f"{k!s}: {describe(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
        return "{" + items + "}"
    if type(value).__name__ == "Config" and hasattr(value, "all_kwargs"):
        return f"Config({describe(value.all_kwargs())})"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(describe(v) for v in value)) + "}"
    if isinstance(value, functools.partial):
        args = "".join(f", {describe(a)}" for a in value.args)
        keywords = "".join(f", {k}={describe(v)}" for k, v in sorted(value.keywords.items()))
        return f"partial({describe(value.func)}{args}{keywords})"
    if callable(value):
        name = f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"
        if isinstance(value, types.FunctionType) and ("<lambda>" in name or "<locals>" in name):
            return f"<{name} #{_function_print(value)}>"  # its name alone is shared: tell it apart by what it is
        return f"<{name}>"
    return repr(value)


def _function_print(fn: types.FunctionType) -> str:
    """A short digest of what a lambda or nested function computes: its code, and the plain values it closes over
    and its defaults, equal in every process for the same function. Two lambdas, or two closures of one factory
    (``make(2)``, ``make(4)``), share a name; described by it alone, they were one config to the disk cache (a
    reordered space was served the other one) and to the ranks' agreement on the space."""
    cells = tuple(_plain(c.cell_contents) for c in fn.__closure__ or () if _filled(c))
    return fingerprint(f"{_code_text(fn.__code__)}|{cells}|{_plain(fn.__defaults__)}|"
                       f"{_plain(fn.__kwdefaults__)}")[:8]


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - reading it is the test
    except ValueError:  # an empty cell (a name the function binds later)
        return False
    return True


def _code_text(code: types.CodeType) -> str:
    consts = ", ".join(_code_text(c) if isinstance(c, types.CodeType) else _plain(c) for c in code.co_consts)
    return f"{code.co_code.hex()}[{consts}]{code.co_names}"


def _plain(value: Any, depth: int = 0) -> str:
    """The text of a plain value (numbers, strings, None, their tuples, lists, dicts, sets), else its type's name:
    what a closure holds may be anything (a tensor, the module, an object with an address in its repr)."""
    if isinstance(value, (str, bytes, int, float, complex, bool, type(None))):
        return repr(value)
    if depth < 4 and isinstance(value, (tuple, list)):
        return "(" + ", ".join(_plain(v, depth + 1) for v in value) + ")"
    if depth < 4 and isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_plain(v, depth + 1) for v in value)) + "}"
    if depth < 4 and isinstance(value, Mapping):
        items = sorted(f"{_plain(k, depth + 1)}: {_plain(v, depth + 1)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, types.FunctionType) and depth < 4:
        return f"{value.__module__}.{value.__qualname__}:{_code_text(value.__code__)}"
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def describe_key(key: Any, where: str = "key") -> str:
    """The canonical text of a tuning key: equal in every process for equal keys (sets sorted, dicts by sorted
    keys), so that ranks agree and a new process finds the disk cache.

    Raises :class:`BadInputError` for what has no stable text or is compared by identity: tensors (return
    ``to_hashable(t)`` instead), objects hashed by identity, and texts with memory addresses.
    """
    if type(key).__module__ == "numpy" and getattr(key, "shape", None) == () and hasattr(key, "item"):
        key = key.item()  # a numpy scalar reads as the Python number it equals (np.int64(3) on one rank, 3 on another)
    if isinstance(key, numbers.Number) and key != key:  # numpy's and complex NaN too
        raise BadInputError(f"{where} contains nan, which equals nothing, itself included: the key would never be "
                            "found decided, so every call would tune it again; return a number, a string or None "
                            "there instead")
    if isinstance(key, (str, bytes, int, float, bool, type(None))):
        return repr(key)
    if isinstance(key, tuple) and type(key) is tuple:
        inner = [describe_key(v, where) for v in key]
        return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
    if isinstance(key, (set, frozenset)):
        inner = ", ".join(sorted(describe_key(v, where) for v in key))
        return f"frozenset({{{inner}}})" if isinstance(key, frozenset) else f"{{{inner}}}"
    if isinstance(key, Mapping):
        items = sorted((describe_key(k, where), describe_key(v, where)) for k, v in key.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if isinstance(key, list):
        return "[" + ", ".join(describe_key(v, where) for v in key) + "]"
    kind = type(key)
    if kind.__module__ == "torch" and kind.__name__ in ("Tensor", "Parameter") or hasattr(key, "data_ptr"):
        raise BadInputError(f"{where} contains a tensor, which is hashed by identity (every new tensor would be a "
                            "new key): return to_hashable(t) (its shape, strides and dtype) or the sizes that "
                            "matter instead")
    text = repr(key)
    singleton = isinstance(key, type) or f"{kind.__module__}.{kind.__qualname__}" in _SINGLETON_TYPES
    if not singleton and kind.__hash__ is object.__hash__ and kind.__eq__ is object.__eq__:
        raise BadInputError(f"{where} contains a {kind.__qualname__} object, which is hashed by identity (every new "
                            "object would be a new key): return the values that matter (numbers, strings, tuples)")
    if _ADDRESS.search(text):
        raise BadInputError(f"{where} contains {text[:80]!r}, whose text holds a memory address and differs between "
                            "processes: return the values that matter (numbers, strings, tuples)")
    return text


def fingerprint(text: str) -> str:
    """A short hex digest of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def index_of(space: Sequence[Mapping[str, Any]], config: Mapping[str, Any]) -> int | None:
    """The position of ``config`` (one of the dicts of ``space``) in ``space``, by identity: configs that compare
    equal but differ (``{"s": 1}`` and ``{"s": 1.0}``) are told apart, where ``list.index`` would find the first
    equal one. None when ``config`` is none of them (:func:`validate_space` makes each a dict of its own)."""
    return next((i for i, c in enumerate(space) if c is config), None)


class SpaceEntry(dict):
    """One config of a space as the tuner keeps it (``tuner.space``, and the values of ``tuner.decided``,
    ``decided_in`` and ``best_configs``): a plain dict of keyword arguments, merged into each call as it is, whose
    repr is :func:`describe`'s text, the one the logs, the console and the cache show for it
    (``{gemm_config: Config({BLOCK_M: 64, num_ctas: 1, num_stages: 3, num_warps: 4})}``), where a dict would show
    a ``triton.Config`` value by Triton's repr, ``<triton.runtime.autotuner.Config object at 0x...>``. The values
    are the caller's objects, untouched, and Triton's class is never patched."""

    __slots__ = ()

    def __repr__(self) -> str:
        return describe(self)


def validate_space(config_space: Any) -> list[dict[str, Any]]:
    """Check a config space and return it as a list of dicts (raises :class:`BadInputError`)."""
    if isinstance(config_space, (str, bytes, Mapping)) or not isinstance(config_space, Sequence):
        raise BadInputError(f"config_space must be a list of dicts, not {type(config_space).__name__}"
                            + _space_hint(config_space))
    if len(config_space) == 0:
        raise BadInputError("config_space is empty: give at least one config")
    space = []
    for i, config in enumerate(config_space):
        if not isinstance(config, Mapping):
            hint = ("; a list of triton.Config (triton.autotune's configs=) is passed as dicts: [{'config': c} for c "
                    "in configs] gives the function each Config as its keyword config= (a plain @triton.jit kernel "
                    "inside then takes **config.all_kwargs())"
                    if type(config).__name__ == "Config" and hasattr(config, "all_kwargs") else "")
            raise BadInputError(f"config_space[{i}] must be a dict of keyword arguments, not {type(config).__name__}"
                                + hint)
        clash = CALL_KEYWORDS.intersection(config)
        if clash:
            raise BadInputError(f"config_space[{i}] uses the tuner's call keywords {sorted(clash)}")
        bad = [k for k in config if not isinstance(k, str)]
        if bad:
            raise BadInputError(f"config_space[{i}] has keys that are not keyword names: {bad}")
        if _address_in(config):
            text = describe(config)
            raise BadInputError(f"config_space[{i}] is described as {text[:120]!r}, which holds a memory address "
                                "and differs between processes: use values with a stable repr")
        space.append(SpaceEntry(config))
    return space


def _space_hint(config_space: Any) -> str:
    """What to write instead of a config_space that is no list: a function (TileLang's ``configs=get_configs``)
    is called, an iterator or set made a list."""
    if callable(config_space) and not isinstance(config_space, type):
        return (": call it (config_space=get_configs()); configs that depend on the call's arguments are "
                "prune_fn's to leave out: prune_fn(config, *args, **kwargs)")
    if isinstance(config_space, (set, frozenset)) or hasattr(config_space, "__next__"):
        return ": make it a list (config_space=list(...)), in an order every rank shares"
    return ""


def without_repeats(space: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """``space`` with each config that repeats an earlier one left out (the first kept), said once in a warning: a
    repeated config was measured and raced against itself, a share of the tuning spent on nothing. A repeat is
    described alike and holds plain values alone (:func:`_plain_value`: numbers, strings, their containers, a
    ``triton.Config`` of them with no hook), whose description is the value: configs holding functions, objects or
    tensors may describe alike and still differ (two closures over different tensors), and are kept. Every rank
    drops the same ones (descriptions and plainness are alike on every rank)."""
    first: dict[str, int] = {}
    kept, repeats = [], []
    for i, config in enumerate(space):
        text = describe(config)
        if text in first and _plain_value(config):
            repeats.append(f"config_space[{i}] repeats config_space[{first[text]}]")
            continue
        first.setdefault(text, i)
        kept.append(config)
    if repeats:
        shown = "; ".join(repeats[:5]) + (f"; and {len(repeats) - 5} more" if len(repeats) > 5 else "")
        log.warning("triton_dist_tune: %s: %s: each config is tuned once (%d of %d kept; logs, tables and the "
                    "command line number the configs kept)", name, shown, len(kept), len(space))
    return kept


def _plain_value(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is made of plain values alone, which :func:`describe` describes by value: None, bools,
    numbers, strings, bytes, torch dtypes, and lists, tuples, sets and dicts of them; a ``triton.Config`` of them with
    no ``pre_hook``."""
    if depth > 32:
        return False
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return True
    if type(value).__name__ == "dtype" and type(value).__module__ == "torch":
        return True
    if isinstance(value, Mapping):
        return all(_plain_value(k, depth + 1) and _plain_value(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_plain_value(v, depth + 1) for v in value)
    if type(value).__name__ == "Config" and hasattr(value, "all_kwargs"):
        return getattr(value, "pre_hook", None) is None and _plain_value(value.all_kwargs(), depth + 1)
    return False


def _address_in(value: Any, depth: int = 0) -> bool:
    """Whether :func:`describe` of ``value`` would hold a memory address from some value's repr (a string that holds
    one, ``"0xffffffff"``, is the user's text, equal in every process: not an address)."""
    if isinstance(value, (str, bytes)) or depth > 32:
        return False
    if isinstance(value, Mapping):
        return any(_address_in(k, depth + 1) or _address_in(v, depth + 1) for k, v in value.items())
    if type(value).__name__ == "Config" and hasattr(value, "all_kwargs"):
        return _address_in(value.all_kwargs(), depth + 1)
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_address_in(v, depth + 1) for v in value)
    if isinstance(value, functools.partial):
        return _address_in([value.func, *value.args, *value.keywords.values()], depth + 1)
    return _ADDRESS.search(describe(value)) is not None


def check_space_signature(fn: Callable[..., Any], space: Sequence[Mapping[str, Any]], name: str) -> None:
    """Raise :class:`BadInputError` when a config key is not a keyword ``fn`` accepts (where the signature says: a
    function with ``**kwargs`` accepts any key), or when some configs set a required parameter of ``fn`` (one
    without a default) and others do not: those others fail every run that measures them, each only to fail with a
    ``TypeError``, since a measured run gets the config's values and never the call's value of a tuned parameter (a
    call may not pass one; ``autotune_allow_arg_overwrite=True`` lets the caller's value win in the call that runs
    the chosen config alone: the measured runs are given the call's keywords without any name a config sets).
    Required as ``fn``'s own signature says, the one Python checks at the call (a ``functools.wraps`` wrapper may
    supply what its wrapped function requires). Checked when decorating."""
    try:
        params = inspect.signature(fn).parameters
        own = inspect.signature(fn, follow_wrapped=False).parameters
    except (TypeError, ValueError):
        return
    for p in own.values():
        if p.default is not p.empty or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        lacking = [i for i, config in enumerate(space) if p.name not in config]
        if lacking and len(lacking) < len(space):
            setter = next(i for i, config in enumerate(space) if p.name in config)
            shown = ", ".join(f"config_space[{i}] {describe(space[i])}" for i in lacking[:3])
            more = f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""
            kind = "keyword-only parameter" if p.kind is p.KEYWORD_ONLY else "parameter"
            verb = "does" if len(lacking) == 1 else "do"
            raise BadInputError(f"{name}: {shown}{more} {verb} not set {p.name!r}, a required {kind} of {name}() "
                                f"(no default) that config_space[{setter}] sets: such a config fails every run that "
                                f"measures it, which gets each config's own values, never the call's value of "
                                f"{p.name!r} (not even with autotune_allow_arg_overwrite=True, whose caller's value "
                                f"wins only in the call that runs the chosen config). Set {p.name!r} in every "
                                f"config, or give it a default in {name}()'s signature")
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = {n for n, p in params.items() if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                          inspect.Parameter.KEYWORD_ONLY)}
    for i, config in enumerate(space):
        unknown = sorted(set(config) - accepted)
        if unknown:
            raise BadInputError(f"{name}: config_space[{i}] sets {unknown}, which {name}() does not accept as "
                                f"keyword arguments (its parameters: {list(params)})")


def check_call(fn: Callable[..., Any], space: Sequence[Mapping[str, Any]], args: tuple, kwargs: Mapping[str, Any],
               name: str, allow_overwrite: bool = False) -> None:
    """Raise :class:`BadInputError` when the call passes a tuned parameter itself: by keyword (unless
    ``autotune_allow_arg_overwrite=True``) or by position (never allowed: the config's value would clash)."""
    tuned = sorted({k for config in space for k in config})
    if not allow_overwrite:
        clash = sorted(set(tuned).intersection(kwargs))
        if clash:
            raise BadInputError(
                f"{name}: config keys {clash} clash with keyword arguments of the call: a tuned parameter must not "
                "also be passed by the caller (or pass autotune_allow_arg_overwrite=True to let the caller's "
                "value win)"
            )
    if not args:
        return
    try:
        bound = inspect.signature(fn).bind_partial(*args).arguments
    except (TypeError, ValueError) as exc:
        raise BadInputError(f"{name}: the call's positional arguments do not fit {name}(): {exc}; is one of them a "
                            f"tuned parameter ({tuned})? the tuner passes those by keyword from each config: leave "
                            "them out of the call") from exc
    positional = sorted(set(tuned).intersection(bound))
    if positional:
        raise BadInputError(f"{name}: the tuned parameters {positional} were passed by position; the tuner passes "
                            "them by keyword from each config: leave them out of the call")


def unfit_call(fn: Callable[..., Any], tuned: frozenset[str], args: tuple, kwargs: Mapping[str, Any],
               name: str) -> str | None:
    """What is wrong with a call that no config can make whole, else None: its arguments with the tuned parameters
    (``tuned``, every name a config sets) do not bind to ``fn``'s signature, most often a required parameter that
    neither the call nor any config gives (``ctx``, with every config setting only ``gemm_config``). Every config's
    run would raise the same ``TypeError``; said before any is run, as the call's mistake it is. The signature is
    ``fn``'s own, the one Python checks at the call: a wrapper (``functools.wraps``) taking ``*args, **kwargs``
    may supply or take arguments its wrapped function's signature does not show, and is never second-guessed."""
    try:
        signature = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):  # (refused when decorating: ``checks.readable_signature``)
        return None
    try:
        signature.bind(*args, **{**dict.fromkeys(tuned), **kwargs})
    except TypeError as exc:
        missing = re.search(r"missing a required (?:keyword-only )?argument: '(\w+)'", str(exc))
        if missing is not None:
            return (f"{name}: this call lacks {missing.group(1)!r}, a required argument of {name}() that no config "
                    f"sets: pass it in the call ({missing.group(1)}=...), or set it in every config")
        return f"{name}: this call does not fit {name}{signature}, whatever the config: {exc}"
    return None


def check_no_clash(config: Mapping[str, Any], kwargs: Mapping[str, Any]) -> None:  # autotune=False path
    """Raise :class:`BadInputError` when a config would overwrite a keyword argument of the call."""
    clash = set(config).intersection(kwargs)
    if clash:
        raise BadInputError(
            f"config keys {sorted(clash)} clash with keyword arguments of the call: "
            "a tuned parameter must not also be passed by the caller"
        )


def keeps(prune_fn: Callable[..., Any] | None, config: Mapping[str, Any], args: tuple,
          kwargs: Mapping[str, Any]) -> bool:
    """Whether ``prune_fn`` keeps ``config`` for a call with ``args`` and ``kwargs`` (no ``prune_fn``: kept). A
    result that is a collection or a string is a :class:`BadInputError`: ``prune_fn`` says yes or no for one
    config; a list (of configs, as Triton's ``early_config_prune`` returns) would be true whatever it holds and keep
    every config, and ``"False"`` is true too."""
    if prune_fn is None:
        return True
    try:
        result = prune_fn(config, *args, **kwargs)
    except KeyError as exc:  # a name read from the entry that only a value inside it holds: said how to read it
        hint = _entry_hint(exc, config)
        if hint is None:
            raise
        raise BadInputError(f"prune_fn raised KeyError: {exc}: {hint}") from exc
    if result is None or isinstance(result, (str, bytes, Sequence, Mapping, set, frozenset)):
        raise BadInputError(f"prune_fn must return True or False for the one config it is given "
                            f"(prune_fn(config, *args, **kwargs)), not a {type(result).__name__}: it is called once "
                            "per config, unlike Triton's early_config_prune, which returns the configs to keep (None: "
                            "a missing return?)")
    return bool(result)


def _entry_hint(exc: KeyError, config: Mapping[str, Any]) -> str | None:
    """What to read instead, for ``prune_fn``'s ``KeyError`` on a name the config_space entry it is given lacks: the
    entry's keys, and where the name is: a ``triton.Config`` (its kwargs or an attribute such as ``num_warps``)
    or a dict among the entry's values holds it, as when a prune_fn written as Triton-distributed's documentation
    shows it, for ``[{"gemm_config": c} for c in configs]``, reads ``config["BLOCK_SIZE_M"]``. None when the name
    is one of the entry's keys or no value holds it (a KeyError of ``prune_fn``'s own)."""
    name = exc.args[0] if len(exc.args) == 1 else None
    try:
        if name is None or name in config:
            return None
    except TypeError:  # an unhashable name
        return None
    for field, value in config.items():
        inner = getattr(value, "kwargs", None) if type(value).__name__ == "Config" else value
        if isinstance(inner, Mapping) and name in inner:
            read = f"config[{field!r}].kwargs[{name!r}]" if inner is not value else f"config[{field!r}][{name!r}]"
        elif inner is not value and isinstance(name, str) and name.isidentifier() and hasattr(value, name):
            read = f"config[{field!r}].{name}"
        else:
            continue
        return (f"prune_fn(config, *args, **kwargs) is given one config_space entry as it is, a dict with the keys "
                f"{sorted(map(str, config))}; {name!r} is in its {field!r} ({type(value).__name__}): read {read}")
    return None  # a name no value of the entry holds: a KeyError of prune_fn's own, raised as it is


def plan_seed(key_text: str, space_text: str) -> str:
    """The seed of the search plan (and the race's) of the key described ``key_text`` over the space described
    ``space_text``: the same on every rank, and for every attempt."""
    return fingerprint(f"{key_text}\n{space_text}")
