"""What the ranks of a group agree on, over its channel (:class:`~.channel.Group`).

- :func:`agree`: every rank holds the same text in each of some fields (sent as fingerprints), else an
  :class:`Agreement` saying where they differ (:func:`difference` words it);
- :func:`from_root`: what group rank 0 computes for the group, its result or its
  error (:func:`attempt`), on every rank alike (:func:`unwrap_outcomes`): nothing one rank decides fails on that
  rank alone while the others wait for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BadInputError
from ..space import fingerprint
from .channel import ExchangeError, Group
from .rank_names import rank_name


@dataclass(frozen=True)
class Agreement:
    """What :func:`agree` found: the ranks' notes, and for each field where ranks differ, the groups of ranks that
    hold each value (with the start of that value's text)."""

    notes: list[tuple[int, str]]
    differ: dict[str, list[tuple[list[int], str]]]


def agree(group: Group, fields: Mapping[str, str], what: str, timeout: float | None = None,
          note: str | None = None) -> Agreement:
    """Check that every rank holds the same text in each of ``fields``, sending fingerprints, not the texts.

    One exchange carries each rank's fingerprints and ``note`` (a local problem to report, or None). Only where
    ranks differ, a second exchange (on every rank, since all learn of the difference together) carries the start
    of the text from one rank per distinct value, for the error message. ``fields`` must have the same names, in
    the same order, on every rank.
    """
    names = list(fields)
    mine = (tuple(fingerprint(fields[n]) for n in names), note)

    def summarize(values: list[Any]) -> tuple[list[tuple[int, str]], dict[int, list[list[int]]]]:
        notes = [(r, n) for r, (_, n) in enumerate(values) if n]
        split: dict[int, list[list[int]]] = {}
        for i in range(len(names)):
            holders: dict[str, list[int]] = {}
            for r, (prints, _) in enumerate(values):
                holders.setdefault(prints[i], []).append(r)
            if len(holders) > 1:
                split[i] = sorted(holders.values())
        return notes, split

    notes, split = group.combine(mine, what, summarize, timeout)
    if not split:
        return Agreement(notes, {})
    # one rank per distinct value sends its text (whole up to DETAIL_CHARS: the entry that differs may be far in)
    sample = {i: fields[names[i]][:DETAIL_CHARS] for i, groups in split.items()
              if any(g[0] == group.rank for g in groups)}
    texts = group.combine(sample, f"{what} (details of the difference)", list, timeout)
    differ = {names[i]: list(zip(groups, difference([texts[ranks[0]][i] for ranks in groups]), strict=True))
              for i, groups in split.items()}
    return Agreement(notes, differ)


#: how much of a differing field's text one rank sends for the message (the error path only)
DETAIL_CHARS = 1 << 20
#: how much of one value (a line of a list, or a one-line text) a message shows
SHOWN_CHARS = 300


def _shown(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def difference(texts: Sequence[str]) -> list[str]:
    """Each holder's text for a message saying how ``texts`` differ. One-line texts are shown (clipped); texts of
    several lines (a config space: one config a line) by their length and the first entry where they differ,
    ``entry 137 of 200 (the first that differs): {BLOCK: 64}``, not by their common start."""
    lists = [t.split("\n") for t in texts]
    if all(len(lines) == 1 for lines in lists):
        return [_shown(t) for t in texts]
    common = min(len(lines) for lines in lists)
    at = next((j for j in range(common) if len({lines[j] for lines in lists}) > 1), common)
    return [f"entry {at} of {len(lines)} (the first that differs): "
            + (_shown(lines[at]) if at < len(lines) else "none (the list ends before it)") for lines in lists]


# -- what one rank computes for the group: its result or its error, on every rank ------------------------------------


def attempt(compute: Callable[[], Any]) -> list[Any]:
    """What ``compute()`` gave, as plain data to exchange: ``[True, value]``, or ``[False, "Type: message"]`` when it
    raised (a :class:`BadInputError` keeps its own text)."""
    try:
        return [True, compute()]
    except Exception as exc:
        return [False, str(exc) if isinstance(exc, BadInputError) else f"{type(exc).__name__}: {exc}"[:800]]


def unwrap_outcomes(group: Group, outcomes: Sequence[tuple[int, Any]], what: str,
                    error: type[Exception] = BadInputError) -> Any:
    """The value of what ranks computed (``outcomes``: (group rank, :func:`attempt`'s result), the same list on
    every rank, since it was exchanged): the first one; when any of them raised, every rank raises the same
    ``error`` naming each rank that did."""
    failures, values = [], []
    for rank, outcome in outcomes:
        if not (isinstance(outcome, (list, tuple)) and len(outcome) == 2 and type(outcome[0]) is bool):
            raise ExchangeError(f"triton_dist_tune: '{what}': {rank_name(group, rank)} sent something that is not an "
                                f"outcome ({str(outcome)[:100]}): another process wrote under the tuner's keys")
        (values if outcome[0] else failures).append(outcome[1] if outcome[0] else (rank, outcome[1]))
    if failures:
        detail = "; ".join(f"{rank_name(group, rank)}: {text}" for rank, text in failures)
        raise error(f"triton_dist_tune: {what}: {detail}")
    return values[0]


def from_root(group: Group, compute: Callable[[], Any], what: str, timeout: float | None = None,
              error: type[Exception] = BadInputError) -> Any:
    """Group rank 0 computes for the group (``compute()``, called there alone); every rank gets its result, or
    raises the same ``error`` naming rank 0 when it raised: nothing one rank decides fails on that rank alone while
    the others wait for it."""
    mine = attempt(compute) if group.rank == 0 else None
    return unwrap_outcomes(group, [(0, group.broadcast(mine, what, timeout=timeout))], what, error)

