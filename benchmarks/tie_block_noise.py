"""The race's near-tie blocks under noise, replayed on CPU (``measure/race.py``, "Near-ties"): what they cost in
settled samples, and which leader they choose.

Each trial is the end of a search's race timed on the device, as the library runs it for a fast call: 6 leaders
settle (``SETTLED_LEADERS_FAST``), 8 settled rounds (``SETTLED_CYCLES``), up to 2 near-tie blocks (``TIE_BLOCKS``),
through the library's own :class:`~triton_dist_tune.measure.race.Race`, with fresh noise drawn for every sample.
The leaders' true times per call, by scenario:

- ``m1024``: 1.000, 1.002, 1.005, 1.007, 1.020, 1.040 (GEMM M = 1024 on one H200: the four ``128x256x32`` variants
  read within 0.7% of each other, ``results/session_h200_27`` call 5);
- ``spread``: 1.000, 1.003, 1.006, 1.010, 1.020, 1.030;
- ``pair``: 1.000, 1.015, then four clearly behind (1.06-1.09): the case the tie blocks were made for;
- ``six``: 1.000, 1.002, 1.005, 1.007, 1.010, 1.015 (six leaders within 1.5%: on one H200, GEMM M = 1024's races of
  18-26 rounds, ``results/session_h200_28``).

Noise models (each sample times ``1 + noise``): ``gauss1``, ``gauss2``, ``gauss5``, ``gauss10`` (Gaussian 1-10%; the
settled samples of races on H200s spread about 1%) and ``spiked`` (2% Gaussian, 1 sample in 20 times 1.3). Per
scenario and noise, over ``--trials`` seeds: the chosen leader's true time over the best's (mean, share over 1.01),
the share of races that added a tie block, and the settled samples taken per race.

Launch: ``python benchmarks/tie_block_noise.py [--trials 2000]`` (CPU only). To compare with another library, copy
this file into that tree's ``benchmarks/`` and run it there (it imports the library of the tree it lies in).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton_dist_tune.measure.race import Race, RacePlan  # noqa: E402

SCENARIOS = {"m1024": [1.000, 1.002, 1.005, 1.007, 1.020, 1.040],
             "spread": [1.000, 1.003, 1.006, 1.010, 1.020, 1.030],
             "pair": [1.000, 1.015, 1.06, 1.07, 1.08, 1.09],
             "six": [1.000, 1.002, 1.005, 1.007, 1.010, 1.015]}
NOISE = {"gauss1": (0.01, 0.0), "gauss2": (0.02, 0.0), "gauss5": (0.05, 0.0), "gauss10": (0.10, 0.0),
         "spiked": (0.02, 0.05)}


def trial(rng: random.Random, true: list[float], noise: str) -> tuple[float, bool, int]:
    """(the chosen leader's true time over the best's, whether a tie block was added, settled samples taken)."""
    sigma, spikes = NOISE[noise]

    def sample(i: int) -> float:
        t = true[i] * 0.05 * (1 + rng.gauss(0, sigma))  # 0.05 ms per call: a fast call, 6 leaders settle
        return t * (1.3 if rng.random() < spikes else 1.0)

    race = Race(list(range(len(true))), RacePlan(max_rounds=10, min_rounds=3, final_top=3, final_rounds=8,
                                                 final_top_fast=6, fast_below_ms=0.1, tie_blocks=2, levels=True,
                                                 seed=str(rng.random())))
    while not race.finished(0.0):
        for i in race.order():
            race.record(i, [sample(i)])
        race.end_round()
    chosen = race.winner()
    assert chosen is not None
    settled = sum(len(e.settled) for e in race.entrants.values())
    return true[chosen] / min(true), race.tie_blocks > 0, settled


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2000)
    args = p.parse_args()
    for scenario, true in SCENARIOS.items():
        for noise in NOISE:
            rng = random.Random(f"{scenario}/{noise}")
            got = [trial(rng, true, noise) for _ in range(args.trials)]
            ratios = [r for r, _, _ in got]
            print(f"{scenario:6s} {noise:6s} | chosen mean {statistics.mean(ratios):.4f}, over 1.01 in "
                  f"{100 * sum(r > 1.01 for r in ratios) / len(ratios):4.1f}% | tie block in "
                  f"{100 * sum(t for _, t, _ in got) / len(got):4.1f}% | settled samples "
                  f"{statistics.mean(s for _, _, s in got):.1f} per race")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
