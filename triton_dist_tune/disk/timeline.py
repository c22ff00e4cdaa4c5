"""A job's per-rank logs read back, for the command line's ``logs``: the jobs a log folder holds, and one job's
JSON-lines records (``rank-*.jsonl``, written by :mod:`.logs`) merged into one timeline."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..records import a_date, finite_number
from .files import read_regular


@dataclass(frozen=True)
class JobLog:
    """One job's records in a log folder, as the command line lists them."""

    name: str
    ranks: list[int]
    first: float
    last: float


def jobs_in(root: Path) -> list[JobLog]:
    """The jobs whose records the rank logs (``rank-*.jsonl``) under ``root`` hold, oldest first."""
    seen: dict[str, tuple[set[int], float, float]] = {}
    for record in _records(root)[0]:
        ranks, first, last = seen.get(str(record.get("job")), (set(), record["time"], record["time"]))
        ranks.add(record.get("rank", 0))
        seen[str(record.get("job"))] = (ranks, min(first, record["time"]), max(last, record["time"]))
    jobs = [JobLog(name, sorted(ranks, key=str), first, last) for name, (ranks, first, last) in seen.items()]
    return sorted(jobs, key=lambda j: (j.first, j.name))


def _records(root: Path) -> tuple[list[dict[str, Any]], int]:
    records, damaged = [], 0
    for path in sorted(root.glob("rank-*.jsonl")) if root.is_dir() else []:
        try:  # a FIFO named like a rank log held 'logs' for ever: refused at once, as no regular file
            text = read_regular(path).decode(errors="replace")
        except OSError:  # (a folder, a FIFO, unreadable): skipped, counted as damaged
            damaged += 1
            continue
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # torn, garbage, nested too deep
                record = None
            if _well_formed(record):
                records.append(record)
            elif line.strip():
                damaged += 1
    return records, damaged


def _well_formed(record: Any) -> bool:
    """Whether a JSON line is a record the command line can show: an object with a message, a time a clock can
    show and, where it names one, a rank that is an integer (a damaged or foreign line is skipped, never a
    crash)."""
    if not isinstance(record, dict) or "message" not in record:
        return False
    stamp, rank = record.get("time"), record.get("rank", 0)
    return finite_number(stamp) and type(rank) is int and a_date(stamp)


def read_job(root: Path, job: str) -> tuple[list[dict[str, Any]], int]:
    """Every rank's JSON-lines records of ``job`` in the log folder ``root``, merged in time order (ties: by
    rank), and the number of damaged lines skipped (a rank killed mid-write leaves a torn last line)."""
    records, damaged = _records(root)
    records = [r for r in records if str(r.get("job")) == job]
    records.sort(key=lambda r: (r["time"], r.get("rank", 0)))
    return records, damaged


def render_record(record: dict[str, Any]) -> str:
    """One record as a timeline line: time, rank, level, message (continuation lines indented); a level that is not
    text (a foreign line's null or list) is shown as ``str`` shows it."""
    stamp = time.strftime("%H:%M:%S", time.localtime(record["time"])) + f".{int(record['time'] * 1000) % 1000:03d}"
    head = f"{stamp} rank {record.get('rank', '?'):>2} {str(record.get('level', 'INFO')):<7} "
    return head + str(record["message"]).replace("\n", "\n" + " " * len(head))
