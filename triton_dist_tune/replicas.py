"""Replicas: the same tensor-parallel group repeated across a data-parallel job, tuned as one.

A call with ``autotune_pg=tp_group, autotune_replicas=replica_group`` (``replica_group`` links the same position
of every replica, e.g. ``mesh.get_group("dp")`` of a ``DeviceMesh`` whose other dimension is ``tp``) tunes so that
every rank of every replica ends on one config per key:

1. the replicas agree on key and config space, and on the configs every rank of every replica keeps;
2. replica ``j`` measures the configs at positions ``j, j + R, ...`` of that list, in lock-step inside its group
   (so the first pass takes about 1/R of the time);
3. the rows are gathered across replicas (all ranks of a group hold the same rows, so every position gathers the
   same table);
4. the leaders (``refine_top``, at least 2) are measured on every replica that has not measured them yet, and a
   leader's time is the MAX over replicas of each replica's group time;
5. the choice is the least of those times (ties: the earlier config): the least over configs of the max over every
   rank of every replica. Every rank computes it from the same table.

The disk cache holds one decision per key for the whole layout; the rank that is group rank 0 of replica 0 alone
reads and writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .comm import Group, agree
from .errors import BadInputError, MismatchError
from .measure import Measurer
from .space import fingerprint
from .watchdog import exchange_timeout

MIN_LEADERS = 2


@dataclass(frozen=True)
class Layout:
    """A group that tunes in lock-step (``group``) and the ranks at its position in every replica (``replicas``)."""

    group: Group
    replicas: Group

    @property
    def reads_cache(self) -> bool:
        """Whether this rank reads and writes the disk cache for the whole layout."""
        return self.group.rank == 0 and self.replicas.rank == 0

    def entry(self, entry: str) -> str:
        """The cache entry of a decision for this layout (the group's entry, made distinct per replica count)."""
        return fingerprint(f"{entry}/replicas{self.replicas.size}")

    def journal_suffix(self) -> str:
        """Distinguishes the journals of ranks at one group position in different replicas (one folder)."""
        return f".replica{self.replicas.rank}"

    def agree(self, name: str, key_text: str, space_text: str, timeout: float | None,
              problem: str | None = None) -> None:
        """Raise the same error on every rank when some replica reports a ``problem`` (a failing ``key_fn``), or
        replicas differ in key, config space or group size (:class:`MismatchError`)."""
        fields = {"group size": str(self.group.size), "config space": space_text, "key": key_text}
        found = agree(self.replicas, fields, f"[{name}] agree across replicas", timeout, problem)
        if found.notes:
            raise BadInputError(f"{name}: " + "; ".join(f"replica {j}: {p}" for j, p in found.notes))
        for what, holders in found.differ.items():
            detail = "; ".join(f"replicas {ranks}: {text}" for ranks, text in holders)
            raise MismatchError(f"{name}: the replicas linked by group '{self.replicas.name}' differ in {what}: "
                                f"{detail}")

    def lookup(self, read: Callable[[], Any], what: str, timeout: float) -> Any:
        """``read()`` on the cache-reading rank alone; its answer on every rank of every replica."""
        found = self.group.broadcast(read() if self.reads_cache else None, what, timeout=timeout)
        return self.replicas.broadcast(found, f"{what} (across replicas)", timeout=timeout)

    def keep_everywhere(self, kept: list[int], what: str, timeout: float) -> list[int]:
        """The configs that every replica keeps (each replica's ``kept`` is already agreed inside its group)."""
        return self.replicas.combine(kept, f"{what} (across replicas)", _kept_by_all, timeout)

    def share(self, kept: Sequence[int]) -> set[int]:
        """The configs this replica measures in the first pass."""
        return {i for position, i in enumerate(kept) if position % self.replicas.size == self.replicas.rank}

    def gather(self, rows: list[dict[str, Any]], what: str, timeout: float) -> list[dict[str, Any]]:
        """Every replica's rows, as one table sorted by config index (identical on every rank)."""
        return self.replicas.combine(rows, what, _merged, timeout)

    def worst(self, times: dict[int, float | str], what: str, timeout: float) -> dict[int, float | str]:
        """Per config, the MAX over replicas of their group times, or the errors of the replicas where it failed."""
        return self.replicas.combine(times, what, _worst, timeout)


def _kept_by_all(kept: list[list[int]]) -> list[int]:
    common = set(kept[0]).intersection(*kept[1:])
    if not common:
        raise BadInputError(f"prune_fn left no config that every replica keeps (replicas kept {kept})")
    return sorted(common)


def _merged(tables: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for replica, table in enumerate(tables):
        for row in table:
            rows.setdefault(row["index"], {**row, "replica": replica})
    return [rows[i] for i in sorted(rows)]


def _worst(per_replica: list[dict[int, float | str]]) -> dict[int, float | str]:
    out: dict[int, float | str] = {}
    for index in sorted(per_replica[0]):
        values = [times[index] for times in per_replica]
        errors = [f"replica {j}: {v}" for j, v in enumerate(values) if isinstance(v, str)]
        out[index] = "; ".join(errors) if errors else max(values)
    return out


def settle(layout: Layout, measurer: Measurer, rows: list[dict[str, Any]],
           candidate: Callable[[int], tuple[int, dict[str, Any], str]], refine_top: int, label: str,
           timeout: float, share: int) -> list[dict[str, Any]]:
    """Steps 3 and 4: gather the replicas' rows, measure the leaders on every replica that has not, and give each
    leader the MAX over replicas of its group time (marked ``refined``, so that the decision is among them)."""
    table = layout.gather(rows, f"{label} rows across replicas", exchange_timeout(timeout) * max(1, share))
    top = leaders(table, refine_top)
    mine = {r["index"]: r for r in rows}
    times: dict[int, float | str] = {}
    for index in top:  # every rank of every replica has the same leaders, in the same order
        row = mine.get(index) or measurer.lockstep(*candidate(index), None)
        times[index] = row["time"] if row["state"] == "measured" else str(row.get("error"))
    if refine_top and len(top) > 1:  # the leaders again, interleaved, on every replica
        times = {i: times[i] if isinstance(times[i], str) else t
                 for i, t in measurer.refine([candidate(i) for i in top]).items()}
    worst = layout.worst(times, f"{label} leaders across replicas", exchange_timeout(timeout) * max(1, len(top)))
    for row in table:
        value = worst.get(row["index"])
        if isinstance(value, str):
            row.update(state="failed", error=f"on some replica: {value}")
        elif value is not None:
            row.update(first_time=row["time"], time=value, refined=True)
    return table


def leaders(rows: Sequence[dict[str, Any]], count: int) -> list[int]:
    """The ``max(count, 2)`` healthy configs with the least group times, by index (ties: the earlier config)."""
    healthy = sorted((r for r in rows if r["state"] == "measured" and not r.get("early_stop")),
                     key=lambda r: (r["time"], r["index"]))
    return sorted(r["index"] for r in healthy[: max(count, MIN_LEADERS)])
