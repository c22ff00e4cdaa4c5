"""Are the race's two-level rule's choices better than the medians'? (``measure/race.py``, "Two levels".) At MoE
M = 24-48 the tiles K128-M16-N128-G1-s3 of 4 and 8 warps flip between two levels a few per cent apart, on a scale of
hundreds of ms (``results/session_h200_19``, ``session_h200_20``): a single judgement reads whichever level it finds,
so it cannot say which choice a served model, whose calls average both levels, would prefer.

One process, one shape, the given configs: fresh tunings of those configs alone (``regime_check.tune_these``, the
tuner's own race of them), alternating the library as it is (``levels``: a settled leader whose samples hold a
slower level too is ranked by their mean) and the library with the rule off (``medians``), with one judgement
(``_search_oracles.judge_here``: graphs of 20 launches, shuffled rounds) after each tuning. The judgements, spread
over the whole run, are averaged per config: the long judge, what a served model's calls average. Prints each
config's mean ratio over the judgements and its range (a bistable config's range is wide), each tuning's choice, and
each arm's choices against the long judge; writes them to ``--out``.

Launch (one GPU): ``python benchmarks/level_choices.py --family moe --m 48 --configs A,B,... --tunings 12 --out F``
CPU plumbing: ``TRITON_INTERPRET=1 python benchmarks/level_choices.py --cpu-smoke --family moe --m 8 --configs ...``
(on CPU no race is timed on the device, so the rule never applies: both arms are the same library there).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import json  # noqa: E402
import statistics  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (fresh HOME and caches before Triton is imported)
from _search_oracles import compile_all, judge_here  # noqa: E402
from regime_check import configs_parser, kept_candidates, tune_these  # noqa: E402

from triton_dist_tune.measure import race  # noqa: E402

ARMS = ("levels", "medians")


def main() -> int:
    p = configs_parser(__doc__.splitlines()[0])
    p.add_argument("--tunings", type=int, default=12, help="fresh tunings in all, alternating the two arms")
    args = p.parse_args()
    space, kernel, st, texts, names = kept_candidates(args, "level_choices")
    compile_all(space, kernel, st, [texts[n] for n in names])
    rule = race.slower_level
    report: dict[str, Any] = {"gpu": bs.gpu_name(), "family": args.family, "m": args.m, "tunings": [],
                              "judgements": []}
    for t in range(args.tunings):
        arm = ARMS[t % 2]
        race.slower_level = rule if arm == "levels" else (lambda ratios: 1.0)
        try:
            got = tune_these(space, kernel, st, [texts[n] for n in names], t)
        finally:
            race.slower_level = rule
        report["tunings"].append({"arm": arm, **got})
        here = judge_here(space, args.m, kernel, names, args.rounds)
        report["judgements"].append(here["ratios"])
        bs.say(f"tuning {t} ({arm}) chose {got['choice']}; judged then: "
               + ", ".join(f"{n} {here['ratios'][n]:.3f}" for n in names))
    long = {n: statistics.mean(j[n] for j in report["judgements"]) for n in names}
    best = min(long.values())
    report["long_judge"] = {n: long[n] / best for n in names}
    for n in sorted(names, key=long.get):
        seen = [j[n] for j in report["judgements"]]
        bs.say(f"long judge: {n} {long[n] / best:.3f} (one judgement read {min(seen):.3f}-{max(seen):.3f})")
    for arm in ARMS:
        chosen = [row["choice"] for row in report["tunings"] if row["arm"] == arm]
        ratios = [report["long_judge"][c] for c in chosen]
        bs.say(f"{arm}: chose " + ", ".join(f"{c} {r:.3f}" for c, r in zip(chosen, ratios, strict=True))
               + (f"; mean {statistics.mean(ratios):.4f}, worst {max(ratios):.3f}" if ratios else ""))
    args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
