"""Read a side-by-side validation of the screening rounds' regime margin (``validate_search.py --regime-margins``):
per margin, how many choices the on-host judge (``ratio_here``) and the corpus (``ratio``) put within 1.02, the
worst, the race's rounds (3 or fewer: the race ended in its screening rounds, with no settled block) and the seconds
per key; then each shape's choices side by side.

Usage: ``python3 benchmarks/margin_report.py FILE.json [...]``
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def judged(values: list[float | None]) -> str:
    got = sorted(v for v in values if v is not None)
    if not got:
        return "not judged"
    within = sum(v <= 1.02 for v in got)
    return f"{within} of {len(got)} within 1.02, median {got[len(got) // 2]:.3f}, worst {got[-1]:.3f}"


def here_ratio(row: dict[str, Any]) -> str:
    value = row.get("ratio_here")
    return "-" if value is None else f"{value:.3f}"


def report(path: Path) -> None:
    data: dict[str, Any] = json.loads(path.read_text())
    arms: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in data["rows"]:
        arms[row.get("regime_margin")].append(row)
    print(f"{path.name}: {data.get('family')} on {data.get('gpu')}")
    for margin, rows in sorted(arms.items(), key=lambda kv: str(kv[0])):
        seconds = sorted(r["seconds"] for r in rows)
        short = sum(r.get("rounds", 0) <= 3 for r in rows)
        print(f"  margin {margin}: judged here {judged([r.get('ratio_here') for r in rows])}; by the corpus "
              f"{judged([r.get('ratio') for r in rows])}; races ended in the screening rounds {short} of {len(rows)}; "
              f"seconds per key {seconds[0]:.2f}-{seconds[-1]:.2f} (median {seconds[len(seconds) // 2]:.2f})")
    for m in sorted({r["m"] for r in data["rows"]}, key=str):
        cells = []
        for margin, rows in sorted(arms.items(), key=lambda kv: str(kv[0])):
            here = [r for r in rows if r["m"] == m]
            cells.append(f"{margin}: " + ", ".join(f"{r['choice']} {here_ratio(r)} ({r.get('rounds')} rounds)"
                                                   for r in here))
        print(f"  M={m}: " + " | ".join(cells))


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        report(Path(arg))
