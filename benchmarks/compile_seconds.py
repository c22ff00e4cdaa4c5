"""Do the configs that compile longest ever read near their key's choice? A campaign's rank log, read.

The rank log says each compile a pool ran (``compile of config I: S s (needed|guess|next key)``,
``triton_dist_tune/measure/precompile.py`` ``log_compile``). This script takes each config's longest compile in a
campaign (its kernels are compiled once, at the first key that needs or guesses them; later keys find them in
Triton's cache), and sets it beside how the config read: its first screening at each key over that key's choice.
It prints the compile seconds' quantiles, the longest compile of a config that read within ``--near`` (and within
1.10) of some key's choice, and the longest compiles with the best such ratio each config reached (- where it was
never screened). The question it answers is the straggler rule's (``function/searched.py`` ``contenders``): a
deferred config still compiling when the search has nothing else to screen is waited for unless the model puts it
far behind the finalists; the longest waits were for 256 x 256 tiles whose compiles take 4-5 s.

Launch: ``python benchmarks/compile_seconds.py LOG [LOG ...] [--near 1.02]``, each LOG a ``campaign_rank.log.gz``
(or a plain rank log) of a campaign run by a library that logs its compiles (b8f96f5 on). CPU only.
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections import defaultdict
from pathlib import Path

COMPILE = re.compile(r"\] compile of config (\d+): ([0-9.]+) s \(")
#: a config's time on this rank, in the rank log's words before and after they said what each time is
MEASURED = re.compile(r"key=\(+(\d+),.*\] config (\d+) measured: (?:own |group time .*?; this rank's own time )"
                      r"([0-9.]+) ms")
DECISION = re.compile(r"key=\(+(\d+),.*\] decision: config \d+ .*?group time ([0-9.]+) ms")


def read(log: Path) -> tuple[dict[int, float], dict[int, float]]:
    """Each config's longest compile (s), and the best ratio of its first screening at a key to that key's
    choice."""
    opener = gzip.open if log.suffix == ".gz" else open
    compiled: dict[int, float] = defaultdict(float)
    first: dict[tuple[str, int], float] = {}
    choice: dict[str, float] = {}
    with opener(log, "rt") as lines:
        for line in lines:
            if m := COMPILE.search(line):
                compiled[int(m[1])] = max(compiled[int(m[1])], float(m[2]))
            elif m := MEASURED.search(line):
                first.setdefault((m[1], int(m[2])), float(m[3]))
            elif m := DECISION.search(line):
                choice[m[1]] = float(m[2])
    best: dict[int, float] = {}
    for (key, index), ms in first.items():
        if key in choice:
            best[index] = min(best.get(index, float("inf")), ms / choice[key])
    return dict(compiled), best


def report(log: Path, near: float) -> str:
    compiled, best = read(log)
    if not compiled:
        return f"{log}: no compile lines (a library before b8f96f5?)"
    seconds = sorted(compiled.values())
    n = len(seconds)

    def longest_within(bar: float) -> str:
        within = [(compiled.get(i, 0.0), i) for i, ratio in best.items() if ratio <= bar]
        return f"{max(within)[0]:.2f} s (config {max(within)[1]})" if within else "-"

    tail = sorted(((s, i) for i, s in compiled.items()), reverse=True)[:10]
    shown = ", ".join(f"{s:.2f} s: {i} ({best[i]:.2f}x)" if i in best else f"{s:.2f} s: {i} (-)" for s, i in tail)
    return (f"{log}: {n} configs compiled; seconds p50 {seconds[n // 2]:.2f}, p90 {seconds[int(n * 0.9)]:.2f}, "
            f"p99 {seconds[int(n * 0.99)]:.2f}, max {seconds[-1]:.2f}\n"
            f"  the longest compile of a config within {near} of a key's choice: {longest_within(near)}; "
            f"within 1.10: {longest_within(1.10)}\n  the longest compiles (config, its best read over the choice): "
            f"{shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--near", type=float, default=1.02)
    args = parser.parse_args()
    for log in args.logs:
        print(report(log, args.near))


if __name__ == "__main__":
    main()
