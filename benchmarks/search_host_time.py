"""The search's own host time, this tree's library against another side by side: every landscape of the corpus
replayed through :func:`~triton_dist_tune.measure.replay.simulate` (the default plan, spiked noise drawn per sample,
``--seeds`` seeds), timing what the live tuner's ``model`` part times (:meth:`PatternSearch.next`, each stage's
choice of the next) and the grids' construction (once per key). Each arm runs in a process of its own
(``PYTHONPATH`` = its root), the arms alternating ``--rounds`` times; each prints its seconds and a digest of every
replay's finalists and estimates, which must be equal across arms when a change is meant to keep the search's
numbers (say, a faster fit of the same model).

Launch: ``python benchmarks/search_host_time.py --old DIR [--rounds 3] [--seeds 2] [--out FILE]``, DIR holding an
older ``triton_dist_tune`` (``git archive <commit> triton_dist_tune | tar -x -C DIR``). CPU only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = sorted((HERE / "results" / "corpus").glob("gpu*.json"))


def worker(seeds: int) -> dict[str, object]:
    """Replay every corpus landscape ``seeds`` times with the library on ``sys.path``; the seconds spent in
    ``PatternSearch.next`` and in ``Grid.__init__``, and a digest of the results."""
    import random
    import time
    from dataclasses import replace

    import triton_dist_tune
    from triton_dist_tune.measure import grid, replay, search

    sys.path.insert(1, str(HERE))
    import replay_search as rs  # after the library: it puts this tree first on sys.path

    spent = {"next": 0.0, "grid": 0.0}

    def timed(owner: type, name: str, part: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - start
        setattr(owner, name, wrapper)

    timed(search.PatternSearch, "next", "next")
    timed(grid.Grid, "__init__", "grid")
    noise = rs.NOISE_MODELS["spiked"]
    digest = hashlib.sha256()
    replays = 0
    for land in rs.load(CORPUS):
        for seed in range(seeds):
            rng = random.Random(f"{land.name}/{seed}")
            got = replay.simulate(land.configs, range(len(land.configs)),
                                  replace(search.SearchPlan(), seed=f"k{seed}"),
                                  lambda i, rng=rng, land=land: noise.draw(rng, land.ratios[i], False))
            digest.update(repr(got).encode())
            replays += 1
    return {"next_s": spent["next"], "grid_s": spent["grid"], "replays": replays, "digest": digest.hexdigest(),
            "library": triton_dist_tune.__file__}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", type=Path, help="a folder holding the other triton_dist_tune")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--out", type=Path)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.seeds)))
        return 0
    if args.old is None:
        p.error("--old DIR is needed")
    arms = {"new": HERE.parent, "old": args.old.resolve()}
    runs: dict[str, list[dict]] = {name: [] for name in arms}
    for r in range(args.rounds):
        for name, root in (arms.items() if r % 2 == 0 else reversed(arms.items())):
            env = {**os.environ, "PYTHONPATH": str(root)}
            done = subprocess.run([sys.executable, "-P", __file__, "--worker", "--seeds", str(args.seeds)],
                                  env=env, capture_output=True, text=True, check=True, cwd="/")
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            got = runs[name][-1]
            print(f"round {r} {name}: next() {got['next_s']:.2f} s, grids {got['grid_s']:.2f} s over "
                  f"{got['replays']} replays; digest {got['digest'][:12]}; {got['library']}", flush=True)
    for name, got in runs.items():
        print(f"{name}: next() median {statistics.median(g['next_s'] for g in got):.2f} s, grids median "
              f"{statistics.median(g['grid_s'] for g in got):.2f} s")
    same = len({g["digest"] for got in runs.values() for g in got}) == 1
    print("the same finalists and estimates in every replay: " + ("yes" if same else "NO"))
    if args.out is not None:
        args.out.write_text(json.dumps({"runs": runs, "same": same}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
