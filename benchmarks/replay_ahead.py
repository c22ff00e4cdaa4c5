"""How often the search's guess of its next stage (``measure/ahead.py``) names the configs that stage then screens,
replayed over the corpus's exhaustive landscapes with fresh Gaussian noise per sample, beside a random guess of the
same size drawn from the configs not screened yet.

Recall: the share of each next stage's new configs the guess named; precision: the share of the named configs
screened by that next stage. The guess's rule was designed on this corpus (all families): training figures.

Launch: ``python benchmarks/replay_ahead.py benchmarks/results/corpus/gpu*.json [--seeds 3] [--noise 0.05]
[--out benchmarks/results/corpus/replay_ahead.md]``.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import replay_search  # noqa: E402

from triton_dist_tune.measure.ahead import likely_next  # noqa: E402
from triton_dist_tune.measure.search import PatternSearch, SearchPlan  # noqa: E402


def replay(landscape: replay_search.Landscape, seed: int, noise: replay_search.NoiseModel) -> list[int]:
    """[named and screened next, screened next, named, random and screened next] over one search."""
    rng, draw = random.Random(seed), random.Random(1000 + seed)
    search = PatternSearch(landscape.configs, list(range(len(landscape.configs))), SearchPlan(seed=f"ahead{seed}"))
    history: dict[int, list[float] | None] = {}
    counts, pending = [0, 0, 0, 0], None
    batch = search.first()
    while batch:
        new = [i for i in batch if i not in history]
        if new and pending is not None:
            guess, randomly = pending
            counts[0] += len(set(new) & set(guess))
            counts[1] += len(new)
            counts[2] += len(guess)
            counts[3] += len(set(new) & set(randomly))
            pending = None
        if new:
            guess = [i for i in likely_next(search, history, new) if i not in history]
            if guess:
                left = [i for i in range(len(landscape.configs)) if i not in history and i not in new]
                pending = (guess, draw.sample(left, min(len(guess), len(left))))
        replay_search.screen(landscape, batch, history, noise, rng)
        batch = search.next(history, set())
    return counts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("corpus", nargs="+", type=Path)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    families: dict[str, list[int]] = {}
    for landscape in replay_search.load(args.corpus):
        for seed in range(args.seeds):
            got = replay(landscape, seed, replay_search.NoiseModel("gauss", args.noise))
            total = families.setdefault(landscape.family, [0, 0, 0, 0])
            for k in range(4):
                total[k] += got[k]
    families["all"] = [sum(v[k] for v in families.values()) for k in range(4)]
    lines = [f"# The next stage's guess, replayed ({args.seeds} seeds, Gaussian {args.noise:.0%} per sample)", "",
             "| family | recall | precision | random guess's recall |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | {v[0] / v[1]:.2f} | {v[0] / max(1, v[2]):.2f} | {v[3] / v[1]:.2f} |"
              for name, v in families.items()]
    replay_search.publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
