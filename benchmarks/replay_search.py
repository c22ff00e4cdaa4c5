"""Replay the search over recorded exhaustive screenings, with no GPU: how close its finalists come to the best.

Reads an oracle file of ``bench_search.py`` (every kept config's device time at each shape: ``ratios``, each
config's time over the best), replays :class:`~triton_dist_tune.measure.search.PatternSearch` over it with
``--seeds`` seeds and ``--noise`` relative Gaussian noise on every screened time (the search sees noisy times;
the judge the recorded ones), and prints, per shape, the median and worst ratio of the best finalist (the race
then chooses among the finalists) and the mean number of configs screened.

Launch: ``python benchmarks/replay_search.py benchmarks/results/search/h100_call4/oracle.json [--noise 0.02]
[--seeds 20] [--leaders 4]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton_dist_tune.measure.search import SearchPlan, simulate  # noqa: E402


def replay(oracle: dict, plan: dict, noise: float, seeds: int) -> dict[int, tuple[float, float, float]]:
    """{M: (median ratio, worst ratio, mean configs screened)} of the search's best finalist."""
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
        out[entry["m"]] = (statistics.median(found), max(found), statistics.mean(screened))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("oracle", type=Path)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--leaders", type=int, default=None)
    args = parser.parse_args()
    plan = {} if args.leaders is None else {"leaders": args.leaders}
    for m, (med, worst, count) in sorted(replay(json.loads(args.oracle.read_text()), plan, args.noise,
                                                args.seeds).items()):
        print(f"M={m}: best finalist / best: median {med:.3f}, worst {worst:.3f}; {count:.0f} configs screened")


if __name__ == "__main__":
    main()
