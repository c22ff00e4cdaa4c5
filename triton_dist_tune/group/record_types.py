"""Whether the fields of a record rebuilt from a message have the types its dataclass declares.

The exchanges carry a few record dataclasses (:func:`~.codec.record`), rebuilt field by field from JSON. A message
written by another process under the tuner's keys (the store has no authentication) could give a field a value of
another type (``"index": [0]``, ``"time": "1"``, ``"refused": 1``): the record would be built, and fail later, on the
ranks that read it and in ways that differ between them. :func:`fields_fit` checks each field's value against the
dataclass's annotation before the record is built, so such a message is a :class:`~.codec.BadMessage` at once.

What is checked: ``None``, ``bool``, ``int`` (not a bool), ``float`` (an int too: JSON writes ``1.0`` as a float,
a number some rank computed may be an int), ``str``, ``list[X]``, ``dict[K, V]``, ``tuple[A, B]`` and
``tuple[X, ...]``, unions (``X | None``), ``Literal`` (by the kinds of its values) and nested records. An annotation
of any other form (``Any``, a protocol) accepts every value: the check only ever refuses what cannot be right.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

_HINTS: dict[type, dict[str, Any] | None] = {}


def fields_fit(cls: type, values: dict[str, Any]) -> bool:
    """Whether each of ``values`` (field name -> decoded value) fits the annotation of that field of the dataclass
    ``cls`` (a class whose annotations cannot be resolved is not checked)."""
    hints = _hints(cls)
    return hints is None or all(fits(value, hints.get(name, Any)) for name, value in values.items())


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` (a decoded message's) fits the type annotation ``hint`` (see the module's docstring)."""
    if hint is Any:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union or origin is types.UnionType:
        return any(fits(value, arg) for arg in args)
    if origin is Literal:
        return isinstance(value, tuple({type(arg) for arg in args}))
    if hint is None or hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list or hint is list:
        return isinstance(value, list) and (not args or all(fits(v, args[0]) for v in value))
    if origin is dict or hint is dict:
        return isinstance(value, dict) and (not args or all(fits(k, args[0]) and fits(v, args[1])
                                                            for k, v in value.items()))
    if origin is tuple or hint is tuple:
        if not isinstance(value, (tuple, list)):
            return False
        if not args:
            return True
        if len(args) == 2 and args[1] is Ellipsis:
            return all(fits(v, args[0]) for v in value)
        return len(value) == len(args) and all(fits(v, a) for v, a in zip(value, args, strict=True))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return isinstance(value, hint)
    return True  # an annotation of another form: not checked


def _hints(cls: type) -> dict[str, Any] | None:
    """The resolved annotations of ``cls`` (resolved once, at the first message that carries one: a record is
    registered while its module is still being imported), or None where they cannot be resolved."""
    if cls not in _HINTS:
        try:
            _HINTS[cls] = typing.get_type_hints(cls)
        except Exception:  # a name the annotations use is not importable here: not checked
            _HINTS[cls] = None
    return _HINTS[cls]
