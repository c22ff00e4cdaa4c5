"""Replay the campaign's **next key compiled ahead** over the recorded corpus, with no GPU: how many of the configs a
key compiles for the first time were compiled ahead while the key before it was tuned, how many compiled ahead were
never screened by any key, beside a random guess of the same size; the cap on the guess chosen with each kernel
family held out; and the library's guess (its cap, then :data:`~triton_dist_tune.measure.ahead.NEXT_KEY_FILL`
configs the stand-in ranks fastest).

Each problem's shapes are a campaign (ascending, as the README's MoE campaign, and shuffled), replayed as
``replay_campaign.py`` replays it: each key's search seeded by the keys decided before it, noise drawn afresh for
every sample (the campaign's searches do not depend on what is compiled ahead, so each is replayed once and every
guess is judged against it). As key ``k`` starts, the guess for key ``k + 1`` is made from what the live tuner knows
then (the keys decided before ``k``): :func:`~triton_dist_tune.measure.ahead.likely_for_next_key` with a cap,
leaving out the configs decided keys screened and those compiled ahead before. **Random**: as many configs drawn at
random from the next key's kept configs not screened nor compiled ahead yet as the default cap's guess names there.
A key's **new** configs: those it screens that no earlier key screened; **covered**: those of them compiled ahead.
The first key of a campaign has no guess (nothing comes before it).

**Held out**: for each family, the cap (of ``CAPS``) with the most configs covered less configs never screened, summed
over the other families and every noise model, and its figures on the held-out family.

Launch: ``python benchmarks/replay_next_key.py benchmarks/results/corpus/gpu*.json [--seeds 3]
[--noise-models gauss5,gauss10,spiked] [--jobs 2] [--out benchmarks/results/corpus/replay_next_key.md]``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_campaign import Problem, problems, run, seeds_for  # noqa: E402
from replay_search import NOISE_MODELS, NoiseModel, load, publish  # noqa: E402

from triton_dist_tune.function.policy import numeric_distance  # noqa: E402
from triton_dist_tune.measure.ahead import NEXT_KEY_CAP, NEXT_KEY_FILL, likely_for_next_key  # noqa: E402
from triton_dist_tune.measure.search import PatternSearch, SearchPlan  # noqa: E402

#: the caps replayed (the library's is NEXT_KEY_CAP)
CAPS = (64, 128, 256)


@dataclass
class Key:
    """One key of a replayed campaign: its shape, what it screened and the times it estimated."""

    shape: tuple[int, ...]
    screened: set[int]
    times: dict[int, float]


@dataclass
class Tally:
    """Configs counted over campaigns: the later keys' new ones, those compiled ahead, those never screened."""

    new: int = 0
    covered: int = 0
    guessed: int = 0
    wasted: int = 0

    def add(self, other: Tally) -> None:
        for name in ("new", "covered", "guessed", "wasted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def net(self) -> int:
        return self.covered - self.wasted

    def text(self) -> str:
        return (f"{self.covered / max(1, self.new):.0%} of {self.new} covered, {self.wasted} of {self.guessed} "
                f"never screened")


@dataclass
class Result:
    """One campaign's tallies: per cap (the simulated search's order alone), the library's guess (cap and fill),
    and the random guess."""

    family: str
    noise: str
    caps: dict[int, Tally] = field(default_factory=dict)
    library: Tally = field(default_factory=Tally)
    random: Tally = field(default_factory=Tally)
    #: a random guess as large as the library's
    random_library: Tally = field(default_factory=Tally)


def replayed(problem: Problem, shapes: list[tuple[int, ...]], noise: NoiseModel, seed: int, order: str) -> list[Key]:
    """The campaign's keys, each searched as the live tuner would (seeded by the keys before it)."""
    decided: dict[tuple[int, ...], list[int]] = {}
    keys = []
    for shape in shapes:
        rng = random.Random(f"{problem.name}/{shape}/{seed}/{noise.name}/{order}")
        search = PatternSearch(problem.configs, problem.kept[shape], SearchPlan(seed=f"k{seed}/{shape}"),
                               seeds_for(shape, decided))
        _, estimates, _ = run(search, lambda i: noise.draw(rng, problem.ratios[shape][i]))  # noqa: B023
        times = {i: t for i, t in estimates.items() if t is not None}
        keys.append(Key(shape, set(estimates), times))
        decided[shape] = [i for _, i in sorted((t, i) for i, t in times.items())]
    return keys


Guess = Callable[[int, set[int], set[int]], list[int]]  # (key position, screened so far, compiled ahead) -> guess


def judged(keys: list[Key], guess: Guess) -> Tally:
    """Compile ahead for each next key what ``guess`` names as the key before it starts; count what came of it."""
    tally = Tally()
    screened: set[int] = set()
    ahead: set[int] = set()
    for k, key in enumerate(keys):
        if k + 1 < len(keys):
            named = guess(k + 1, screened, ahead)
            ahead |= set(named)
            tally.guessed += len(named)
        if k:
            new = key.screened - screened
            tally.new += len(new)
            tally.covered += len(new & ahead)
        screened |= key.screened
    tally.wasted = len(ahead - screened)
    return tally


def campaign(problem: Problem, order: str, noise: NoiseModel, seed: int) -> Result:
    shapes = list(problem.shapes)
    if order == "shuffled":
        random.Random(f"order/{problem.name}/{seed}").shuffle(shapes)
    keys = replayed(problem, shapes, noise, seed, order)

    def model(cap: int, sizes: list[int] | None = None, fill: int = 0) -> Guess:
        def guess(position: int, screened: set[int], ahead: set[int]) -> list[int]:
            # as key position - 1 starts: the keys before it are decided
            before = keys[:position - 1]
            decided = {k.shape: [i for _, i in sorted((t, i) for i, t in k.times.items())] for k in before}
            target = keys[position].shape
            near = sorted((numeric_distance(target, k.shape), repr(k.shape), k) for k in before)
            named = likely_for_next_key(problem.configs, problem.kept[target], f"k{seed}/{target}",
                                        seeds_for(target, decided), near[0][2].times if near else {},
                                        screened | ahead, cap, fill)
            if sizes is not None:
                sizes.append(len(named))
            return named
        return guess

    result = Result(problem.family, noise.name)
    sizes: list[int] = []
    for cap in CAPS:
        result.caps[cap] = judged(keys, model(cap, sizes if cap == NEXT_KEY_CAP else None))
    library_sizes: list[int] = []
    result.library = judged(keys, model(NEXT_KEY_CAP, library_sizes, fill=NEXT_KEY_FILL))
    draw = random.Random(f"random/{problem.name}/{seed}/{noise.name}/{order}")

    def at_random(counts: list[int]) -> Guess:
        def guess(position: int, screened: set[int], ahead: set[int]) -> list[int]:
            pool = [i for i in problem.kept[keys[position].shape] if i not in screened and i not in ahead]
            return draw.sample(pool, min(len(pool), counts[position - 1]))
        return guess

    result.random = judged(keys, at_random(sizes))
    result.random_library = judged(keys, at_random(library_sizes))
    return result


def _job(args: tuple) -> Result:
    return campaign(*args)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", type=Path, nargs="+")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--noise-models", default="gauss5,gauss10,spiked")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    models = [NOISE_MODELS[name] for name in args.noise_models.split(",")]
    probs = problems(load(args.corpus))
    jobs = [(p, order, m, seed) for p in probs for order in ("ascending", "shuffled") for m in models
            for seed in range(args.seeds)]
    with Pool(args.jobs) as pool:
        done = pool.map(_job, jobs, chunksize=1)
    families = sorted({p.family for p in probs})

    def total(fams: list[str], noise: str | None, pick: Callable[[Result], Tally]) -> Tally:
        t = Tally()
        for r in done:
            if r.family in fams and noise in (None, r.noise):
                t.add(pick(r))
        return t

    lines = [f"# The next key compiled ahead, replayed: {len(probs)} problems, {args.seeds} seeds, ascending and "
             f"shuffled, noise {', '.join(m.name for m in models)} drawn afresh per sample", "",
             "Covered: the later keys' new configs (screened by no earlier key) that were compiled ahead; never "
             "screened: configs compiled ahead that no key of the campaign screened. Random: as many configs drawn "
             "at random among the next key's unscreened kept configs as the library's guess (cap "
             f"{NEXT_KEY_CAP}) named there.", "",
             "## Held out: each family's cap chosen on the other families", "",
             "(the most configs covered less those never screened, over the other families and every noise model)",
             "", "| held-out family | cap chosen on the others | noise | guess | random |",
             "| --- | --- | --- | --- | --- |"]
    for family in families:
        others = [f for f in families if f != family]
        cap = max(CAPS, key=lambda c: (total(others, None, lambda r: r.caps[c]).net, -c))  # noqa: B023
        for m in models:
            lines.append(f"| {family} | {cap} | {m.name} | {total([family], m.name, lambda r: r.caps[cap]).text()} | "
                         f"{total([family], m.name, lambda r: r.random).text()} |")
    lines += ["", "## Every cap, every family (all noise models)", "",
              "| family | " + " | ".join(f"cap {c}" for c in CAPS) + " | random |",
              "| --- |" + " --- |" * (len(CAPS) + 1)]
    for family in families:
        cells = [total([family], None, lambda r: r.caps[c]).text() for c in CAPS]  # noqa: B023
        lines.append(f"| {family} | " + " | ".join(cells) + f" | {total([family], None, lambda r: r.random).text()} |")
    lines += ["", f"## The library's guess: the search's order (cap {NEXT_KEY_CAP}), then the fill of "
              f"{NEXT_KEY_FILL} the stand-in ranks fastest", "",
              "| family | noise | guess | random (as many as the guess) |",
              "| --- | --- | --- | --- |"]
    for family in families:
        for m in models:
            lines.append(f"| {family} | {m.name} | {total([family], m.name, lambda r: r.library).text()} | "
                         f"{total([family], m.name, lambda r: r.random_library).text()} |")
    lines += ["", f"Command: `python benchmarks/replay_next_key.py benchmarks/results/corpus/gpu*.json --seeds "
              f"{args.seeds} --noise-models {args.noise_models} --jobs {args.jobs} --out "
              "benchmarks/results/corpus/replay_next_key.md`."]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
