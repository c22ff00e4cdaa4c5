"""How warm-up probes read configs' device time, from a validation run with ``validate_search.py --record-probes``:
per shape, each probe over the config's device time in the corpus (its ratio times the corpus best's ms), split by
the probe's calls (one call when the config warmed up before it took ``timing.PROBE_ONE_CALL_MS`` or more per call,
else ``timing.PROBE_CALLS``), and the near-best configs (within ``--near`` of the corpus's best) that a tuning
screened by their probe alone. Where the rows hold the screening samples too (``samples``), each tuning's batches
whose samples read, at the median, more than ``--phase`` apart from the tuning's median of sample / device time: a
phase of the machine (a whole batch off) rather than a config's own mode (single samples off).

Usage: ``python3 benchmarks/probe_report.py --corpus benchmarks/results/corpus FILE.json [...]``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the package, from this checkout

import argparse  # noqa: E402
import json  # noqa: E402
from collections import defaultdict  # noqa: E402
from typing import Any  # noqa: E402

from replay_search import landscapes  # noqa: E402

from triton_dist_tune.measure.timing import PROBE_CALLS as CALLS  # noqa: E402
from triton_dist_tune.measure.timing import PROBE_ONE_CALL_MS as ONE_CALL_MS  # noqa: E402


def quantiles(values: list[float]) -> str:
    if not values:
        return "none"
    v = sorted(values)
    at = lambda q: v[min(len(v) - 1, int(q * len(v)))]  # noqa: E731
    return f"n={len(v)} median {at(0.5):.2f} (10% {at(0.1):.2f}, 90% {at(0.9):.2f}, max {v[-1]:.2f})"


def batch_phases(samples: list[list[Any]], device: dict[str, float], apart: float) -> dict[str, Any]:
    """Of a tuning's screening samples ([text, ms, batch, seconds, place]), the median sample / device time and the
    batches (of 3 samples or more) whose own median reads more than ``apart`` from it: {"median", "off": [(batch,
    its median over the tuning's, samples)]}; {} without samples."""
    ratios = defaultdict(list)
    for text, ms, batch, *_ in samples:
        if ms and text in device:
            ratios[batch].append(ms / device[text])
    every = sorted(r for values in ratios.values() for r in values)
    if not every:
        return {}
    middle = every[len(every) // 2]
    off = []
    for batch in sorted(ratios):
        values = sorted(ratios[batch])
        own = values[len(values) // 2] / middle
        if len(values) >= 3 and abs(own - 1) > apart:
            off.append((batch, own, len(values)))
    return {"median": middle, "off": off}


def report(path: Path, known: dict[str, Any], near: float, phase: float) -> None:
    data = json.loads(path.read_text())
    by_m: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in data["rows"]:
        if "probes" in row:
            by_m[row["m"]].append(row)
    for m, rows in by_m.items():
        land = known.get(rows[0]["corpus_key"])
        if land is None:
            print(f"{path.name} M={m}: no corpus landscape")
            continue
        device = {n: r * land["best_ms"] for n, r in land["ratios"].items()}
        split: dict[int, list[float]] = defaultdict(list)
        lost, gaps = [], []
        for row in rows:
            for text, previous, ms, *timing in row["probes"]:
                if ms and text in device:
                    split[1 if previous >= ONE_CALL_MS else CALLS].append(ms / device[text])
                if timing and timing[0] is not None:
                    gaps.append(1e3 * timing[0])
            calls = {text: 1 if previous >= ONE_CALL_MS else CALLS for text, previous, *_ in row["probes"]}
            lost += [f"{t} {land['ratios'][t]:.3f} ({calls.get(t, '?')}-call probe)"
                     for t in row["probed"] if land["ratios"].get(t, 9.0) <= near]
        print(f"{path.name} M={m} (corpus best {land['best_ms']:.4f} ms): probe / device time, one-call probes "
              f"{quantiles(split[1])}; {CALLS}-call probes {quantiles(split[CALLS])}")
        if gaps:
            print(f"  host ms between one config's warm-up and the next: {quantiles(gaps)}")
        for row in rows:
            phases = batch_phases(row.get("samples", []), device, phase)
            if phases.get("off"):
                off = ", ".join(f"batch {b} x{r:.3f} (n={n})" for b, r, n in phases["off"])
                print(f"  tuning {row['tuning']}: batches read apart from its median sample / device time "
                      f"{phases['median']:.3f}: {off}")
        stand_ins = sum(len(r["probed"]) for r in rows)
        print(f"  screened by their probe alone: {stand_ins} in {len(rows)} tunings; within {near} of the corpus best: "
              f"{len(lost)}" + (": " + "; ".join(lost) if lost else ""))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--near", type=float, default=1.05)
    p.add_argument("--phase", type=float, default=0.05, help="a batch this far off the tuning's median is a phase")
    p.add_argument("files", nargs="+", type=Path)
    args = p.parse_args()
    known = landscapes(args.corpus)
    for path in args.files:
        report(path, known, args.near, args.phase)
    return 0


if __name__ == "__main__":
    sys.exit(main())
