"""Plain data for the tuner's exchanges: what a rank sends to the others, as JSON text, and back.

The job's key-value store has no authentication: any process that can reach its port can write under the keys the
ranks read. So nothing read from it may run code: every exchange is encoded here, and :func:`decode` builds only
plain values from JSON (never ``pickle``, never an import or a call named by the data).

What can be sent (exactly what the tuner exchanges): ``None``, ``bool``, ``int``, ``float`` (``nan`` and
infinities included), ``str``, ``list``, ``tuple``, ``dict`` (keys of those kinds too, e.g. ``(kernel, key)``
tuples), and the few record dataclasses registered with :func:`record` (an :class:`~triton_dist_tune.records.Outcome`,
the race's ``Combined``, the channel's ``Failed``, a contextual track's ``TrackInfo``), rebuilt field by field by
their own constructor once every field's value has the type the dataclass declares (:mod:`.record_types`).
Anything else raises :class:`NotPlainData` (a ``TypeError`` naming the type) on the rank that tries to send it.

JSON cannot say ``tuple`` or a dict with non-string keys, so those (and records) are written as a small tagged
object ``{"~": kind, "v": ...}``; a plain dict that itself has a ``"~"`` key is written tagged too, so nothing is
ambiguous. Decoding never goes deeper than :data:`MAX_DEPTH` levels.

What the tuner reads from a file and may send (a cache entry, a journal record, a bundle's entry) is read with
:func:`read_json`, which checks it to the limits of what is sent: UTF-8 JSON text, nested at most
:data:`FILE_DEPTH` levels (the messages that carry it add their own levels, within :data:`MAX_DEPTH`). What fails is
:class:`Unreadable`: the reader's warning and a re-tune, never an exchange that fails at every call.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

from ..records import Outcome
from .record_types import fields_fit

TAG = "~"
#: the deepest nesting :func:`decode` accepts (the tuner's messages are a few levels deep)
MAX_DEPTH = 64
#: the deepest nesting :func:`read_json` accepts in a file's value: a record the tuner writes is 4 levels deep, and
#: the exchanges that carry one wrap it in a few levels of their own, all within :data:`MAX_DEPTH`
FILE_DEPTH = MAX_DEPTH // 2

_RECORDS: dict[str, type] = {}

T = TypeVar("T", bound=type)


class NotPlainData(TypeError):
    """A value that the tuner's exchanges cannot carry (its type is not plain data)."""


class BadMessage(ValueError):
    """Bytes read from the key-value store that are not a message of the tuner (damaged, or written by an
    outsider): they are refused, never executed."""


class Unreadable(ValueError):
    """What a file holds is not a value the tuner can read and send: not UTF-8, not JSON, or nested too deep."""


def depth(value: Any) -> int:
    """How many levels of lists and dicts ``value`` nests (0 for a number or a text); counted without recursion,
    so any depth the JSON reader built is measured."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (list, tuple, dict)):
            deepest = max(deepest, level + 1)
            todo.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_json(data: bytes | str, limit: int | None = FILE_DEPTH) -> Any:
    """The JSON value in ``data`` (a file's bytes or text), checked to the limits of what the exchanges send:
    UTF-8, JSON, at most ``limit`` levels deep (None: the caller checks the depth of each part it keeps). Raises
    :class:`Unreadable` saying which limit it fails."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8 text ({exc})") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise Unreadable(f"nested deeper than the JSON reader goes (RecursionError; the tuner reads {FILE_DEPTH} "
                         "levels)") from None
    except ValueError as exc:
        raise Unreadable(f"not JSON: {exc}") from None
    levels = depth(value) if limit is not None else 0
    if limit is not None and levels > limit:
        raise Unreadable(f"nested {levels} levels deep, more than the {limit} the tuner reads (its exchanges carry "
                         f"at most {MAX_DEPTH})")
    return value


def record(cls: T) -> T:
    """Class decorator: let the exchanges carry instances of the dataclass ``cls`` (rebuilt from its fields)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    _RECORDS[cls.__name__] = cls
    return cls


record(Outcome)


def encode(value: Any) -> bytes:
    """``value`` as JSON text (UTF-8); raises :class:`NotPlainData` naming the first type that is not plain data."""
    return json.dumps(_plain(value, 0), separators=(",", ":"), allow_nan=True).encode()


def decode(payload: bytes) -> Any:
    """The value :func:`encode` wrote; raises :class:`BadMessage` for anything else. Builds plain values and
    registered records only: nothing in ``payload`` can make it import or call anything else."""
    try:
        data = json.loads(bytes(payload).decode("utf-8"))
        return _value(data, 0)
    except BadMessage:
        raise
    except Exception as exc:  # not JSON, not UTF-8, too deep, a record with bad fields
        raise BadMessage(f"not a message of the tuner ({type(exc).__name__}: {str(exc)[:200]})") from None


def _plain(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise NotPlainData(f"a message nested deeper than {MAX_DEPTH} levels cannot be sent")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, list):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, tuple) and type(value) is tuple:
        return {TAG: "tuple", "v": [_plain(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and TAG not in value:
            return {str(k): _plain(v, depth + 1) for k, v in value.items()}
        return {TAG: "dict", "v": [[_plain(k, depth + 1), _plain(v, depth + 1)] for k, v in value.items()]}
    cls = type(value)
    if _RECORDS.get(cls.__name__) is cls:
        fields = {f.name: _plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value) if f.init}
        return {TAG: "record", "type": cls.__name__, "v": fields}
    raise NotPlainData(f"a value of type {cls.__module__}.{cls.__qualname__} is not plain data: the tuner's "
                       "exchanges carry only None, bool, int, float, str, list, tuple, dict and its own records")


def _value(data: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise BadMessage(f"a message nested deeper than {MAX_DEPTH} levels")
    if isinstance(data, list):
        return [_value(v, depth + 1) for v in data]
    if not isinstance(data, dict):
        return data  # None, bool, int, float, str: what JSON holds
    if TAG not in data:
        return {k: _value(v, depth + 1) for k, v in data.items()}
    kind, body = data.get(TAG), data.get("v")
    if kind == "tuple" and isinstance(body, list):
        return tuple(_value(v, depth + 1) for v in body)
    if kind == "dict" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
        return {_value(k, depth + 1): _value(v, depth + 1) for k, v in body}
    cls = _RECORDS.get(data.get("type")) if kind == "record" else None  # type: ignore[arg-type]
    if cls is not None and isinstance(body, dict):
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        values = {k: _value(v, depth + 1) for k, v in body.items()} if set(body) <= names else None
        if values is not None and fields_fit(cls, values):  # (a field of another type: see record_types)
            return cls(**values)
    raise BadMessage(f"an unknown tagged value, or a record whose fields are not its own or not of its types: "
                     f"{str(data)[:100]}")
