"""The journals as the command line reads them: each record credited to the decision it is for, and the tunings that
left records but no decision: cut short (a crash, a hang, a lost rank, an interruption) or still in flight. A tuning
that ends removes its records, so records credited to an entry with no cache file are such a tuning; the command
line lists them beside the decisions and shows what they recorded.

A journal is ``<root>/<function>/<entry>.<group>.rank<r>[.<k>].journal`` (:mod:`~triton_dist_tune.faults.journal`),
named after the steady, unpruned entry: its records name their decision (``decision``, :func:`credit`).
The files are read as they are, without taking their locks: a live tuner's journal is read too, and nothing is
created or changed.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..disk.decisions import inside
from ..records import finite_number
from .evidence import merge
from .journal import parse_records
from .recovery import strongest

#: a journal's file name: its entry, its group's tag (absent in old journals), its group rank and slot
_JOURNAL = re.compile(r"^(?P<entry>[^.]+)(?:\.(?P<tag>[0-9a-f]{10}))?\.rank(?P<rank>\d+)(?:\.\d+)?\.journal$")
#: a cache entry's name as the tuner writes it (:func:`~triton_dist_tune.disk.cache.entry_id`): 20 hex digits
_ENTRY = re.compile(r"^[0-9a-f]{20}$")


@dataclass
class ConfigRecord:
    """What the journals say of one config: the merged outcome the next attempt starts from (``measured``,
    ``stopped``, ``failed``, ``suspect``, ``interrupted``), or ``started`` (in flight, or begun and not finished)."""

    index: int
    config: str
    state: str
    time: float | None = None
    error: str | None = None


@dataclass
class Unfinished:
    """One cache entry's journals without its cache file: a tuning never finished."""

    #: the function's folder in the cache (the tuned function's name, or ``contextual``)
    folder: Path
    #: the entry's file name without ``.json`` (what its decision will be called)
    entry: str
    journals: list[Path]
    #: every well-formed record of every journal, oldest first within each file
    records: list[dict[str, Any]] = field(default_factory=list)
    #: damaged lines skipped: "<journal>: line <n>"
    damaged: list[str] = field(default_factory=list)
    #: where the entry's journals hold several tunings (groups of one job that are not replicas of each other):
    #: the group tag that names this one (:meth:`Unfinished.split`); empty where they hold one
    part: str = ""

    @property
    def function(self) -> str:
        return self.folder.name

    @property
    def name(self) -> str:
        """``<function>/<entry>``, as ``list`` names decisions (``<function>/<entry>@<group tag>`` where the entry's
        journals hold several tunings)."""
        return f"{self.folder.name}/{self.entry}" + (f"@{self.part}" if self.part else "")

    def split(self) -> list[Unfinished]:
        """The tunings these journals hold: the groups that agreed an attempt's name together (the replicas of one
        tuning, which agree it over every replica: :func:`~.recovery.across`) are one tuning; groups that never
        shared one (groups of one job that are not replicas, tuning the same entry into one folder) are tunings of
        their own, whose next attempts never read each other's journals. A group none of whose records names an
        attempt is one of its own."""
        tags = {_slot(record)[0] for record in self.records} | {_tag(p) for p in self.journals}
        linked = {tag: {tag} for tag in tags}
        first: dict[str, str] = {}  # attempt -> the first tag seen to name it
        for record in self.records:
            attempt, tag = record.get("attempt"), _slot(record)[0]
            if not isinstance(attempt, str) or not attempt:
                continue
            other = first.setdefault(attempt, tag)
            if linked[other] is not linked[tag]:
                merged = linked[other] | linked[tag]
                for member in merged:
                    linked[member] = merged
        parts = sorted({min(group): group for group in linked.values()}.items())
        if len(parts) <= 1:
            return [self]
        return [Unfinished(self.folder, self.entry, [p for p in self.journals if _tag(p) in group],
                           [r for r in self.records if _slot(r)[0] in group],
                           [d for d in self.damaged if _tag(Path(d.partition(":")[0])) in group], part or "none")
                for part, group in parts]

    @property
    def modified(self) -> float:
        """When a journal was last written (unix seconds)."""
        return max((_mtime(p) for p in self.journals), default=0.0)

    @property
    def groups(self) -> dict[str, list[int]]:
        """The groups that journaled (their tags, in the file names) and the group ranks of each: one group, or
        several (the replicas of one tuning on a node, whose journals share its folder; groups of one job that are
        not replicas are tunings of their own: :meth:`Unfinished.split`)."""
        out: dict[str, set[int]] = {}
        for path in self.journals:
            found = _JOURNAL.match(path.name)
            out.setdefault(found["tag"] or "", set()).add(int(found["rank"]))
        return {tag: sorted(ranks) for tag, ranks in sorted(out.items())}

    @property
    def ranks(self) -> list[int]:
        """The group ranks that journaled, over every group."""
        return sorted({rank for ranks in self.groups.values() for rank in ranks})

    def ranks_text(self) -> str:
        """``0,1`` for one group; ``2 groups: 0 | 0`` for several (each group's ranks)."""
        groups = list(self.groups.values())
        text = " | ".join(",".join(map(str, ranks)) for ranks in groups)
        return text if len(groups) == 1 else f"{len(groups)} groups: {text}"

    @property
    def attempts(self) -> int:
        """The attempts whose records are there, counted on the group rank with the most: each process's tuning
        (``session``) by the attempt's name it agreed over its ranks and replicas (``attempt``, in its records
        from the agreement on; the session where none has it), so that the processes of one attempt count once."""
        named: dict[tuple[str, str], dict[Any, Any]] = {}  # (tag, rank) -> session -> its attempt
        for record in self.records:
            sessions = named.setdefault(_slot(record), {})
            session, attempt = record.get("session"), record.get("attempt")
            attempt = attempt if isinstance(attempt, str) else None  # damaged (a list: unhashable): the session's
            if attempt or session not in sessions:
                sessions[session] = attempt or session
        return max((len(set(sessions.values())) for sessions in named.values()), default=0)

    def configs(self) -> list[ConfigRecord]:
        """Per config the journals name, by index: the outcome the next attempt starts from, or ``started`` for a
        config begun with no outcome yet. As the tuner takes it: each group's ranks' records merged
        (:func:`~.evidence.merge`), then the groups' views as a replica's are merged with the other replicas'
        (:func:`~.recovery.strongest`: a config that two processes of one node were inside when one attempt ended
        is a suspect of one attempt, not a crash of two)."""
        descriptions: dict[int, str] = {}
        per_group: dict[str, dict[int, list[dict[str, Any]]]] = {}
        for record in self.records:
            descriptions[record["index"]] = record["config"]
            tag, rank = _slot(record)
            per_group.setdefault(tag, {}).setdefault(int(rank), []).append(record)
        space = _Space(descriptions)
        views = [sorted(merge(ranks, space).values(), key=lambda o: o["index"])
                 for _, ranks in sorted(per_group.items())]
        merged = {o["index"]: o for o in (views[0] if len(views) == 1 else strongest(views))}
        out = []
        for index in sorted(descriptions):
            outcome = merged.get(index)
            if outcome is None:
                out.append(ConfigRecord(index, descriptions[index], "started"))
            else:
                time = outcome.get("time")
                out.append(ConfigRecord(index, descriptions[index], outcome["state"],
                                        float(time) if finite_number(time) else None, outcome.get("error")))
        return out

    def summary(self) -> str:
        """``2 measured, 1 failed, 1 started``: how many configs are in each state."""
        counts: dict[str, int] = {}
        for config in self.configs():
            counts[config.state] = counts.get(config.state, 0) + 1
        return ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda kv: _ORDER.get(kv[0], 9)))


