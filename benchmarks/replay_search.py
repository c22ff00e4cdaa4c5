"""Replay the search over recorded exhaustive landscapes, with no GPU: choose its defaults with one kernel family held
out at a time, and report the held-out figures beside the training ones and a random-search baseline.

Input: corpus files of ``benchmarks/corpus.py`` (or ``bench_search.py`` oracle files): per (family, shape) every
kept config's device time as ``ratios`` (time / best). A replay runs :func:`~triton_dist_tune.measure.search.simulate`
with the plan under test over a landscape, with ``--noise`` relative Gaussian noise on every screened time (the
search sees noisy times, the judge the recorded ones), and scores the best finalist's ratio to the best (the race
then chooses among the finalists). A run "misses" when that ratio is over 1.02.

Method (leave one family out, as Kernel Tuner's authors judge strategies):

1. every candidate plan of ``CANDIDATES`` is replayed over every landscape, ``--seeds`` seeds each;
2. for each family F, the candidate with the fewest misses on the *other* families (then the least worst ratio,
   then the fewest configs screened) is F's choice; its figures on F are held-out figures;
3. the default (``SearchPlan()``) is replayed too; its figures on every family are training figures where the
   corpus chose it;
4. the random baseline: per landscape and seed, as many configs drawn at random as the default screened there,
   then the same number of finalists.

Launch: ``python benchmarks/replay_search.py benchmarks/results/corpus/*.json [--seeds 10] [--noise 0.02]
[--out benchmarks/results/corpus/replay.md]``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton_dist_tune.measure.search import SearchPlan, simulate  # noqa: E402

#: the plans the held-out choice picks among
CANDIDATES = [SearchPlan(leaders=leaders, initial=initial, model_rounds=model)
              for leaders in (4, 8) for initial in (0, 64) for model in (0, 4)]
_MOE = re.compile(r"^M(\d+)-N(\d+)-K(\d+)-G(\d+)-w(\d+)-s(\d+)$")
_MOE_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
#: a collective config of ``corpus_collective.py``: ``{algo}-x{splits}-{gemm tile}``
_COLLECTIVE = re.compile(r"^(chunked|sequential|p2p)-x(\d+)-(.+)$")


@dataclass
class Landscape:
    """One (family, shape): the configs as the tuned function's space holds them, and each one's ratio."""

    family: str
    name: str
    configs: list[dict]
    ratios: list[float]


@dataclass
class Score:
    """A plan's replays over some landscapes: each run's best finalist / best, and configs screened."""

    found: list[float] = field(default_factory=list)
    screened: list[int] = field(default_factory=list)
    fraction: list[float] = field(default_factory=list)

    def add(self, other: Score) -> Score:
        return Score(self.found + other.found, self.screened + other.screened, self.fraction + other.fraction)

    @property
    def misses(self) -> int:
        return sum(f > 1.02 for f in self.found)

    def key(self) -> tuple[float, float, float]:
        return (self.misses / max(1, len(self.found)), max(self.found, default=1.0), statistics.mean(self.fraction))

    def text(self) -> str:
        n = len(self.found)
        return (f"{n - self.misses}/{n} within 1.02 ({100 * (n - self.misses) / n:.1f}%), worst "
                f"{max(self.found):.3f}, {statistics.mean(self.fraction):.1%} of the space screened")


def load(paths: list[Path]) -> list[Landscape]:
    """Every landscape of the files, in a fixed order; a family is the space name without its (K, N) suffix.
    A landscape recorded ``"complete": false`` (its recorder ran out of time) is left out: it is not exhaustive."""
    found = []
    for path in paths:
        for key, entry in sorted(json.loads(path.read_text()).items()):
            if entry.get("complete") is False:
                continue
            family = entry.get("family") or entry["space"]
            family = "gemm" if family.startswith("gemm_k") else family
            specs = sorted(entry["ratios"])
            if all(_MOE.match(s) for s in specs):
                configs = [dict(zip(_MOE_KEYS, map(int, _MOE.match(s).groups()), strict=True)) for s in specs]
            elif all(_COLLECTIVE.match(s) for s in specs):  # as the examples' tuned AG-GEMM / GEMM-RS hold them
                configs = [{"algo": m[1], "splits": int(m[2]), "gemm_config": m[3]}
                           for m in map(_COLLECTIVE.match, specs)]
            else:
                configs = [{"config": s} for s in specs]
            found.append(Landscape(family, key.split("|", 1)[1], configs, [entry["ratios"][s] for s in specs]))
    return found


def replay(plan: SearchPlan, land: Landscape, seeds: int, noise: float) -> Score:
    """``seeds`` replays of ``plan`` over ``land``."""
    best = min(land.ratios)
    score = Score()
    for seed in range(seeds):
        rng = random.Random(f"{land.name}/{seed}")
        noisy = [r * (1 + noise * rng.gauss(0, 1)) for r in land.ratios]
        finalists, times = simulate(land.configs, range(len(land.configs)), replace(plan, seed=f"k{seed}"),
                                    noisy.__getitem__)
        score.found.append(min(land.ratios[i] for i in finalists) / best)
        score.screened.append(len(times))
        score.fraction.append(len(times) / len(land.configs))
    return score


def random_baseline(land: Landscape, counts: list[int], finalists: int, noise: float) -> Score:
    """Random sampling of as many configs as the search screened in each seed, then the same finalists."""
    best = min(land.ratios)
    score = Score()
    for seed, count in enumerate(counts):
        rng = random.Random(f"{land.name}/{seed}")
        noisy = [r * (1 + noise * rng.gauss(0, 1)) for r in land.ratios]
        picked = random.Random(f"random/{land.name}/{seed}").sample(range(len(land.ratios)), count)
        top = sorted(picked, key=noisy.__getitem__)[:finalists]
        score.found.append(min(land.ratios[i] for i in top) / best)
        score.screened.append(count)
        score.fraction.append(count / len(land.ratios))
    return score


def plan_text(plan: SearchPlan) -> str:
    return f"leaders {plan.leaders}, first look {plan.initial or 'auto'}, model checks {plan.model_rounds}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", type=Path, nargs="+")
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="also write the report (markdown) here")
    args = parser.parse_args()
    lands = load(args.corpus)
    families = sorted({land.family for land in lands})
    default = SearchPlan()
    plans = list(dict.fromkeys([*CANDIDATES, default]))
    scores = {(plan, land.name): replay(plan, land, args.seeds, args.noise) for plan in plans for land in lands}

    def over(plan: SearchPlan, chosen: list[Landscape]) -> Score:
        total = Score()
        for land in chosen:
            total = total.add(scores[(plan, land.name)])
        return total

    lines = [f"# Search replays: {len(lands)} landscapes, {len(families)} families, {args.seeds} seeds, "
             f"{args.noise:.0%} noise", "",
             "## Held out: each family's plan chosen on the other families", "",
             "| held-out family (landscapes) | plan chosen on the others | held-out figure | training figure "
             "(the others) |", "| --- | --- | --- | --- |"]
    for family in families:
        inside = [land for land in lands if land.family == family]
        others = [land for land in lands if land.family != family]
        chosen = min(CANDIDATES, key=lambda plan: over(plan, others).key())
        lines.append(f"| {family} ({len(inside)}) | {plan_text(chosen)} | {over(chosen, inside).text()} | "
                     f"{over(chosen, others).text()} |")
    lines += ["", f"## The default ({plan_text(default)}), chosen on every family: training figures", "",
              "| family | default | random sampling, as many configs |", "| --- | --- | --- |"]
    every, every_random = Score(), Score()
    for family in families:
        inside = [land for land in lands if land.family == family]
        mine = over(default, inside)
        baseline = Score()
        for land in inside:
            baseline = baseline.add(random_baseline(land, scores[(default, land.name)].screened, default.finalists,
                                                    args.noise))
        every, every_random = every.add(mine), every_random.add(baseline)
        lines.append(f"| {family} | {mine.text()} | {baseline.text()} |")
    lines.append(f"| all | {every.text()} | {every_random.text()} |")
    lines += ["", "## Every candidate over every family", "", "| plan | " + " | ".join(families) + " |",
              "| --- |" + " --- |" * len(families)]
    for plan in plans:
        cells = [f"{over(plan, [x for x in lands if x.family == f]).text()}" for f in families]
        lines.append(f"| {plan_text(plan)} | " + " | ".join(cells) + " |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out is not None:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
