"""Checks of the decorators' options, made when a function is decorated: each raises
:class:`~triton_dist_tune.errors.BadInputError` naming the option, its value and what it must be.

``bool`` is not a number here (``batch=True`` is a mistake, not one call), and a number written as a string
(``timeout='30'``) is refused, never converted.
"""

from __future__ import annotations

import inspect
import math
import operator
import unicodedata
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
