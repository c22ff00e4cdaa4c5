"""Replay the search over recorded exhaustive screenings, with no GPU: how close its finalists come to the best.

Reads an oracle file of ``bench_search.py`` (every kept config's device time at each shape: ``ratios``, each
config's time over the best), replays :class:`~triton_dist_tune.measure.search.PatternSearch` over it with
``--seeds`` seeds and ``--noise`` relative Gaussian noise on every screened time (the search sees noisy times;
the judge the recorded ones), and prints, per shape, the median and worst ratio of the best finalist (the race
then chooses among the finalists), how many seeds left the best config more than 2% and 3% behind, and the mean
number of configs screened.

Launch: ``python benchmarks/replay_search.py benchmarks/results/search/h100_call4/oracle.json [--noise 0.02]
[--seeds 100] [--plan finalists=8]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton_dist_tune.measure.search import SearchPlan, simulate  # noqa: E402


@dataclass(frozen=True)
class Replayed:
    """The search's best finalist over the seeds of one shape: its ratio to the best, and configs screened."""

    kept: int
    median: float
    worst: float
    over_2pct: int
    over_3pct: int
    screened: float


def replay(oracle: dict, plan: dict, noise: float, seeds: int) -> dict[str, Replayed]:
    """{"space M": how the search's best finalist did over ``seeds`` seeds}."""
    out = {}
    for entry in oracle.values():
        ratios = dict(entry["ratios"])
        specs = sorted(ratios)
        space = [{"config": s} for s in specs]
        found, screened = [], []
        for seed in range(seeds):
            rng = random.Random(seed)
            noisy = {i: ratios[s] * (1 + noise * rng.gauss(0, 1)) for i, s in enumerate(specs)}
            finalists, times = simulate(space, range(len(specs)), SearchPlan(seed=f"k{seed}", **plan), noisy.get)
            found.append(min(ratios[specs[i]] for i in finalists))
            screened.append(len(times))
        out[f"{entry['space']} M={entry['m']}"] = Replayed(
            len(specs), statistics.median(found), max(found), sum(f > 1.02 for f in found),
            sum(f > 1.03 for f in found), statistics.mean(screened))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("oracle", type=Path)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--plan", action="append", default=[], metavar="FIELD=N",
                        help="a SearchPlan field to override (leaders, stage_cap, max_measured, finalists, initial)")
    args = parser.parse_args()
    plan = {}
    for item in args.plan:
        name, _, value = item.partition("=")
        if name not in {"leaders", "stage_cap", "max_measured", "finalists", "initial"} or not value.isdigit():
            parser.error(f"--plan takes FIELD=N with a SearchPlan field, not {item!r}")
        plan[name] = int(value)
    for shape, r in sorted(replay(json.loads(args.oracle.read_text()), plan, args.noise, args.seeds).items()):
        print(f"{shape}: best finalist / best: median {r.median:.3f}, worst {r.worst:.3f}, over 1.02 in "
              f"{r.over_2pct} of {args.seeds} seeds, over 1.03 in {r.over_3pct}; {r.screened:.0f} of {r.kept} "
              "configs screened")

if __name__ == "__main__":
    main()
