"""Why does a ``bench_ag_gemm.py`` cell spread over its repeats? Reads the raw samples every rank wrote
(``DIR/samples_rank*.json``) and writes one table per regime (issue 39, item 5).

A sample of the group is joined across ranks (same cell, repeat, round, regime, contender and occurrence): its
time is the MAX over ranks, its clock the MIN over ranks (the slowest GPU), its arrival skew the spread of the
ranks' host start times (one monotonic clock per host; across hosts it is meaningless and left out). Per cell,
regime and contender:

- **repeats**: the median group time of each repeat, and their spread (max / min - 1): what the benchmark's bar
  judges; **within**: the median over repeats of (p90 - p10) / median of the samples inside one repeat;
- **clock**: the median SM MHz of each repeat (busy, and idle after the barrier), the correlation of time with
  the busy clock, and the share of samples with a power-cap or thermal clock-event reason;
- **order**: the median time of samples late in their round's order over early ones, and the slowest and
  fastest contender to run just before (ratio of medians);
- **skew**: the median arrival skew (us) and its correlation with time.

Flags name what moves with the time: ``clock`` (|r| >= 0.5 or a repeat's clock 3% off another's), ``order``
(late / early off 1 by 3% or more), ``prev`` (slowest / fastest predecessor >= 1.05), ``skew`` (r >= 0.5).

Usage: ``python benchmarks/_ag_diagnose.py DIR`` (``bench_ag_gemm.py`` runs it at the end, on rank 0).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

#: clock-event reason bits (NVML): SW power cap, HW slowdown, SW thermal, HW thermal, HW power brake
POWER_OR_THERMAL = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def _corr(xs: list[float], ys: list[float]) -> float | None:
    try:
        return statistics.correlation(xs, ys) if len(xs) >= 3 else None
    except statistics.StatisticsError:  # a constant series
        return None


def _ratio(a: list[float], b: list[float]) -> float | None:
    return statistics.median(a) / statistics.median(b) if a and b and statistics.median(b) > 0 else None


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def joined(folder: Path) -> list[dict[str, Any]]:
    """The group's samples: every rank's sample of one (cell, repeat, round, regime, contender, occurrence)."""
    files = sorted(folder.glob("samples_rank*.json"))
    ranks = [json.loads(f.read_text()) for f in files]
    one_host = len({r.get("host") for r in ranks}) == 1
    by_key: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for data in ranks:
        seen: dict[tuple, int] = defaultdict(int)
        for s in data["samples"]:
            base = (s["salt"][2], s["salt"][1], s["round"], s["regime"], s["name"])
            seen[base] += 1
            by_key[(*base, seen[base])].append(s)
    out = []
    for (label, rep, rnd, regime, name, _), group in by_key.items():
        clocks = [s["mhz"] for s in group if s.get("mhz") is not None]
        idle = [s["idle_mhz"] for s in group if s.get("idle_mhz") is not None]
        reasons = [s["reasons"] for s in group if s.get("reasons") is not None]
        starts = [s["start_ns"] for s in group]
        out.append({"cell": label, "repeat": rep, "round": rnd, "regime": regime, "name": name,
                    "pos": group[0]["pos"], "prev": group[0]["prev"], "ms": max(s["ms"] for s in group),
                    "mhz": min(clocks) if clocks else None, "idle_mhz": min(idle) if idle else None,
                    "limited": any(r & POWER_OR_THERMAL for r in reasons) if reasons else None,
                    "skew_us": (max(starts) - min(starts)) / 1e3 if one_host and len(group) > 1 else None,
                    "ranks": len(group)})
    return out


def figures(samples: list[dict[str, Any]], contenders: int) -> dict[str, Any]:
    """The diagnosis of one (cell, regime, contender)."""
    reps = sorted({s["repeat"] for s in samples})
    per_rep = {r: [s["ms"] for s in samples if s["repeat"] == r] for r in reps}
    medians = [statistics.median(v) for v in per_rep.values()]
    within = statistics.median((_quantile(v, 0.9) - _quantile(v, 0.1)) / statistics.median(v)
                               for v in per_rep.values())
    clocked = [s for s in samples if s["mhz"] is not None]
    mhz_rep = [statistics.median([s["mhz"] for s in clocked if s["repeat"] == r] or [0.0]) or None for r in reps]
    idle = [s["idle_mhz"] for s in samples if s["idle_mhz"] is not None]
    limited = [s["limited"] for s in samples if s["limited"] is not None]
    third = max(1, contenders // 3)
    early = [s["ms"] for s in samples if s["pos"] < third]
    late = [s["ms"] for s in samples if s["pos"] >= contenders - third]
    prevs: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        prevs[s["prev"] or "(first)"].append(s["ms"])
    prev_medians = {p: statistics.median(v) for p, v in prevs.items() if len(v) >= 2}
    slow = max(prev_medians, key=prev_medians.get, default=None)
    fast = min(prev_medians, key=prev_medians.get, default=None)
    skewed = [s for s in samples if s["skew_us"] is not None]
    found = {
        "repeats_ms": medians, "spread": max(medians) / min(medians) - 1, "within": within, "mhz_by_repeat": mhz_rep,
        "idle_mhz": statistics.median(idle) if idle else None,
        "r_clock": _corr([s["ms"] for s in clocked], [s["mhz"] for s in clocked]),
        "limited_share": sum(limited) / len(limited) if limited else None,
        "late_over_early": _ratio(late, early),
        "prev_slow": slow, "prev_fast": fast,
        "prev_ratio": prev_medians[slow] / prev_medians[fast] if slow and fast and prev_medians[fast] > 0 else None,
        "skew_us": statistics.median(s["skew_us"] for s in skewed) if skewed else None,
        "r_skew": _corr([s["ms"] for s in skewed], [s["skew_us"] for s in skewed]),
    }
    clocks = [m for m in mhz_rep if m]
    flags = []
    if (found["r_clock"] is not None and abs(found["r_clock"]) >= 0.5) or (
            clocks and max(clocks) / min(clocks) - 1 >= 0.03):
        flags.append("clock")
    if found["late_over_early"] is not None and abs(found["late_over_early"] - 1) >= 0.03:
        flags.append("order")
    if found["prev_ratio"] is not None and found["prev_ratio"] >= 1.05:
        flags.append("prev")
    if found["r_skew"] is not None and found["r_skew"] >= 0.5:
        flags.append("skew")
    found["flags"] = flags
    return found


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def diagnose(folder: Path) -> str:
    """The markdown diagnosis of the samples in ``folder``."""
    samples = joined(folder)
    lines = [f"# Where the spread comes from ({folder})", "",
             "Group sample = MAX over ranks of the time, MIN of the SM clock; see benchmarks/_ag_diagnose.py.", ""]
    for regime in ("latency", "steady"):
        mine = [s for s in samples if s["regime"] == regime]
        if not mine:
            continue
        lines += [f"## {regime}", "", "| cell | contender | repeats ms | spread | within | MHz per repeat (idle) | "
                  "r(ms, MHz) | power/thermal | late/early | prev slow/fast (x) | skew us, r | flags |",
                  "|---" * 12 + "|"]
        for cell in sorted({s["cell"] for s in mine}):
            here = [s for s in mine if s["cell"] == cell]
            names = sorted({s["name"] for s in here})
            for name in names:
                f = figures([s for s in here if s["name"] == name], len(names))
                lines.append(
                    f"| {cell} | {name} | {', '.join(f'{m:.3f}' for m in f['repeats_ms'])} | {f['spread']:.1%} | "
                    f"{f['within']:.1%} | {', '.join(_f(m, '.0f') for m in f['mhz_by_repeat'])} "
                    f"({_f(f['idle_mhz'], '.0f')}) | {_f(f['r_clock'], '.2f')} | {_f(f['limited_share'], '.0%')} | "
                    f"{_f(f['late_over_early'], '.3f')} | {f['prev_slow']}/{f['prev_fast']} "
                    f"({_f(f['prev_ratio'], '.3f')}) | {_f(f['skew_us'], '.0f')}, {_f(f['r_skew'], '.2f')} | "
                    f"{' '.join(f['flags']) or '-'} |")
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    text = diagnose(folder)
    (folder / "diagnosis.md").write_text(text)
    print(text)
