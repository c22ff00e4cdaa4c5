"""The race's placement rule under noise, replayed on CPU (``measure/race.py``, "Placements"): does it raise leaders
that are not slow at any placement, and does it choose better where one is?

Each trial is the end of a race timed on the device as the library runs it: 6 leaders, one screening round, then the
settled block of 8 rounds (settled round j at output placement j mod 4), through the library's own
:class:`~triton_dist_tune.measure.race.Race`, with fresh noise drawn for every sample. The leaders' true times per
call: 1.000, 1.003, 1.006, 1.010, 1.020, 1.030 (near-ties, where a rule can change the choice).

- ``flat``: no leader depends on its placement. A raised leader is a false firing.
- ``slow0``: the fastest leader reads 5% slower at one of its 4 placements (drawn per trial, both its samples
  there), so its mean over placements is 1.0125: the true best is then the 1.003 leader. The rule's estimator (each
  placement's least sample against the median of those) was chosen on this scenario: a training figure.
- ``slow1x2`` (held out: set before any run of it): the 1.003 leader reads 3% slower at two of its 4 placements
  (its mean 1.018); the true best stays the 1.000 leader.

Noise models (each sample times ``1 + noise``): ``gauss1``, ``gauss2``, ``gauss5``, ``gauss10`` (Gaussian, sigma
1/2/5/10%; the settled samples of the MoE campaign's races on H200s spread about 1%), and
``spiked`` (2% Gaussian, and 1 sample in 20 times 1.3). Per scenario, noise and rule (4 placements against 1, the
library before), over ``--trials`` seeds: how often a leader was raised, and the chosen leader's true mean over its
placements over the best's (mean and the share over 1.01).

Launch: ``python benchmarks/placement_rule_noise.py [--trials 2000]`` (CPU only, a few seconds).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton_dist_tune.measure.race import Race, RacePlan  # noqa: E402

TRUE = [1.000, 1.003, 1.006, 1.010, 1.020, 1.030]
SLOW, PLACEMENTS, SETTLED = 1.05, 4, 8
NOISE = {"gauss1": (0.01, 0.0), "gauss2": (0.02, 0.0), "gauss5": (0.05, 0.0), "gauss10": (0.10, 0.0),
         "spiked": (0.02, 0.05)}


def trial(rng: random.Random, scenario: str, noise: str, placements: int) -> tuple[bool, float]:
    """(whether a leader was raised, the chosen leader's true mean over placements over the best's)."""
    sigma, spikes = NOISE[noise]
    slow = {"flat": (None, 1.0, set()), "slow0": (0, SLOW, {rng.randrange(PLACEMENTS)}),
            "slow1x2": (1, 1.03, set(rng.sample(range(PLACEMENTS), 2)))}
    who, factor, slow_at = slow[scenario]

    def sample(i: int, placement: int) -> float:
        t = TRUE[i] * (factor if i == who and placement in slow_at else 1.0)
        t *= 1 + rng.gauss(0, sigma)
        return t * (1.3 if rng.random() < spikes else 1.0)

    race = Race(list(range(len(TRUE))), RacePlan(max_rounds=12, min_rounds=1, final_top=len(TRUE),
                                                 final_rounds=SETTLED, seed=str(rng.random()), levels=True,
                                                 placements=placements))
    for i in race.order():
        race.record(i, [sample(i, 0)])
    race.end_round()
    for r in range(SETTLED):
        placement = r % PLACEMENTS  # where the sample truly lies: one graph per placement, or the first alone
        for i in race.order():
            race.record(i, [sample(i, placement if placements > 1 else 0)])
        race.end_round()
    truth = [t * (1 + (factor - 1) * len(slow_at) / PLACEMENTS if i == who else 1) for i, t in enumerate(TRUE)]
    chosen = race.winner()
    assert chosen is not None
    return bool(race.slower_levels()), truth[chosen] / min(truth)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2000)
    args = p.parse_args()
    for scenario in ("flat", "slow0", "slow1x2"):
        for noise in NOISE:
            line = []
            for placements in (PLACEMENTS, 1):
                rng = random.Random(f"{scenario}/{noise}")  # both rules see the same draws where they can
                got = [trial(rng, scenario, noise, placements) for _ in range(args.trials)]
                raised = sum(r for r, _ in got) / len(got)
                ratios = [x for _, x in got]
                over = 100 * sum(x > 1.01 for x in ratios) / len(ratios)
                line.append(f"{placements} placement(s): raised {100 * raised:4.1f}%, chosen mean "
                            f"{sum(ratios) / len(ratios):.4f}, over 1.01 in {over:4.1f}%")
            print(f"{scenario:7s} {noise:7s} | " + " | ".join(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
