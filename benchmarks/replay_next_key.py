"""Replay the campaign's **next key compiled ahead** over the recorded corpus, with no GPU: how many of the configs a
key compiles for the first time were compiled ahead while the key before it was tuned, and how many compiled ahead
were never screened by any key.

Each problem's shapes are a campaign (ascending, as the README's MoE campaign, and shuffled), replayed as
``replay_campaign.py`` replays it: each key's search seeded by the keys decided before it, noise drawn afresh for
every sample. As key ``k`` starts, the guess for key ``k + 1`` is made from what the live tuner knows then (the keys
decided before ``k``): :func:`~triton_dist_tune.measure.ahead.likely_for_next_key`, leaving out the configs decided
keys screened and those compiled ahead before. A key's **new** configs: those it screens that no earlier key
screened; **covered**: those of them compiled ahead. The first key of a campaign has no guess (nothing comes before
it); its new configs are counted apart.

Launch: ``python benchmarks/replay_next_key.py benchmarks/results/corpus/gpu*.json [--seeds 3] [--noise gauss5]
[--out benchmarks/results/corpus/replay_next_key.md]``.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_campaign import Problem, problems, run  # noqa: E402
from replay_search import NOISE_MODELS, NoiseModel, load, publish  # noqa: E402

from triton_dist_tune.function.policy import numeric_distance  # noqa: E402
from triton_dist_tune.function.searched import SEED_KEYS, SEEDS_PER_KEY  # noqa: E402
from triton_dist_tune.measure.ahead import likely_for_next_key  # noqa: E402
from triton_dist_tune.measure.search import PatternSearch, SearchPlan  # noqa: E402


@dataclass
class Tally:
    """Configs counted over campaigns: first keys' new ones; later keys' new ones and those compiled ahead."""

    first: int = 0
    new: int = 0
    covered: int = 0
    guessed: int = 0
    wasted: int = 0
    campaigns: int = 0

    def add(self, other: Tally) -> None:
        for name in ("first", "new", "covered", "guessed", "wasted", "campaigns"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _seeds(shape: tuple[int, ...], decided: dict[tuple[int, ...], list[int]]) -> list[int]:
    near = sorted((numeric_distance(shape, other), repr(other), other) for other in decided if other != shape)
    return list(dict.fromkeys(i for _, _, other in near[:SEED_KEYS] for i in decided[other][:SEEDS_PER_KEY]))


def campaign(problem: Problem, order: str, noise: NoiseModel, seed: int) -> Tally:
    """One campaign of ``problem``'s shapes, each key's successor guessed as the key starts."""
    shapes = list(problem.shapes)
    if order == "shuffled":
        random.Random(f"order/{problem.name}/{seed}").shuffle(shapes)
    decided: dict[tuple[int, ...], list[int]] = {}  # shape -> configs by estimated time
    times: dict[tuple[int, ...], dict[int, float]] = {}
    screened: set[int] = set()
    ahead: set[int] = set()
    tally = Tally(campaigns=1)
    for k, shape in enumerate(shapes):
        if k + 1 < len(shapes):
            following = shapes[k + 1]
            near = sorted((numeric_distance(following, o), repr(o), o) for o in decided)
            landscape = times[near[0][2]] if near else {}
            guess = likely_for_next_key(problem.configs, problem.kept[following], f"k{seed}/{following}",
                                        _seeds(following, decided), landscape, screened | ahead)
            ahead |= set(guess)
            tally.guessed += len(guess)
        rng = random.Random(f"{problem.name}/{shape}/{seed}/{noise.name}/{order}")
        search = PatternSearch(problem.configs, problem.kept[shape], SearchPlan(seed=f"k{seed}/{shape}"),
                               _seeds(shape, decided))
        _, estimates, _ = run(search, lambda i: noise.draw(rng, problem.ratios[shape][i]))  # noqa: B023
        new = set(estimates) - screened
        if k == 0:
            tally.first += len(new)
        else:
            tally.new += len(new)
            tally.covered += len(new & ahead)
        screened |= set(estimates)
        times[shape] = {i: t for i, t in estimates.items() if t is not None}
        decided[shape] = [i for _, i in sorted((t, i) for i, t in times[shape].items())]
    tally.wasted = len(ahead - screened)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", type=Path, nargs="+")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--noise", default="gauss5")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    noise = NOISE_MODELS[args.noise]
    totals: dict[str, Tally] = {}
    for problem in problems(load(args.corpus)):
        for order in ("ascending", "shuffled"):
            for seed in range(args.seeds):
                totals.setdefault(problem.family, Tally()).add(campaign(problem, order, noise, seed))
    lines = [f"# The next key compiled ahead, replayed: {args.seeds} seeds, ascending and shuffled, {noise.name}", "",
             "Per campaign (mean): the first key's new configs (no guess); the later keys' new configs (screened "
             "by no earlier key) and how many of them were compiled ahead; configs compiled ahead in all, and those "
             "no key screened.", "",
             "| family | campaigns | first key new | later keys new | of them compiled ahead | compiled ahead | "
             "never screened |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for family, t in sorted(totals.items()):
        n = t.campaigns
        lines.append(f"| {family} | {n} | {t.first / n:.0f} | {t.new / n:.0f} | {t.covered / n:.0f} "
                     f"({t.covered / max(1, t.new):.0%}) | {t.guessed / n:.0f} | {t.wasted / n:.0f} "
                     f"({t.wasted / max(1, t.guessed):.0%}) |")
    lines += ["", f"Command: `python benchmarks/replay_next_key.py benchmarks/results/corpus/gpu*.json --seeds "
              f"{args.seeds} --noise {args.noise} --out benchmarks/results/corpus/replay_next_key.md`."]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