class _Space(Sequence[str]):
    """The space as far as the journals describe it: index -> description, ``""`` for an index no record names,
    without a list as long as the largest index (one damaged record's index of 10**9 must not take gigabytes)."""

    def __init__(self, descriptions: dict[int, str]) -> None:
        self._descriptions = descriptions
        # (at most what ``len`` returns: a damaged record's index of 2**63 made ``list`` fail with an OverflowError)
        self._length = min(max((i for i in descriptions if i >= 0), default=-1) + 1, sys.maxsize)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, int) or not 0 <= index < self._length:
            raise IndexError(index)
        return self._descriptions.get(index, "")


_ORDER = {"measured": 0, "stopped": 1, "failed": 2, "suspect": 3, "interrupted": 4, "started": 5}


def unfinished(root: Path) -> list[Unfinished]:
    """Every tuning under ``root`` that left journals and no cache file, sorted by function and entry: the records
    credited to an entry (:func:`credit`) whose ``<entry>.json`` is not there, with the journals that hold them."""
    found: dict[tuple[Path, str], Unfinished] = {}
    for journal in read_journals(root, "*/*.journal"):
        folder = journal.path.parent
        for entry in journal.credits:
            if (folder / f"{entry}.json").exists():
                continue  # a decision's (a tuning of it again, in flight or cut short): 'show' names them
            tuning = found.setdefault((folder, entry), Unfinished(folder, entry, []))
            tuning.journals.append(journal.path)
            tuning.records += [r for r in journal.records if credit(r, journal.entry) == entry]
            tuning.damaged += journal.damaged
    return [part for _, tuning in sorted(found.items()) for part in tuning.split()]


