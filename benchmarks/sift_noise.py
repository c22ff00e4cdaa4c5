"""The sift under fresh noise, replayed on CPU: heavy calls' races with and without it (``measure/race.py``, "The
sift"), beside a random pick among the screening's leaders.

Each trial is one race of a heavy call (1.5 ms per call) run by the library's own
:class:`~triton_dist_tune.measure.race.Race` with ``autotune``'s default steady plan (``TuneOptions().plan``),
fresh noise drawn for every sample. Landscapes (true times over the best):

- ``gemm40``: 40 configs shaped like bench_fidelity.py's GEMM at N = 4096, K = 14336 on one H200 (the sift's
  training family): two best within 0.3%, six at 1.08-1.12, the rest 1.2-3.0;
- ``gemm40_power``: the same, its two best read 6% slower in screening samples than settled ones (the power
  limiter's misranking the sift was made for: ``results/session_h200_46``; a model, not a recording);
- ``flat24`` (held out: no GPU family chose anything here): 24 configs, five within 3% (1.000, 1.006, 1.012, 1.02,
  1.03), the rest 1.05-2.0; no bias.

Noise: ``gauss2``, ``gauss5``, ``gauss10`` (Gaussian 2-10% per sample) and ``spiked`` (5% Gaussian, 1 sample in 20
times 1.3). Every race gets each config's warm-up probe (its true time with the sample's Gaussian noise), which
the defaults' ``far_behind`` reads. Tuners: ``sift`` (the defaults), ``after2`` (the sift after 2 screening rounds,
not 1: the default before the fiftieth session), ``keep3`` (the sift keeping 3 leaders, the
default before the forty-eighth session), ``nofar`` (no config leaving after one round by its sample and probe:
since the sift follows one screening round it reads as ``sift`` here, whose 12 leaders are taken after that round),
``nosift`` (``final_top_heavy`` 0: 3 leaders after 3 screening
rounds, as before the forty-sixth session), ``random3`` (a uniform pick among the 3 best after the first 3
screening rounds of the ``nosift`` race: what the screening alone knows) and, with ``--variants``, ``sift2_7`` (2
sift rounds, 7 settled in all) and ``sift1_8`` (1 sift round, 8 in all). Per landscape, noise and tuner over
``--trials`` seeds, the same for every tuner (paired: each sample's noise is drawn from the seed, the config and
the round): the chosen config's true time over the best's (mean, share over 1.01, worst) and the samples
taken (screening, settled: a heavy settled sample costs about 3 screening ones: 20 + 5 ms against 2 + 5).

Launch: ``python benchmarks/sift_noise.py [--trials 400]`` (CPU only).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton_dist_tune.function.options import TuneOptions  # noqa: E402
from triton_dist_tune.measure.race import Race  # noqa: E402

CALL_MS = 1.5
GEMM40 = [1.000, 1.003, 1.08, 1.09, 1.10, 1.10, 1.11, 1.12] + [1.2 + 1.8 * k / 31 for k in range(32)]
LANDSCAPES = {"gemm40": (GEMM40, {}), "gemm40_power": (GEMM40, {0: 1.06, 1: 1.06}),
              "flat24": ([1.000, 1.006, 1.012, 1.02, 1.03] + [1.05 + 0.95 * k / 18 for k in range(19)], {})}
#: plan changes of each tuner that runs a race (random3 runs nosift's race)
TUNERS = {"sift": {}, "keep3": {"sift_top": 3}, "nofar": {"far_behind": 0.0}, "nosift": {"final_top_heavy": 0},
          "random3": {"final_top_heavy": 0}, "sift2_7": {"sift_rounds": 2, "heavy_rounds": 7},
          "sift1_8": {"heavy_rounds": 8}, "after2": {"sift_after": 2}}
NOISE = {"gauss2": (0.02, 0.0), "gauss5": (0.05, 0.0), "gauss10": (0.10, 0.0), "spiked": (0.05, 0.05)}


def trial(seed: str, true: list[float], bias: dict[int, float], noise: str, tuner: str) -> tuple[float, int, int]:
    """(the chosen config's true time over the best's, screening samples, settled samples) of one race. Its noise is
    drawn per config and round from ``seed`` (and each probe's per config): every tuner of one seed meets the same
    noise, so tuners are compared on paired races."""
    sigma, spikes = NOISE[noise]
    plan = TuneOptions().plan(60.0, "steady", "k").race
    plan = replace(plan, seed=seed, **TUNERS[tuner])
    probes = {i: t * CALL_MS * (1 + random.Random(f"{seed}/probe{i}").gauss(0, sigma)) * bias.get(i, 1.0)
              for i, t in enumerate(true)}
    race = Race(list(range(len(true))), plan, probes=probes)
    screened: list[int] = []
    while not race.finished(0.0):
        for i in race.order():
            draw = random.Random(f"{seed}/{i}/{race.rounds}")
            t = true[i] * CALL_MS * (1 + draw.gauss(0, sigma)) * (1.3 if draw.random() < spikes else 1.0)
            race.record(i, [t * (1.0 if race.settling else bias.get(i, 1.0))])
        race.end_round()
        if tuner == "random3" and race.rounds == 3:
            screened = sorted(race.running, key=lambda i: statistics.median(race.entrants[i].timed()))[:3]
            break
    chosen = random.Random(f"{seed}/pick").choice(screened) if tuner == "random3" else race.winner()
    assert chosen is not None
    settled = sum(len(e.settled) for e in race.entrants.values())
    samples = sum(len(e.timed()) for e in race.entrants.values())
    return true[chosen] / min(true), samples - settled, settled


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--variants", action="store_true", help="the sift's variants too (sift2_7, sift1_8)")
    args = p.parse_args()
    tuners = list(TUNERS) if args.variants else ["sift", "after2", "keep3", "nofar", "nosift", "random3"]
    for landscape, (true, bias) in LANDSCAPES.items():
        for noise in NOISE:
            for tuner in tuners:
                got = [trial(f"{landscape}/{noise}/{k}", true, bias, noise, tuner) for k in range(args.trials)]
                ratios = [r for r, _, _ in got]
                print(f"{landscape:12s} {noise:7s} {tuner:7s} | chosen mean {statistics.mean(ratios):.4f}, over "
                      f"1.01 in {100 * sum(r > 1.01 for r in ratios) / len(ratios):5.1f}%, worst {max(ratios):.3f}"
                      f" | samples: screening {statistics.mean(s for _, s, _ in got):5.1f}, settled "
                      f"{statistics.mean(s for _, _, s in got):4.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
