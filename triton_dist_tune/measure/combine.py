"""What one exchange of the warm-up or the race carries, and how group rank 0 reduces the ranks' contributions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..group import codec

#: above this many ranks, an exchange of the race carries only the group's time of a sample (the max over ranks),
#: not every rank's, so that what the store serves stays linear in the group's size
PER_RANK_LIMIT = 64


@codec.record
@dataclass(frozen=True)
class Combined:
    """What one exchange of the warm-up or the race tells every rank (computed once, on group rank 0)."""

    #: "rank r: error; ..." when some rank failed, else None
    errors: str | None
    #: every rank's value, by group rank (only the largest in a group over :data:`PER_RANK_LIMIT` ranks)
    values: list[float]
    #: the largest of the ranks' elapsed racing times
    elapsed: float
    #: configs checked earlier that some rank found wrong since its last exchange (index -> "rank r: verdict; ..."):
    #: each left an undeclared output as the caller had it, which a config checked later wrote
    #: (:meth:`~triton_dist_tune.measure.trial.Trial.take_late`); failed on every rank alike
    late: dict[int, str] = field(default_factory=dict)


def combine_phase(contributions: list[tuple[Any, ...]]) -> Combined:
    """Rank 0's reduction of an exchange: each rank sent (its value or its error text, its elapsed seconds), and in
    a warm-up's exchange the configs it found wrong late (a dict: :attr:`Combined.late`)."""
    errors = [value if isinstance(value, str) else None for value, *_ in contributions]
    elapsed = max(sent[1] for sent in contributions)
    found = [sent[2] if len(sent) > 2 and isinstance(sent[2], dict) else {} for sent in contributions]
    late = {index: by_rank([mine.get(index) for mine in found])
            for index in sorted({i for mine in found for i in mine if type(i) is int})}
    if any(errors):
        return Combined(by_rank(errors), [], elapsed, late)
    values = [float(value) for value, *_ in contributions]
    return Combined(None, values if len(values) <= PER_RANK_LIMIT else [max(values)], elapsed, late)


def combine_round(contributions: list[tuple[list[tuple[Any, Any]], float]]) -> list[tuple[Any, Combined]]:
    """Rank 0's reduction of a steady step's exchange: each rank sent ([(sample key, its time or error text)...], its
    elapsed seconds); a key is (round in the step, config index). A sample some rank did not reach (it stopped its
    step at another config's failure) is left out: it is missing, not failed, and the measurer takes it again."""
    elapsed = max(seconds for _, seconds in contributions)
    by_rank = [dict(samples) for samples, _ in contributions]
    common = [index for index, _ in contributions[0][0] if all(index in mine for mine in by_rank)]
    failed = {index for mine in by_rank for index, value in mine.items() if isinstance(value, str)}
    order = common + sorted(failed - set(common))
    return [(index, combine_phase([(mine.get(index), elapsed) for mine in by_rank])) for index in order]


def by_rank(errors: Sequence[str | None]) -> str:
    """'rank r: error; ...' for the ranks whose entry is an error."""
    return "; ".join(f"rank {r}: {e}" for r, e in enumerate(errors) if e)
