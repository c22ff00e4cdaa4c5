"""What a campaign reports: one :class:`KeyResult` per key (the plain data its ranks exchange), the
:class:`Summary` every rank returns, and the progress lines group rank 0 prints."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..disk.logs import ms_text, text_table
from ..group.channel import ExchangeError
from ..records import finite_number

#: how a key ended in a campaign
KEY_STATES = ("tuned", "cached", "failed")


@dataclass
class KeyResult:
    """One key of a campaign: its choice and how sure it is, or its error. Exchanged as plain data."""

    position: int  #: the key's place in the campaign's list of calls
    key: str  #: the key's text (as ``key_fn`` returned it)
    state: str  #: tuned, cached (decided by an earlier run, read from the cache) or failed
    index: int = -1  #: the chosen config's index in the space (-1 when failed)
    config: str = ""  #: the chosen config's text
    time_ms: float | None = None  #: the chosen config's group time
    margin: float | None = None  #: how much slower the runner-up is (0.05: 5%); None: the only usable config
    near_tie: bool = False
    unit: int = 0  #: which rank (rank-local functions) or replica (collective functions) tuned it
    seconds: float = 0.0  #: how long the key took on its unit (tuning or cache lookup)
    error: str | None = None
    entry: str = ""  #: its cache entry
    record: dict[str, Any] | None = field(default=None, repr=False)  #: its cache record, to write where missing

    def to_json(self) -> dict[str, Any]:
        """Its fields as a dict, not deep-copied: ``dataclasses.asdict`` copied the cache record (every outcome of
        the key), 0.9 s of a 16-key campaign's rank on one H200 host."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Any, positions: Sequence[int], configs: int) -> KeyResult:
        """A row from :meth:`to_json`'s dict, of a key at one of ``positions``, over ``configs`` configs; keys that
        are not fields are ignored. Read from the key-value store, which another process can write: raises ValueError
        saying what is wrong with a row the tuner does not send (its ``entry`` names a file the rank writes)."""
        if not isinstance(data, dict):
            raise ValueError("not an object")
        names = {f.name for f in fields(cls)}
        row = {k: v for k, v in data.items() if k in names}
        wrong = _wrong_field(row, positions, configs)
        if wrong:
            raise ValueError(f"whose {wrong} is not as the tuner sends it")
        return cls(**row)


def checked_row(item: Any, positions: Sequence[int], configs: int, what: str) -> KeyResult:
    """A key's row as an exchange brought it (every rank reads the same): :class:`ExchangeError` on every rank for
    one the tuner does not send (another process wrote under its keys of the key-value store)."""
    try:
        return KeyResult.from_json(item, positions, configs)
    except ValueError as exc:
        raise ExchangeError(f"{what}: a row {exc}: a process other than the tuner wrote under its keys of the "
                            "key-value store; nothing of it is written or applied") from None


def _wrong_field(row: dict[str, Any], positions: Sequence[int], configs: int) -> str:
    """The first field of a campaign row that is not as the tuner writes it, or ''."""
    def count(value: Any, below: float = math.inf) -> bool:
        return type(value) is int and 0 <= value < below

    checks = {
        "position": type(row.get("position")) is int and row["position"] in positions,
        "state": row.get("state") in KEY_STATES,
        "index": row.get("state") == "failed" and type(row.get("index", -1)) is int
        or count(row.get("index"), configs),
        "unit": count(row.get("unit", 0)), "key": isinstance(row.get("key"), str),
        "config": isinstance(row.get("config", ""), str), "error": row.get("error") is None
        or isinstance(row["error"], str),
        "entry": isinstance(row.get("entry", ""), str) and re.fullmatch(r"(?:[0-9a-f]{20})?", row.get("entry", "")),
        "record": row.get("record") is None or isinstance(row["record"], dict),
        "time_ms": row.get("time_ms") is None or finite_number(row["time_ms"]),
        "margin": row.get("margin") is None or finite_number(row["margin"]),
        "seconds": finite_number(row.get("seconds", 0.0)), "near_tie": type(row.get("near_tie", False)) is bool,
    }
    return next((name for name, ok in checks.items() if not ok), "")


def _pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:+.1f}%"


@dataclass
class Summary:
    """What a campaign decided, the same on every rank: one row per key, in the order of the calls."""

    function: str
    rows: list[KeyResult]
    seconds: float  #: the campaign's wall time on this rank
    units: int  #: how many ranks (or replicas) tuned keys side by side
    #: this rank's own, on the rank that writes its node's cache folder (local rank 0): the decided keys whose record
    #: that folder lacks when the campaign ends (a folder it could not write: read-only, full). A later run there
    #: tunes them again, and ``export`` finds none; the warnings of each write say why
    unwritten: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[KeyResult]:
        """The keys whose tuning failed (every config failed, or a bad call)."""
        return [r for r in self.rows if r.state == "failed"]

    @property
    def choices(self) -> dict[str, int]:
        """key text -> the chosen config's index, for the keys decided."""
        return {r.key: r.index for r in self.rows if r.state != "failed"}

    def to_json(self) -> dict[str, Any]:
        """The summary as plain data: function, seconds, units and one dict per key (its cache record left out)."""
        rows = [{k: v for k, v in r.to_json().items() if k != "record"} for r in self.rows]
        return {"function": self.function, "seconds": self.seconds, "units": self.units, "keys": rows,
                "unwritten": list(self.unwritten)}

    def text(self, name: str | None = None) -> str:
        """A table: every key with its choice, time, margin over the runner-up, how it was decided and where
        (``name``: how its heading names the campaign, default its function)."""
        header = ("key", "state", "unit", "seconds", "ms", "margin", "config")
        body = [(r.key, r.state, str(r.unit), f"{r.seconds:.1f}", ms_text(r.time_ms),
                 ("~" if r.near_tie else "") + _pct(r.margin), r.config if r.state != "failed" else
                 f"ERROR {r.error}") for r in self.rows]
        counts = {s: sum(r.state == s for r in self.rows) for s in KEY_STATES}
        head = (f"campaign {name or self.function}: {len(self.rows)} keys on {self.units} unit(s) in "
                f"{self.seconds:.1f} s ({counts['tuned']} tuned, {counts['cached']} from the cache, "
                f"{counts['failed']} failed)")
        note = ["~ before a margin: the runner-up is within the measured noise (a near tie: either config is about "
                "as fast)"] if any(r.near_tie for r in self.rows) else []
        if self.unwritten:  # (before: nothing here said it, and a later export found nothing)
            note.append(f"NOT SAVED: {len(self.unwritten)} decided key(s) are not in this node's cache folder (it "
                        f"could not be written: the warnings above say why), so a later run tunes them again and "
                        f"export finds none: {', '.join(self.unwritten)}")
        return "\n".join([head, text_table(header, body), *note])


def progress_line(name: str, done: list[KeyResult], total: int, elapsed: float, rounds_done: int,
                  rounds: int) -> str:
    """``[campaign f] 6/18 keys (4 tuned, 2 cached, 0 failed), 72 s, about 144 s left``: the time left is the
    mean time of a round so far times the rounds left."""
    counts = {s: sum(r.state == s for r in done) for s in KEY_STATES}
    left = elapsed / rounds_done * (rounds - rounds_done) if rounds_done else math.nan
    left_text = f", about {left:.0f} s left" if rounds_done < rounds else ""
    return (f"[campaign {name}] {len(done)}/{total} keys ({counts['tuned']} tuned, {counts['cached']} cached, "
            f"{counts['failed']} failed), {elapsed:.0f} s{left_text}")
