"""Compare runs of ``diagnose_collective_noise.py`` (each its own process): does a method's ranking repeat?

For every case and method (eager, queued) and statistic (median, least of a config's group samples), each run's
best config is read in every run (its time over that run's best): 1.000 everywhere means the method ranks the
leaders alike in every process. Also per case: how the eager time follows the host's launch time (Pearson r over
samples) and the ranks' arrival skew, the queued samples flagged late, and the SM clock's range.

    python benchmarks/_noise_report.py noise_r1.json noise_r2.json noise_r3.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def pearson(x: list[float], y: list[float]) -> float:
    if len(x) < 3 or statistics.pstdev(x) == 0 or statistics.pstdev(y) == 0:
        return 0.0
    return statistics.correlation(x, y)


def table(runs: list[dict[str, Any]], key: str) -> list[str]:
    lines = [f"### {key}", "", "| method | statistic | each run's best, read in every run | worst |",
             "| --- | --- | --- | --- |"]
    for method in ("eager", "queued"):
        for stat_name, stat in (("median", statistics.median), ("least", min)):
            per_run = []
            for run in runs:
                samples = run["cases"][key]["samples"]
                per_run.append({n: stat([max(s[f"{method}_ms"]) for s in rows]) for n, rows in samples.items()})
            common = set.intersection(*(set(t) for t in per_run))
            cells, worst = [], 1.0
            for t in per_run:
                best = min(common, key=t.get)
                reads = [u[best] / min(u[n] for n in common) for u in per_run]
                worst = max(worst, *reads)
                cells.append(f"`{best}` " + " / ".join(f"{r:.3f}" for r in reads))
            lines.append(f"| {method} | {stat_name} | {'; '.join(cells)} | {worst:.3f} |")
    lines.append("")
    for i, run in enumerate(runs, 1):
        rows = [s for v in run["cases"][key]["samples"].values() for s in v]
        eager = [max(s["eager_ms"]) for s in rows]
        host = [max(s["eager_host_ms"]) for s in rows]
        skew = [1e3 * (max(s["began"]) - min(s["began"])) for s in rows]
        clocks = [c for s in rows for c in s["sm_mhz"] if c > 0]
        late = sum(max(s["late"]) for s in rows)
        lines.append(f"- run {i}: eager against host launch time r = {pearson(host, eager):.2f} (host "
                     f"{statistics.median(host):.4f} ms/call, device {statistics.median(eager):.4f}), against arrival "
                     f"skew r = {pearson(skew, eager):.2f} (median {statistics.median(skew):.2f} ms); queued samples "
                     f"late {late:.0f} of {len(rows)}; SM clock "
                     + (f"{min(clocks):.0f}-{max(clocks):.0f} MHz" if clocks else "not read"))
    return lines + [""]


def main() -> int:
    runs = [json.loads(Path(f).read_text()) for f in sys.argv[1:]]
    if not runs:
        print(__doc__)
        return 2
    print(f"## Group-time noise: {len(runs)} runs, {runs[0]['world']} ranks of {runs[0]['gpu']}\n")
    for key in runs[0]["cases"]:
        if all(key in r["cases"] for r in runs):
            print("\n".join(table(runs, key)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
