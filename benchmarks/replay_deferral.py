"""Whether deferring a straggler to a later stage (``measure/warm_order.py``: on one rank, a config still compiling
once the rest of its stage is measured is screened with the next stage of new configs) changes the search's
choices, replayed over the corpus's exhaustive landscapes with noise drawn afresh per sample (``replay_search``'s
noise models: Gaussian 5% and 10%, and ``spiked``, 2% with one sample in 20 slowed 20-100%).

Each new config of a stage is a straggler with probability ``p`` (on one H200 the README's MoE campaign deferred 64
configs over 16 keys, about 1.6% of the configs it screened; ``p`` = 0.03 and 0.10 are taken); a straggler stays
one to three stages of new configs behind (drawn uniformly; ``--behind``), as the live rule defers it again while
it compiles, and is screened by a stage of the deferred alone once the search has nothing else to screen. The same
landscape and seed run without deferral beside it. A miss: the best finalist more than 2% behind the landscape's
best. No rule was chosen on these figures (the rule was designed on the GPU timeline, not on this corpus).

Launch: ``python benchmarks/replay_deferral.py benchmarks/results/corpus/gpu*.json [--seeds 5] [--noise gauss5]
[--out benchmarks/results/corpus/replay_deferral.md]``.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import replay_search  # noqa: E402

from triton_dist_tune.measure.search import PatternSearch, SearchPlan  # noqa: E402

MISS = 1.02


def replay(landscape: replay_search.Landscape, seed: int, noise: replay_search.NoiseModel,
           p: float, stays: tuple[int, int] = (1, 3)) -> tuple[float, int, int]:
    """(the best finalist's ratio to the best, configs screened, configs deferred) of one search; a straggler
    ``stays`` (least, most) stages of new configs behind."""
    rng, draw = random.Random(seed), random.Random(7000 + seed)
    search = PatternSearch(landscape.configs, list(range(len(landscape.configs))), SearchPlan(seed=f"defer{seed}"))
    history: dict[int, list[float] | None] = {}
    waiting: dict[int, int] = {}  # a straggler: the stages of new configs it stays behind
    deferred: list[int] = []
    deferrals = 0
    batch = search.first()
    while batch:
        new = [i for i in batch if i not in history]
        measured = batch
        if new:  # as function/searched.py: a stage of new configs takes the deferred ones back
            for i in new:
                if i not in waiting and draw.random() < p:
                    waiting[i] = draw.randint(*stays)
            behind = [i for i in new if waiting.get(i, 0) > 0]
            if len(behind) < len(new):  # deferred only beside configs that are measured
                for i in behind:
                    waiting[i] -= 1
                deferrals += len(behind)
                measured, deferred = [i for i in batch if i not in behind], behind
            else:  # a stage of stragglers alone waits for them
                waiting.update((i, 0) for i in behind)
                deferred = []
        replay_search.screen(landscape, measured, history, noise, rng)
        batch = search.next(history, set())
        if deferred and (not batch or any(i not in history for i in batch)):  # not a stage of samples again
            batch, deferred = deferred + [i for i in batch if i not in deferred], []
    found = min(landscape.ratios[i] for i in search.finalists(history)) / min(landscape.ratios)
    return found, len(history), deferrals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="+", type=Path)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--noise", default="gauss5", choices=sorted(replay_search.NOISE_MODELS))
    parser.add_argument("--shares", default="0,0.03,0.10", help="straggler probabilities p (0: no deferral)")
    parser.add_argument("--behind", default="1,3", help="stages of new configs a straggler stays behind: least,most")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    shares = [float(x) for x in args.shares.split(",")]
    least, most = (int(x) for x in args.behind.split(","))
    noise = replay_search.NOISE_MODELS[args.noise]
    rows: dict[tuple[str, float], list[tuple[float, int, int]]] = {}
    for landscape in replay_search.load(args.corpus):
        for seed in range(args.seeds):
            for p in shares:
                rows.setdefault((landscape.family, p), []).append(replay(landscape, seed, noise, p, (least, most)))
                rows.setdefault(("all", p), []).append(rows[(landscape.family, p)][-1])
    lines = [f"# Deferring stragglers, replayed ({args.seeds} seeds, noise {noise.name}, drawn per sample, "
             f"{least}-{most} stages behind)", "",
             "| family | p | misses (> 1.02) | worst | mean screened | mean deferred |",
             "| --- | --- | --- | --- | --- | --- |"]
    for (family, p), got in sorted(rows.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        misses = sum(1 for best, _, _ in got if best > MISS)
        lines.append(f"| {family} | {p:g} | {misses}/{len(got)} | {max(b for b, _, _ in got):.3f} | "
                     f"{sum(s for _, s, _ in got) / len(got):.0f} | {sum(d for _, _, d in got) / len(got):.1f} |")
    replay_search.publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
