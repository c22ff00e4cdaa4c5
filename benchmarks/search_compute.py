"""The search's own computation, timed on the CPU, with a digest of everything it decided.

Over corpus landscapes (every ``--every``-th), with noise drawn from a fixed seed per landscape, each search runs
stage by stage as the tuner runs it: its stages, the guess of the next stage compiled ahead
(``measure/ahead.py`` ``likely_next``), its finalists, and the guess a campaign's next key would compile
(``likely_for_next_key`` over 150 of its screened times). Prints the seconds this took and a digest of all of it:
a change meant to make the search faster, not different, must leave the digest as it was.

Launch: ``python benchmarks/search_compute.py [--corpus benchmarks/results/corpus] [--every 3] [--repeat 3]
[--noise gauss5]`` (one of ``replay_search.NOISE_MODELS``)
(``--library DIR``: import ``triton_dist_tune`` from that checkout instead, to compare two trees in one run).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, default=HERE / "results" / "corpus")
    p.add_argument("--every", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--library", type=Path, default=HERE.parent)
    p.add_argument("--noise", default="gauss5", help="a noise model of replay_search.NOISE_MODELS")
    args = p.parse_args()
    sys.path.insert(0, str(args.library.resolve()))
    import triton_dist_tune  # first: replay_search puts this checkout's library on the path
    from triton_dist_tune.measure.ahead import likely_for_next_key, likely_next
    from triton_dist_tune.measure.search import PatternSearch, SearchPlan

    sys.path.insert(1, str(HERE))
    import replay_search

    lands = replay_search.load(sorted(args.corpus.glob("gpu*.json")))[::args.every]
    noise = replay_search.NOISE_MODELS[args.noise]
    best, digest = float("inf"), ""
    for _ in range(args.repeat):
        h = hashlib.sha256()
        started = time.perf_counter()
        for land in lands:
            rng = random.Random(land.name)
            kept = list(range(len(land.configs)))
            search = PatternSearch(land.configs, kept, SearchPlan(seed="compute"))
            history: dict[int, list[float] | None] = {}
            decided: list[tuple[int, ...]] = []
            batch = search.first()
            while batch:
                new = [i for i in batch if i not in history]
                if new:
                    decided.append(tuple(likely_next(search, history, new)))
                replay_search.screen(land, batch, history, noise, rng)
                decided.append(tuple(batch))
                batch = search.next(history, set())
            decided.append(tuple(search.finalists(history)))
            seen = {i: land.ratios[i] for i in list(history)[:150]}
            decided.append(tuple(likely_for_next_key(land.configs, kept, "next", [], seen, set())))
            h.update(repr(decided).encode())
        best, digest = min(best, time.perf_counter() - started), h.hexdigest()[:16]
    print(f"library {Path(triton_dist_tune.__file__).parent}: {len(lands)} landscapes, best of {args.repeat}: "
          f"{best:.2f} s; digest {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
