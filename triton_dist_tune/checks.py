"""Checks of the decorators' options, made when a function is decorated: each raises
:class:`~triton_dist_tune.errors.BadInputError` naming the option, its value and what it must be.

``bool`` is not a number here (``batch=True`` is a mistake, not one call), and a number written as a string
(``timeout='30'``) is refused, never converted.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import operator
import sys
import types
import unicodedata
from collections.abc import Callable
from typing import Any

from .errors import BadInputError
from .settings import MAX_SECONDS, MIN_TIMEOUT_S, SEARCH_MODES


def _given(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"  # numpy's bool too


def is_number(value: Any) -> bool:
    """An int or float (numpy's included), not a bool."""
    if _is_bool(value):
        return False
    if isinstance(value, (int, float)):
        return True
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    return type(value).__module__ == "numpy" and kind is not None and kind in "iuf" and getattr(value, "ndim", 1) == 0


def _is_whole(value: Any) -> bool:
    if _is_bool(value):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def whole(value: Any, option: str, least: int, optional: bool = False) -> None:
    """``value`` must be a whole number >= ``least`` (or None when ``optional``)."""
    if value is None and optional:
        return
    if not _is_whole(value) or operator.index(value) < least:
        raise BadInputError(f"{option} must be a whole number >= {least}{' or None' if optional else ''}, got "
                            f"{_given(value)}")


def number(value: Any, option: str, above: float, what: str) -> None:
    """``value`` must be None or a finite number > ``above`` and <= :data:`~triton_dist_tune.settings.MAX_SECONDS`,
    the most a clock of the watchdog holds with room (every option checked here is seconds or a factor: none means
    anything above it); ``what`` says so in words."""
    if value is None:
        return
    if not is_number(value) or not math.isfinite(float(value)) or not float(value) > above:
        raise BadInputError(f"{option} must be {what} or None, got {_given(value)}")
    if float(value) > MAX_SECONDS:
        raise BadInputError(f"{option} must be at most {MAX_SECONDS:g} (about 11.6 days in seconds: the watchdog's "
                            f"clocks must hold it), got {_given(value)}")


def timeout(value: Any) -> None:
    """The ``timeout`` option's ``value`` must be None or seconds of at least
    :data:`~triton_dist_tune.settings.MIN_TIMEOUT_S`."""
    number(value, "timeout", 0, "a positive number of seconds")
    if value is not None and float(value) < MIN_TIMEOUT_S:
        raise BadInputError(f"timeout must be at least {MIN_TIMEOUT_S:g} s (a store wait or an exchange on a loaded "
                            f"machine takes hundreds of ms: a shorter one ends ranks that are only slow), got "
                            f"{_given(value)}")


def tolerance(value: Any, option: str) -> None:
    """``value`` must be None or a finite number >= 0."""
    if value is not None and (not is_number(value) or not 0 <= float(value) < math.inf):
        raise BadInputError(f"{option} must be a number >= 0 or None, got {_given(value)}")


def flag(value: Any, option: str) -> None:
    """``value`` must be True or False."""
    if not isinstance(value, bool):
        raise BadInputError(f"{option} must be True or False, got {_given(value)}")


def function(value: Any, option: str) -> None:
    """``value`` must be None or callable."""
    if value is not None and not callable(value):
        raise BadInputError(f"{option} must be a function or None, got {_given(value)}")


def text(value: Any, option: str) -> None:
    """``value`` must be None or a non-empty string."""
    if value is not None and not (isinstance(value, str) and value):
        raise BadInputError(f"{option} must be a non-empty string or None, got {_given(value)}")


#: the longest folder name ``name=`` may give (in UTF-8 bytes): most file systems cap one name at 255
MAX_FOLDER_BYTES = 200


def folder_name(value: Any, option: str) -> None:
    """``value`` must be None or a name that is one folder inside the cache folder: not empty, no path separator,
    not ``.`` or ``..`` (``name="../x"`` put a function's decisions outside the cache folder, where ``list`` and
    ``clear`` never look)."""
    text(value, option)
    if value is None:
        return
    if "/" in value or "\\" in value or "\0" in value or value in (".", ".."):
        raise BadInputError(f"{option} names a folder inside the cache folder: no path separator, not '.' or '..', "
                            f"got {_given(value)}")
    control = next((ch for ch in value if unicodedata.category(ch) in ("Cc", "Zl", "Zp")), None)
    if value != value.strip() or control is not None:
        what = f"control character {control!r}" if control is not None else "leading or trailing space"
        raise BadInputError(f"{option} names a folder inside the cache folder: no leading or trailing space, no "
                            f"control character or line break (a folder whose name the CLI's 'list' shows as "
                            f"another), got {_given(value)}: a {what}")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_FOLDER_BYTES:
        raise BadInputError(f"{option} names a folder inside the cache folder: at most {MAX_FOLDER_BYTES} bytes "
                            f"(file systems refuse longer names, and no decision could be written), got {size} bytes")


def search(value: Any) -> None:
    """``search=`` must name a mode of :data:`~triton_dist_tune.settings.SEARCH_MODES`."""
    if value not in SEARCH_MODES:
        raise BadInputError(f"search must be one of {', '.join(SEARCH_MODES)}, not {value!r}")


def runs_inside(fn: Any, decorator: str) -> None:
    """``fn`` must be callable and do its work inside the call: a generator function, a coroutine function or an
    async generator returns at once, and its kernels launch later, while the caller iterates or awaits, outside the
    tuning (each rank would tune alone, or the tuner would time the object's creation). Refused with what to wrap
    instead."""
    if not callable(fn):
        raise BadInputError(f"{decorator} decorates a function, got {_given(fn)}")
    name = getattr(fn, "__qualname__", repr(fn))
    if inspect.isasyncgenfunction(fn):
        kind, instead = "an async generator function", "the plain function that launches the kernels, and call it " \
            "from the async generator"
    elif inspect.iscoroutinefunction(fn):
        kind, instead = "a coroutine function (async def)", "the plain (not async) function that launches the " \
            "kernels, and call it from the coroutine"
    elif inspect.isgeneratorfunction(fn):
        kind, instead = "a generator function", "a plain function that does the work and returns its result (a " \
            "list of the items, say), and iterate over that"
    else:
        return
    raise BadInputError(f"{decorator} cannot tune {name}: it is {kind}, whose work runs after the call returns, "
                        f"outside the tuning. Decorate {instead}")


def readable_signature(fn: Any, decorator: str) -> inspect.Signature:
    """``fn``'s signature, which ``autotune`` needs: it passes each config by keyword and checks ``config_space``,
    ``restore_value`` and ``reset_to_zero`` against the parameters. A callable whose parameters Python cannot tell
    (a builtin such as ``max`` or ``getattr``, a C function without a text signature) is refused when decorating,
    with what to decorate instead (``inspect``'s bare ``ValueError`` named neither the decorator nor a way out)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        kind = "a builtin" if inspect.isbuiltin(fn) or isinstance(fn, type) else "a callable"
        raise BadInputError(
            f"{decorator} cannot tune {name}: it is {kind} whose parameters Python cannot read ({exc}), and the "
            f"tuner needs them (it passes each config's values as keyword arguments, and checks config_space, "
            f"restore_value and reset_to_zero against them). Decorate a Python function that calls it, with the "
            f"tuned values as its keyword parameters: def tuned_{getattr(fn, '__name__', 'fn')}(x, *, choice): ..."
        ) from None


#: ``triton.autotune``'s names that the decorators spell otherwise (or do without), and what to write instead
TRITON_NAMES = {
    "configs": "autotune's config_space, its first argument: a list of dicts of keyword arguments (a triton.Config "
               "may be a value)",
    "key": "autotune's key_fn: a function of the call's arguments that returns the key",
    "prune_configs_by": "autotune's prune_fn(config, *args, **kwargs), True to keep a config, for its "
                        "early_config_prune; perf_model and top_k have no counterpart: a space of more than 64 kept "
                        "configs is searched (search=, docs/search.md), not raced whole",
    "warmup": "n_warmup, a number of untimed runs (not milliseconds)",
    "rep": "n_repeat, the most rounds of the race (not milliseconds)",
    "do_bench": "none: the tuner times the calls itself (autotune's timing=)",
    "use_cuda_graph": "none: the tuner replays CUDA graphs by itself where capture works",
    "cache_results": "none: decisions are cached on disk by default (TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1 tunes again)",
}

#: names a decorator is given that belong elsewhere in this package and Triton-distributed, with where: the calls'
#: keywords of ``autotune`` (``AutoTuner.__call__``'s) and the group of each decorator, given to the wrong one
AUTOTUNE_ELSEWHERE = {
    **{name: f"a keyword of each call, not of the decorator: f(..., {name}=...)" for name in
       ("autotune", "autotune_pg", "autotune_verbose", "autotune_allow_arg_overwrite", "autotune_replicas")},
    "is_dist": "contextual_autotune's; here: each call's autotune_pg= (default: the default group when "
               "torch.distributed is initialized)",
}
CONTEXTUAL_ELSEWHERE = {"autotune_pg": "autotune's call keyword; here: is_dist=, the torch.distributed group or "
                                       "mpi4py communicator to tune with (default: the default group)"}

#: :data:`TRITON_NAMES` for ``contextual_autotune``, which reads the kernels' own configs, key and pruning
CONTEXTUAL_TRITON_NAMES = {**TRITON_NAMES, **dict.fromkeys(
    ("configs", "key", "prune_configs_by"), "none: contextual_autotune tunes the @triton.autotune kernels the function "
    "launches, with their own configs, key and prune_configs_by")}


def no_unknown_options(unknown: dict[str, Any], known: Any, decorator: str,
                       triton_names: dict[str, str] = TRITON_NAMES,
                       elsewhere: dict[str, str] = AUTOTUNE_ELSEWHERE,
                       other_tuners: Callable[[str], str | None] | None = None) -> None:
    """A decorator's keyword arguments that it does not have: refused, with the nearest option's name, or for a
    name of ``triton.autotune``'s what to write instead (``triton_names``: :data:`TRITON_NAMES`, or
    :data:`CONTEXTUAL_TRITON_NAMES`), or for one that belongs elsewhere, where (``elsewhere``:
    :data:`AUTOTUNE_ELSEWHERE`, or :data:`CONTEXTUAL_ELSEWHERE`), or for another tuner's name, what
    ``other_tuners(name)`` says (``autotune``: TileLang's and Helion's, :func:`~triton_dist_tune.other_tuners.hint`)
    before any near name, which may mean something else (``autotune_precompile`` is no ``precompile_fn``)."""
    if not unknown:
        return
    parts = []
    for name in sorted(unknown):
        if name in triton_names:
            parts.append(f"{name!r} (triton.autotune's; here: {triton_names[name]})")
            continue
        if name in elsewhere:
            parts.append(f"{name!r} ({elsewhere[name]})")
            continue
        other = other_tuners(name) if other_tuners is not None else None
        if other is not None:
            parts.append(f"{name!r} ({other})")
            continue
        near = difflib.get_close_matches(name, list(known), n=1)
        parts.append(f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    raise BadInputError(f"{decorator}() got unknown option(s) {', '.join(parts)}; its options are "
                        f"{', '.join(sorted(known))}")


def not_a_kernel(fn: Any, decorator: str) -> None:
    """``fn`` must be a Python function, not a Triton kernel (``@triton.jit``, ``@triton.autotune``,
    ``@triton.heuristics``): stacked where ``@triton.autotune`` stood, ``autotune`` took a jitted kernel for a
    function (its ``kernel[grid](...)`` then failed with "'function' object is not subscriptable", its plain call
    with every config failing inside the interpreter), and both decorators refused a ``@triton.autotune`` kernel
    without saying what to write. Refused naming the kernel and what to decorate instead."""
    jit = sys.modules.get("triton.runtime.jit")  # no Triton imported: fn is no Triton kernel
    interface = getattr(jit, "KernelInterface", None)
    if not isinstance(interface, type) or not isinstance(fn, interface):
        return
    inner = fn
    while getattr(inner, "__name__", None) is None and getattr(inner, "fn", None) is not None:
        inner = inner.fn  # an Autotuner or Heuristics wraps the jitted function as .fn
    name = getattr(inner, "__name__", type(fn).__name__)
    what = f"{decorator} decorates a Python function that launches kernels, not a Triton kernel ({name}: " \
           f"{type(fn).__name__}, launched as {name}[grid](...))"
    if decorator == "contextual_autotune":
        instead = (f"keep @triton.autotune(configs=..., key=...) on the kernel and decorate the function that launches "
                   f"it: @contextual_autotune(...) def run(x, ...): {name}[grid](x, ...); return ...")
    else:
        instead = (f"keep {name} a plain @triton.jit kernel and decorate a function that launches it with the "
                   f"config's values: @autotune([{{'config': c}} for c in configs], key_fn=lambda x, n: n) "
                   f"def run(x, n, *, config): {name}[grid](x, n, **config.all_kwargs()); or keep "
                   f"@triton.autotune on the kernel and decorate the function that launches it with "
                   f"contextual_autotune")
    raise BadInputError(f"{what}: {instead}")


#: the parameters that mark a hook written for ``triton.autotune``: ``pre_hook(kwargs, reset_only)``,
#: ``post_hook(kwargs, exception)``
TRITON_HOOK_PARAMETERS = {"pre_hook": "reset_only", "post_hook": "exception"}


def hook_signature(hook: Any, option: str, fn: Any, tuned: frozenset[str] = frozenset()) -> None:
    """A ``pre_hook`` / ``post_hook`` of ``autotune`` is called ``hook(config, *args, **kwargs)``. One written for
    ``triton.autotune`` (``pre_hook(nargs, reset_only=False)``, ``post_hook(nargs, exception)``) would get the config
    dict as ``nargs`` and the call's first argument as ``reset_only`` / ``exception``: silently wrong on a function of
    one argument, every config failing on others. Refused when decorating, saying how this package calls a hook,
    where ``fn``'s signature says the call can put one of its positional arguments into that parameter (``fn``'s
    parameter at that place is named otherwise; ``tuned``, the names configs set, are never passed by position, nor
    any after them), or where no call can give that parameter a value and it has no default. A hook in this
    package's style that merely names a parameter so (``post_hook(config, x, exception=None)`` on ``f(x, *,
    block)``) is kept."""
    marker = TRITON_HOOK_PARAMETERS[option]
    if hook is None:
        return
    try:
        names = inspect.signature(hook).parameters
        own = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read: nothing to tell
        return
    receives = _marker_receives(list(names.values()), marker, list(own.values()), tuned)
    if receives is None:
        return
    raise BadInputError(
        f"{option} {getattr(hook, '__qualname__', hook)!r} takes {marker!r}, as triton.autotune's "
        f"{option}(kwargs, {marker}) does, and {receives}; autotune calls {option}(config, *args, **kwargs): the "
        f"config dict under test, then the call's own arguments as the call passed them (no dict of them, no {marker}"
        + (", and post_hook runs after a run that raised too" if option == "post_hook" else "")
        + f"). Write it as def {option}(config, *args, **kwargs) (or name the function's parameters)")


def _marker_receives(hook: list[inspect.Parameter], marker: str, own: list[inspect.Parameter],
                     tuned: frozenset[str]) -> str | None:
    """What goes wrong with the hook parameter ``marker`` (of the hook's parameters ``hook``) when the hook is called
    ``hook(config, *args, **kwargs)`` for a call of a function whose parameters are ``own``: the call's positional
    argument it would receive, or that nothing ever gives it a value; None when neither can happen."""
    found = next((p for p in hook if p.name == marker), None)
    if found is None or found.kind in (found.VAR_POSITIONAL, found.VAR_KEYWORD):
        return None
    positional = []  # fn's parameters a call may pass by position: up to a tuned one (never passed by position)
    for p in own:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) or p.name in tuned:
            break
        positional.append(p)
    place = hook.index(found)  # the config dict fills place 0; the call's positional argument i fills place i + 1
    if found.kind is not found.KEYWORD_ONLY:
        if place == 0:
            return None  # it gets the config dict, as this package's hooks do
        index = place - 1
        if index < len(positional) and positional[index].kind is not inspect.Parameter.VAR_POSITIONAL:
            if positional[index].name == marker:
                return None  # the hook names the function's parameters: it gets the function's own argument
            return f"would get the call's argument {positional[index].name!r} where the call passes it by position"
        if positional and positional[-1].kind is inspect.Parameter.VAR_POSITIONAL:
            return f"would get a positional argument of the call (*{positional[-1].name})"
    by_keyword = found.kind is not found.POSITIONAL_ONLY and (
        any(p.name == marker and p.kind is not p.POSITIONAL_ONLY for p in own)
        or any(p.kind is p.VAR_KEYWORD for p in own))
    if found.default is found.empty and not by_keyword:
        return "no call gives it a value (every run would fail with the hook's TypeError)"
    return None


def _code_reads(code: Any, name: str, depth: int = 0) -> bool:
    """Whether ``code`` or a function defined inside it reads ``name``: as an attribute or global
    (``config.pre_hook``), or as a string constant (``getattr(config, "pre_hook")``)."""
    if name in getattr(code, "co_names", ()):
        return True
    consts = getattr(code, "co_consts", ())
    return name in consts or depth < 8 and any(_code_reads(c, name, depth + 1) for c in consts if inspect.iscode(c))


def _codes(fn: Any, seen: set[int] | None = None, depth: int = 0, owner: type | None = None) -> list[Any] | None:
    """The code objects of what runs when ``fn`` is called, each layer of it: a ``functools.wraps`` wrapper and
    what it wraps (``__wrapped__``), a ``functools.partial``'s function (``.func``), a bound method's function, a
    callable instance's ``__call__`` (and the methods of its class that it names: ``self.run(...)``), a class's
    ``__init__`` and ``__new__``, and the Python functions each of them reaches through its closure or the globals
    of its own module it names (a helper that calls the hook). None when a layer has no code to read (a builtin, a
    C extension's callable) or lies too deep to follow."""
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    if depth > 6:
        return None
    layers: list[Any] = []
    inner = getattr(fn, "__wrapped__", None)
    if inner is not None:
        layers.append(inner)
    if isinstance(fn, functools.partial):
        layers.append(fn.func)
    elif inspect.ismethod(fn):
        layers.append(fn.__func__)
    elif isinstance(fn, type):
        layers += [made for made, base in ((fn.__init__, object.__init__), (fn.__new__, object.__new__))
                   if made is not base]
    elif not inspect.iscode(getattr(fn, "__code__", None)):
        call = next((vars(kind)["__call__"] for kind in type(fn).__mro__ if "__call__" in vars(kind)), None)
        if not isinstance(call, types.FunctionType):  # a builtin's or a C type's __call__: no code to read
            return None
        layers.append(call)
        owner = type(fn)
    else:
        named = fn.__globals__  # a helper of fn's own module, not a library's function
        layers += [value for value in _closure_values(fn) if isinstance(value, types.FunctionType)]
        layers += [named[n] for n in fn.__code__.co_names if isinstance(named.get(n), types.FunctionType)
                   and named[n].__module__ == fn.__module__]
        if owner is not None:  # a callable instance's own methods that this one names
            methods = (inspect.getattr_static(owner, n, None) for n in fn.__code__.co_names)
            layers += [m for m in methods if isinstance(m, types.FunctionType)]
    found = [fn.__code__] if inspect.iscode(getattr(fn, "__code__", None)) else []
    for layer in layers:
        codes = _codes(layer, seen, depth + 1, owner)
        if codes is None:
            return None
        found += codes
    return found


def _closure_values(fn: Any) -> list[Any]:
    """The values ``fn``'s closure holds (a cell of a name bound later holds none yet)."""
    values = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:
            continue
    return values


def config_hooks(space: Any, fn: Any, name: str) -> str | None:
    """The warning for a ``config_space`` whose values hold a ``triton.Config`` with a ``pre_hook`` while ``fn``
    reads no ``pre_hook`` (else None): ``triton.autotune`` calls a config's ``pre_hook`` before every launch (a
    split-K kernel zeroing its output there), but ``**config.all_kwargs()`` leaves it out and this tuner calls no
    config's hook, so the ported launch runs without it (an output accumulated onto the caller's values)."""
    hooked = [f"config_space[{i}][{key!r}]" for i, config in enumerate(space) if isinstance(config, dict)
              for key, value in config.items() if type(value).__name__ == "Config" and
              callable(getattr(value, "pre_hook", None))]
    if not hooked:
        return None
    codes = _codes(fn)
    if codes is None or any(_code_reads(code, "pre_hook") for code in codes):
        return None  # it calls the hook, or its code cannot be read: a false warning is worse than none
    shown = ", ".join(hooked[:3]) + (f" and {len(hooked) - 3} more" if len(hooked) > 3 else "")
    return (f"{name}: {shown}: a triton.Config with a pre_hook, and {name}'s own code reads none: triton.autotune "
            "calls a config's pre_hook before every launch, but **config.all_kwargs() leaves it out and autotune "
            "calls no config's hook, so the launch runs without it. Call it before the launch, as Triton does: "
            "if config.pre_hook: config.pre_hook({'c_ptr': c, ...}) (the kernel's arguments by name); a helper "
            "function of another module that calls it is not seen here")


def returned_builder(fn: Any, result: Any) -> str | None:
    """The warning for a tuned call whose result is a callable (a kernel, a function, a module): ``autotune`` times
    each run of ``fn`` itself, so a function that builds a kernel and returns it (TileLang's ``autotune`` decorates
    such a builder and times the kernel it returns, on inputs of its own) was tuned on how fast it builds, with no
    word; None for any other result."""
    if not callable(result) or isinstance(result, type):
        return None
    name = getattr(fn, "__qualname__", type(fn).__qualname__)
    what = getattr(result, "__qualname__", None) or type(result).__qualname__
    return (f"{name} returned a callable ({what}) from a tuned call: autotune times each run of {name} itself and "
            f"chose the config whose run of {name} was fastest, so a function that builds a kernel and returns it "
            f"(as TileLang's autotune decorates a kernel builder and times the kernel it builds) was timed building "
            f"it, not running it. Decorate a function that runs the kernel on the call's arguments and returns its "
            f"result (def run(a, b, c, *, block_M): build(block_M)(a, b, c); keep each config's kernel built once, "
            f"with functools.lru_cache, so that the runs time the kernel)")
