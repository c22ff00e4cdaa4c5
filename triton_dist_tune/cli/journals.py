"""``list`` and ``show`` of tunings never finished: journals, no decision (:mod:`~triton_dist_tune.faults.unfinished`).

A first tuning cut short leaves only journals: ``list`` names it under the decisions and ``show NAME`` prints what
its journals recorded, per config, as the next attempt will start from it (measured configs reused, failed ones
left out, suspects measured once more).
"""

from __future__ import annotations

import time
from typing import Any

from ..disk import decisions as dec
from ..disk.logs import ms_text, text_table
from ..faults.unfinished import Unfinished
from .common import _clip, _emit_json

#: the title of ``list``'s section of unfinished tunings
TITLE = "tunings never finished (journals, no decision: cut short or in flight; 'show NAME' for their records):"


def list_lines(tunings: list[Unfinished], width: int) -> list[str]:
    """``list``'s section: one line per unfinished tuning (empty when there is none)."""
    if not tunings:
        return []
    now = time.time()
    rows = [[t.entry[:8] + (f"@{t.part}" if t.part else ""), t.function, t.ranks_text(), str(t.attempts),
             t.summary() or "no records", dec.age_text(now - t.modified)] for t in tunings]
    table = text_table(["name", "function", "ranks", "attempts", "configs", "last record"], rows)
    return [_clip(TITLE, width)] + [_clip("  " + line, width) for line in table.splitlines()]


def to_json(tuning: Unfinished) -> dict[str, Any]:
    """An unfinished tuning as plain data (``list --json`` and ``show --json``)."""
    return {"name": tuning.name, "function": tuning.function, "entry": tuning.entry, "unfinished": True,
            "journals": [str(p) for p in tuning.journals], "ranks": tuning.ranks, "groups": tuning.groups,
            "attempts": tuning.attempts,
            "modified": tuning.modified, "damaged": tuning.damaged,
            "configs": [vars(c) for c in tuning.configs()]}


def show(tuning: Unfinished, as_json: bool) -> int:
    """``show`` of an unfinished tuning: its journals, then per config what they recorded."""
    if as_json:
        _emit_json(to_json(tuning))
        return 0
    facts = [("unfinished", f"{tuning.name}: journals and no decision (a tuning cut short, or in flight)"),
             ("function", tuning.function), ("journals", ", ".join(p.name for p in tuning.journals)),
             ("ranks", tuning.ranks_text()), ("attempts", str(tuning.attempts)),
             ("last record", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(tuning.modified))
              + f" ({dec.age_text(time.time() - tuning.modified)} ago)")]
    if tuning.damaged:
        facts.append(("damaged", "; ".join(tuning.damaged) + " (skipped)"))
    width = max(len(k) for k, _ in facts)
    print("\n".join(f"{k.rjust(width)}: {v}" for k, v in facts))
    print()
    configs = tuning.configs()
    print(text_table(["#", "state", "median ms", "config"], [[str(c.index), c.state, ms_text(c.time), c.config]
                                                        for c in configs]))
    notes = [c for c in configs if c.error]
    if notes:
        print("\nnotes:")
        for c in notes:
            print(f"  config {c.index} ({c.state}): {c.error}")
    print("\nThe next attempt starts from these records: measured and stopped configs are reused, failed ones left "
          "out, the others measured (again); 'clear' removes the journals, and the next attempt starts afresh.")
    return 0