def credit(record: dict[str, Any], named: str) -> str:
    """The entry whose tuning wrote ``record``: its ``decision`` (the entry that tuning writes its decision as),
    else ``named``, the entry its journal's name says. The journals are named after the entry as steady timing
    names it without the kept set, so that a hang under one timing mode or kept set counts under every other
    (``function/tuning.py``): one file holds the records of a cold tuning, or of a kept subset, beside those of the
    steady decision its name is. Records written before ``decision`` was, and a contextual tuning's (its journals
    are named after its decision), go by the name."""
    decision = record.get("decision")
    return decision if isinstance(decision, str) and _ENTRY.match(decision) else named


@dataclass
class JournalFile:
    """One journal file as the command line reads it (without its lock)."""

    path: Path
    #: the entry its name says
    entry: str
    records: list[dict[str, Any]] = field(default_factory=list)
    #: damaged lines skipped, or the file unreadable: "<journal>: line <n>"
    damaged: list[str] = field(default_factory=list)

    @property
    def credits(self) -> list[str]:
        """The entries its records are credited to (:func:`credit`), sorted: its name's where it holds none."""
        return sorted({credit(r, self.entry) for r in self.records}) or [self.entry]


def read_journals(root: Path, pattern: str) -> list[JournalFile]:
    """The journals ``pattern`` names under ``root``, sorted, read (a link out of ``root`` is never followed, as
    the command line's other readers)."""
    out = []
    for path in sorted(root.glob(pattern)) if root.is_dir() else []:
        found = _JOURNAL.match(path.name)
        if found is None or path.name.startswith(".") or not path.is_file() or not inside(root, path):
            continue
        journal = JournalFile(path, found["entry"])
        try:
            data = path.read_bytes()
        except OSError as exc:
            journal.damaged.append(f"{path.name}: unreadable ({exc.strerror or exc})")
        else:
            journal.records, damaged = parse_records(data, path)
            journal.damaged += [f"{path.name}: line {n}" for n in damaged]
        out.append(journal)
    return out


def journals_of(decision: Path) -> list[Path]:
    """The journals beside a decision (``<entry>.json``) that hold records credited to it (:func:`credit`): a
    tuning of it again, in flight or cut short, whatever their names."""
    return [j.path for j in read_journals(decision.parent, "*.journal") if decision.stem in j.credits]


def journals_to_clear(decisions: list[Path]) -> tuple[list[Path], dict[Path, list[str]]]:
    """What ``clear`` of ``decisions`` does with their journals (:func:`journals_of`, and those named after them):
    those holding records of these decisions only (removed), and those that hold another entry's (kept: the
    evidence of another decision's tuning, or of a tuning never finished), each with those entries."""
    doomed, shared = [], {}
    chosen: dict[Path, set[str]] = {}
    for path in decisions:
        chosen.setdefault(path.parent, set()).add(path.stem)
    for folder, stems in sorted(chosen.items()):
        for journal in read_journals(folder, "*.journal"):
            if stems.isdisjoint(journal.credits) and journal.entry not in stems:
                continue  # neither named after them nor holding their records
            others = [entry for entry in journal.credits if entry not in stems]
            if others:
                shared[journal.path] = others
            else:
                doomed.append(journal.path)
    return doomed, shared


def decisions_tuned_again(journals: list[Path]) -> dict[Path, list[str]]:
    """Those of ``journals`` that hold records credited to a decision beside them (:func:`credit`: its
    ``<entry>.json`` is there), each with those decisions: a tuning of the decision again (``..._ALWAYS_TUNE``, a
    stale or superseded decision), cut short or in flight, whose evidence (a config that hung or crashed) its next
    tuning starts from. ``clear --unfinished`` keeps them: they are no tuning never finished (:func:`unfinished`
    leaves them out too), and ``clear`` of the decision removes them (:func:`journals_to_clear`). Before, it removed
    every journal it selected: tests/test_cli_credit.py."""
    chosen = set(journals)
    out: dict[Path, list[str]] = {}
    for folder in sorted({p.parent for p in journals}):
        for journal in read_journals(folder, "*.journal"):
            decided = [entry for entry in journal.credits if (folder / f"{entry}.json").exists()]
            if journal.path in chosen and decided:
                out[journal.path] = decided
    return out


def find_unfinished(root: Path, name: str) -> list[Unfinished]:
    """The unfinished tunings called ``name``: ``<function>/<entry>`` or its entry, else those whose entry (or
    ``<function>/<entry>``) starts with ``name``."""
    tunings = unfinished(root)
    return [t for t in tunings if name in (t.name, t.entry)] or \
        [t for t in tunings if t.entry.startswith(name) or t.name.startswith(name)]


def _slot(record: dict[str, Any]) -> tuple[str, str]:
    """The group tag and group rank of the journal a record was read from."""
    found = _JOURNAL.match(Path(record["file"]).name)
    return found["tag"] or "", found["rank"]


def _tag(path: Path) -> str:
    """The group tag in a journal's file name (empty for an old journal without one, or a name that is no journal's)."""
    found = _JOURNAL.match(path.name)
    return (found["tag"] or "") if found else ""


def _mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
