"""The call's arguments by parameter name, and the checks of the options that name them (``restore_value``,
``reset_to_zero``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import BadInputError


def check_names(fn: Callable[..., Any], names: Iterable[str], option: str,
                tuned: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Validate that every name in ``names`` is a parameter of ``fn`` that no config sets (``tuned``); returns them
    as a tuple (None, Triton's default for ``restore_value`` and ``reset_to_zero``: none)."""
    if names is None:
        return ()
    if isinstance(names, (str, bytes)):
        raise BadInputError(f"{option} must be a list of argument names, not the string {names!r} "
                            f"(write {option}=[{names!r}])")
    try:
        names = tuple(names)
    except TypeError:
        raise BadInputError(f"{option} must be a list of argument names, got {names!r} "
                            f"({type(names).__name__})") from None
    if not all(isinstance(n, str) for n in names):
        raise BadInputError(f"{option} must be a list of argument names, got {list(names)!r}")
    params = inspect.signature(fn).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = [n for n in names if n not in params and not takes_kwargs]
    if unknown:
        raise BadInputError(f"{option} names {unknown}, which are not parameters of {fn.__qualname__}")
    if set(names) & tuned:
        raise BadInputError(f"{option} names {sorted(set(names) & tuned)}, which the configs set: a tuned value, "
                            "not an argument the function changes")
    return names


def named_arguments(fn: Callable[..., Any], args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name (``**kwargs`` entries by their own names)."""
    signature = inspect.signature(fn)
    out = {}
    for name, value in signature.bind_partial(*args, **kwargs).arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out
