"""The lines of a crash journal (:mod:`.journal`): which are well-formed records, and which a removal deletes.

A removal deletes the records of one tuning and keeps the rest in place (:meth:`~.journal.Journal.remove`): another
kept set's records (that set's cut attempt), and, where a cache hit cleans up, every record that is not provably
this job's or this process's: another job tuning the same entry may be between two of its attempts (a restart, its
journal unlocked meanwhile), and its next attempt resumes from them.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..group.codec import Unreadable, read_json
from ..records import finite_number

#: states written when the group agreed on a config's outcome
FINAL = ("measured", "stopped", "failed")
#: states one rank writes about itself, before the group knows
LOCAL = ("started", "local_failure", "hung", "interrupted")
#: the fields of a record that readers group by, compare and quote as text (:func:`~.evidence.merge`, the clock a
#: resumed attempt keeps, ``show``): text or null where present (``attempt`` is not one: a damaged one is ignored,
#: the record kept as evidence)
TEXT_FIELDS = ("session", "error", "clock", "phase", "stage")


def removed_lines(data: bytes, kept: str | None, job: str | None,
                  sessions: Collection[str] | None) -> tuple[bytes, bool]:
    """What a removal leaves of a journal's bytes: the well-formed records it keeps (each a line), and whether it
    deletes any. ``kept``: delete only the records written under that kept set (a record that names none counts as
    this set's; None: any set's). ``sessions``: delete only the records of this job (``job``, where it has one) or
    of this process's attempts (their ``session`` in ``sessions``); None: any job's. Damaged lines go with a removal."""
    lines, removes = [], False
    for line in data.split(b"\n"):
        try:
            record = read_json(line.decode(errors="replace"))
        except Unreadable:
            continue
        if not well_formed(record):
            continue
        other_set = kept is not None and record.get("kept", kept) != kept
        others = sessions is not None and not (record.get("session") in sessions
                                               or job is not None and record.get("job") == job)
        if other_set or others:
            lines.append(line + b"\n")
        else:
            removes = True
    return b"".join(lines), removes or not lines


def parse_records(data: bytes, path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The well-formed records of a journal's bytes (each naming ``path`` in ``file``), and the numbers of the
    damaged lines skipped (a torn last line, garbage, an invalid record)."""
    records, damaged = [], []
    for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
        try:  # checked to the limits of what is sent: the ranks exchange their records
            record = read_json(line)
        except Unreadable:
            record = None
        if well_formed(record):
            records.append({**record, "file": str(path)})
        elif line.strip():
            damaged.append(number)
    return records, damaged


def well_formed(record: Any) -> bool:
    """Whether ``record`` is a usable journal record (a measured one needs a finite, non-negative time; its
    :data:`TEXT_FIELDS` are text or null: a ``session`` that is a list failed every rank's merge with a TypeError)."""
    if not isinstance(record, dict) or type(record.get("index")) is not int:
        return False
    if record.get("state") not in FINAL + LOCAL or not isinstance(record.get("config"), str):
        return False
    if not all(isinstance(record.get(name), (str, type(None))) for name in TEXT_FIELDS):
        return False
    if record["state"] in ("measured", "stopped"):
        time = record.get("time")
        return finite_number(time) and time >= 0
    return True
