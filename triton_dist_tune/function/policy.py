"""What a call does with a key that is not decided: ``undecided="tune" | "nearest" | "first"``.

- ``tune`` (the default): tune it now, with the group (today's behaviour).
- ``nearest``: use the decision of the nearest decided key of the same group, by the decorator's ``distance`` or
  by the numeric parts of the keys; no tuning and no communication. Every rank picks the same config when every
  rank holds the same decisions (as after :func:`~triton_dist_tune.campaign`): candidates are ordered by
  (distance, key text), never by the order in which this rank learnt them. With no comparable decided key it
  serves the first config ``prune_fn`` keeps, as ``first`` does.
- ``first``: the first config ``prune_fn`` keeps, with no tuning and no communication.

``TRITON_DIST_AUTOTUNE_UNDECIDED`` sets the policy of every tuned function of a job (it overrides the
decorators'). A key served this way is logged once and is not a decision: a later campaign or call with
``undecided="tune"`` still tunes it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from numbers import Real
from typing import Any

from .. import settings
from ..disk import logs
from ..errors import BadInputError
from ..space import describe_key

log = logging.getLogger("triton_dist_tune")

POLICIES = settings.UNDECIDED_POLICIES

#: ``distance(key, decided_key)``: a number (smaller is nearer), or None / inf for keys that are not comparable
Distance = Callable[[Hashable, Hashable], "float | None"]


def check_policy(value: str | None, where: str = "undecided") -> str | None:
    """``value`` when it names a policy (or is None), else BadInputError."""
    if value is not None and value not in POLICIES:
        raise BadInputError(f"{where} must be one of {', '.join(POLICIES)}, not {value!r}")
    return value


def _parts(key: Any) -> Iterator[Any]:
    """The leaves of a key made of nested tuples and lists, in order."""
    if isinstance(key, (tuple, list)):
        for item in key:
            yield from _parts(item)
    else:
        yield key


def _numeric(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def numeric_distance(key: Hashable, other: Hashable) -> float | None:
    """The default distance: the sum of the absolute differences of the keys' numeric parts (L1), when every
    other part is equal and the keys have the same shape; None (not comparable) otherwise."""
    mine, theirs = list(_parts(key)), list(_parts(other))
    if len(mine) != len(theirs):
        return None
    total = 0.0
    for a, b in zip(mine, theirs, strict=True):
        if _numeric(a) and _numeric(b):
            total += abs(float(a) - float(b))
        elif type(a) is not type(b) or a != b:
            return None
    return total


@dataclass
class Served:
    """A key served without tuning: the config, which decided key it came from, and how many decisions the
    table held when it was chosen (a new decision makes it choose again)."""

    config: dict[str, Any]
    source: str | None
    seen: int


class Undecided:
    """The policy of one tuned function for keys that are not decided (see the module docstring)."""

    def __init__(self, name: str, mode: str | None, distance: Distance | None) -> None:
        self.name = name
        self.mode = check_policy(mode)
        self.distance: Distance = distance or numeric_distance
        self._served: dict[Hashable, Served] = {}

    def current(self) -> str:
        """The policy now: ``TRITON_DIST_AUTOTUNE_UNDECIDED`` when set, else the decorator's, else ``tune``."""
        return settings.current().undecided or self.mode or "tune"

    def serve(self, table: dict[Hashable, dict[str, Any]], slot: Hashable, grouped: bool,
              first: Callable[[], dict[str, Any]], group_rank: int) -> dict[str, Any] | None:
        """The config for the undecided ``slot`` of ``table`` (None: tune it). ``grouped``: ``table`` is
        ``decided_in`` (slots are (group..., key)); ``first()`` is the first kept config."""
        served = self._served.get(slot)
        if served is not None and served.seen == len(table):
            return served.config
        mode = self.current()
        if mode == "tune":
            return None
        found = self._nearest(table, slot, grouped) if mode == "nearest" else None
        config, source = found if found is not None else (first(), None)
        if served is None or served.config != config:
            how = f"the decision of the nearest decided key {source}" if source else "the first kept config"
            key = _key_text(_split(slot, grouped)[1])
            text = f"triton_dist_tune: {self.name}: key {key} is not decided: serving {how} (undecided={mode!r})"
            logs.rank_log().info(text)
            if group_rank == 0:
                log.warning(text)
        self._served[slot] = Served(config, source, len(table))
        return config

    def _nearest(self, table: dict[Hashable, dict[str, Any]], slot: Hashable,
                 grouped: bool) -> tuple[dict[str, Any], str] | None:
        """The decided slot of the same group nearest to ``slot``: least (distance, key text); None if none."""
        prefix, key = _split(slot, grouped)
        best: tuple[float, str, dict[str, Any]] | None = None
        for other, config in table.items():
            other_prefix, other_key = _split(other, grouped)
            if other_prefix != prefix:
                continue
            try:
                d = self.distance(key, other_key)
                text = describe_key(other_key)
            except Exception as exc:
                raise BadInputError(f"{self.name}: distance({key!r}, {other_key!r}) raised {exc!r}") from exc
            if d is None or not math.isfinite(d):
                continue
            if best is None or (d, text) < best[:2]:
                best = (float(d), text, config)
        return None if best is None else (best[2], best[1])


def _split(slot: Hashable, grouped: bool) -> tuple[tuple, Hashable]:
    """(group part, key) of a table's slot: ``decided`` holds keys, ``decided_in`` (group identity..., key)."""
    return (tuple(slot[:-1]), slot[-1]) if grouped else ((), slot)  # type: ignore[index]


def _key_text(key: Hashable) -> str:
    try:
        return describe_key(key)
    except BadInputError:
        return repr(key)
