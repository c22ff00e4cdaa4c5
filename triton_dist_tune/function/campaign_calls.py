"""A campaign's calls: the arguments of one call of a tuned function (:class:`Call`), and how the calls a user gives
(a list of calls, or a builder and its keys) become one call per position (:func:`builder`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


class Call:
    """The arguments of one call of a tuned function: ``Call(x, w, out=y)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    @classmethod
    def of(cls, item: Any) -> Call:
        """``item`` as a call: a :class:`Call`; a tuple (positional arguments); a dict (keyword arguments);
        anything else is the one positional argument."""
        if isinstance(item, Call):
            return item
        if isinstance(item, tuple):
            return cls(*item)
        if isinstance(item, dict):
            return cls(**item)
        return cls(item)


def builder(calls: Iterable[Any] | Callable[[Any], Any], keys: Iterable[Any] | None) -> tuple[Callable[[int], Call],
                                                                                             int, str | None]:
    """(position -> its call, how many calls, None), or (a builder that raises, 0, the problem) for calls or keys
    that cannot be: the campaign agrees a problem on every rank before raising it (one rank's mistake never leaves
    the others waiting for it)."""
    if callable(calls) and not isinstance(calls, (list, tuple)):
        if keys is None:
            return _none, 0, "give keys=[...] with a function that builds the calls"
        given = _listed(keys)
        if given is None:
            return _none, 0, f"keys must be an iterable of keys, got {type(keys).__name__}"
        return (lambda position: Call.of(calls(given[position]))), len(given), None
    if keys is not None:
        return _none, 0, "keys= is for a function that builds the calls, not a list of calls"
    items = _listed(calls)
    if items is None:
        return _none, 0, f"calls must be an iterable of calls or a function that builds one, got {type(calls).__name__}"
    return (lambda position: Call.of(items[position])), len(items), None


def _listed(values: Any) -> list[Any] | None:
    try:
        return list(values)
    except TypeError:
        return None


def _none(position: int) -> Call:
    raise IndexError(position)
