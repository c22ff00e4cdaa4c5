"""Keeping tuning runs from leaking side effects into the caller's arguments.

``restore_value`` tensors are saved before tuning and put back before every measured run; ``reset_to_zero``
tensors are zeroed before every measured run. Both are put back to their saved values before the final call, so
that after tuning the arguments and the result are exactly what one untuned call with the chosen config gives.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import BadInputError


def check_names(fn: Callable[..., Any], names: Iterable[str], option: str) -> tuple[str, ...]:
    """Validate that every name in ``names`` is a parameter of ``fn``; returns them as a tuple."""
    names = tuple(names)
    if isinstance(names, str):
        raise BadInputError(f"{option} must be a list of argument names, not a string")
    params = inspect.signature(fn).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = [n for n in names if n not in params and not takes_kwargs]
    if unknown:
        raise BadInputError(f"{option} names {unknown}, which are not parameters of {fn.__qualname__}")
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


class ArgumentState:
    """The saved state of the tensors a tuning may disturb."""

    def __init__(self, named: Mapping[str, Any], restore_value: Iterable[str], reset_to_zero: Iterable[str]) -> None:
        self.restore = [named[n] for n in restore_value if _is_tensor(named.get(n))]
        self.zero = [named[n] for n in reset_to_zero if _is_tensor(named.get(n))]
        self.saved = [(t, t.clone()) for t in {id(t): t for t in self.restore + self.zero}.values()]

    def before_run(self) -> None:
        """Put ``restore_value`` tensors back and zero ``reset_to_zero`` tensors (before every measured run)."""
        for tensor, copy in self.saved:
            if any(tensor is t for t in self.restore):
                tensor.copy_(copy)
        for tensor in self.zero:
            tensor.zero_()

    def put_back(self) -> None:
        """Put every saved tensor back as it was before tuning (before the final call)."""
        for tensor, copy in self.saved:
            tensor.copy_(copy)

    @property
    def outputs(self) -> list[Any]:
        """The tensors a run writes in place, compared against the reference by ``ref_prog`` checks."""
        return list({id(t): t for t in self.restore + self.zero}.values())


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "copy_") and hasattr(value, "clone")
