"""The crash journal: every step of a tuning, appended to disk as it happens, one JSON object per line.

Each rank keeps its own journal file next to the cache entry it is tuning (``<entry>.rank<r>.journal``). On the
next attempt the ranks gather their journals and merge them (:func:`merge`): configs whose group result is known
are not measured again; configs that were in flight when a process died, hung past the watchdog, or failed on
some rank are left out. A torn last line (a crash mid-write) is skipped with a warning.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("triton_dist_tune")

#: states written when the group agreed on a config's outcome
FINAL = ("measured", "failed")
#: states one rank writes about itself, before the group knows
LOCAL = ("started", "local_failure", "hung")


class Journal:
    """Append-only record of one rank's tuning of one cache entry."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, index: int, state: str, **fields: Any) -> None:
        """Record that config ``index`` reached ``state``; flushed and fsynced before returning."""
        record = {"index": index, "state": state, **fields}
        line = json.dumps(record, allow_nan=False, default=str) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        """Every well-formed record, oldest first; nothing when the file is missing or unreadable."""
        try:
            text = self.path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("triton_dist_tune: cannot read journal %s (%s); ignoring it", self.path, exc)
            return []
        records = []
        for number, line in enumerate(text.splitlines(), 1):
            try:
                record = json.loads(line)
                if isinstance(record, dict) and isinstance(record.get("index"), int) and "state" in record:
                    records.append(record)
                    continue
            except ValueError:
                pass
            if line.strip():
                log.warning("triton_dist_tune: skipping damaged line %d of journal %s", number, self.path)
        return records

    def remove(self) -> None:
        """Delete the journal (once the decision is in the cache)."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def merge(per_rank: list[list[dict[str, Any]]], descriptions: list[str]) -> dict[int, dict[str, Any]]:
    """Merge the journals of every rank into one outcome per config index.

    An outcome is ``{"state": "measured", "time": ms, ...}``, ``{"state": "failed", "error": ...}``, or, for a
    config some rank was inside of when its process ended, ``{"state": "failed", "error": "crashed|hung ..."}``.
    Records whose description does not match the current space are ignored.
    """
    final: dict[int, dict[str, Any]] = {}
    local: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for rank, records in enumerate(per_rank):
        for record in records:
            i = record["index"]
            if not 0 <= i < len(descriptions) or record.get("config") != descriptions[i]:
                continue
            if record["state"] in FINAL:
                final.setdefault(i, record)
            elif record["state"] in LOCAL:
                local.setdefault(i, []).append((rank, record))
    outcomes = dict(final)
    for i, records in local.items():
        if i in outcomes:
            continue
        worst = [(r, rec) for r, rec in records if rec["state"] != "started"]
        if worst:
            rank, rec = worst[0]
            why = "hung" if rec["state"] == "hung" else "failed"
            error = f"{why} on rank {rank} in an earlier attempt: {rec.get('error', '')}".rstrip(": ")
        else:
            ranks = sorted({r for r, _ in records})
            error = f"crashed: ranks {ranks} were inside this config when an earlier attempt ended"
        outcomes[i] = {"index": i, "state": "failed", "error": error, "config": descriptions[i]}
    return outcomes
