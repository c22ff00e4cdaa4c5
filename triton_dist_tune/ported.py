"""What users porting from other tuners get wrong, said when a function is decorated or first called.

A kernel author coming from ``triton.autotune``, TileLang's ``autotune`` or Helion's autotuner writes their habits:
their option names (refused by :func:`no_unknown_options` with what to write here: :data:`TRITON_NAMES`,
:data:`TILELANG_NAMES`, :data:`HELION_NAMES`, :data:`CONTEXTUAL_NAMES`), a Triton kernel decorated where a
function that launches it belongs (:func:`not_a_kernel`), hooks in ``triton.autotune``'s signature
(:func:`hook_signature`), a ``triton.Config``'s ``pre_hook`` that ``**config.all_kwargs()`` leaves out
(:func:`config_hooks`), and a function that builds a kernel and returns it, as TileLang's tuner times it
(:func:`returned_builder`). Each is refused (:class:`~triton_dist_tune.errors.BadInputError`) or warned about,
saying what to write instead.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

from .errors import BadInputError

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
    ``other_tuners(name)`` says (``autotune``: TileLang's and Helion's, :func:`hint`)
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


#: TileLang's ``autotune`` / ``AutoTuner`` options that ``autotune`` spells otherwise or does without
TILELANG_NAMES: dict[str, str] = {
    "skip_check": "leave out ref_prog: without one no config's result is checked",
    "max_mismatched_ratio": "none: ref_prog's check is torch.testing.assert_close with rtol/atol, every element "
                            "within them",
    "manual_check_prog": "none: ref_prog=... with rtol/atol; a check of your own can raise inside the tuned "
                         "function, which leaves that config out on every rank",
    "supply_type": "none: the configs run on the call's own arguments (restore_value / reset_to_zero for those "
                   "they change)",
    "cache_input_tensors": "none: the configs run on the call's own arguments, saved and put back as needed",
    "target": "none: the configs run where the call's tensors are",
}

#: Helion's ``@helion.kernel(...)`` settings that ``autotune`` spells otherwise or does without
HELION_NAMES: dict[str, str] = {
    "autotune_effort": "'none': call with autotune=False (the first config prune_fn keeps, no tuning), or "
                       "undecided='first' for keys never tuned; 'quick': budget= seconds per key (at the bound the "
                       "best measured config is chosen); 'full': the default",
    "config": "a config pinned for production: a config_space of that one entry (the first call of each key still "
              "warms it up and times it, then the decision is cached), or call with autotune=False to run "
              "config_space[0] (the first prune_fn keeps) untuned",
    "autotune_baseline_fn": "ref_prog, called with the call's own arguments; not on by default: Helion checks "
                            "every config against its default config, this tuner checks nothing without ref_prog",
    "autotune_baseline_atol": "atol (with rtol: give both, or neither for torch's tolerances of the dtype)",
    "autotune_baseline_rtol": "rtol (with atol: give both, or neither for torch's tolerances of the dtype)",
    "autotune_accuracy_check": "none: configs are checked only against a ref_prog you give (without one, none is)",
    "autotune_precompile": "precompile_fn, a function that compiles one config (precompile_fn(config, *args, "
                           "**kwargs)), with compile_threads; not a start method ('spawn', 'fork': "
                           "TRITON_DIST_AUTOTUNE_COMPILE_START)",
    "autotune_compile_timeout": "timeout= (seconds): a config whose compile has not ended that long after it is "
                                "waited for is left out on every rank; the same timeout bounds each other phase of a "
                                "config on a rank and a rank's wait for the others (docs/fault-tolerance.md)",
    "autotune_random_seed": "none: the group draws the race's shuffled order from a seed it shares, alike on every "
                            "rank",
    "autotune_max_generations": "none: search= ('auto', 'search', 'exhaustive') and budget= seconds per key",
    "autotuner": "search= ('auto', 'search', 'exhaustive'; docs/search.md)",
    "autotune_log_level": "each call's autotune_verbose=True, or TRITON_PRINT_AUTOTUNING=1; every rank's log is in "
                          "TRITON_DIST_AUTOTUNE_LOG_DIR",
    "static_shapes": "none: key_fn's return value is the key (return to_hashable(x) for one decision per shape, "
                     "or leave the shapes out of it)",
}


#: what ``contextual_autotune`` (which tunes the ``@triton.autotune`` kernels a function launches, with their own
#: configs) has for a check against a reference and an effort bound, asked for by Helion's names, TileLang's, or
#: ``autotune``'s own
_NO_CHECK = ("none in contextual_autotune: it checks no config's result against a reference (autotune's ref_prog "
             "with rtol/atol does)")
_EFFORT = ("none in contextual_autotune (autotune's budget= bounds a key's tuning in seconds): fewer rounds with "
           "n_repeat= and n_warmup=, or a @triton.autotune kernel with fewer configs or prune_configs_by")
CONTEXTUAL_NAMES: dict[str, str] = {
    **dict.fromkeys(("autotune_baseline_fn", "autotune_baseline_atol", "autotune_baseline_rtol",
                     "autotune_accuracy_check", "ref_prog", "rtol", "atol", "skip_check", "max_mismatched_ratio",
                     "manual_check_prog"), _NO_CHECK),
    **dict.fromkeys(("autotune_effort", "budget", "autotune_max_generations"), _EFFORT),
    "config": "a kernel pinned for production: its @triton.autotune(configs=[that one config], ...), which "
              "contextual_autotune launches without timing it",
}


def contextual_hint(name: str) -> str | None:
    """What ``contextual_autotune`` has for option ``name`` of TileLang's, Helion's or ``autotune``'s that asks for a
    check against a reference, an effort bound or a pinned config (:data:`CONTEXTUAL_NAMES`), or None."""
    if name not in CONTEXTUAL_NAMES:
        return None
    whose = ("TileLang's" if name in TILELANG_NAMES else "Helion's" if name in HELION_NAMES else "autotune's")
    return f"{whose}; here: {CONTEXTUAL_NAMES[name]}"


def hint(name: str) -> str | None:
    """What to write instead of TileLang's or Helion's option ``name`` (with whose it is), or None."""
    if name in TILELANG_NAMES:
        return f"TileLang's; here: {TILELANG_NAMES[name]}"
    if name in HELION_NAMES:
        return f"Helion's; here: {HELION_NAMES[name]}"
    return None
