"""Are the race's two-level rule's choices better than the medians'? And its placement rule's than one placement's?
(``measure/race.py``, "Two levels" and "Placements".) At MoE M = 24-48 the tiles K128-M16-N128-G1-s3 of 4 and 8
warps read two levels a few per cent apart (``results/session_h200_19``, ``session_h200_20``), and at M = 32 which
level depends on where their output lies (``address_check.py``, ``session_h200_21``): a judgement at one output
placement reads whichever level that placement gives.

One process, one shape, the given configs: fresh tunings of those configs alone (``regime_check.tune_these``, the
tuner's own race of them), alternating two arms (``--compare levels``: the library as it is, ``levels``, against
the library with the two-level rule off, ``medians``; ``--compare placements``: the library, ``placements``,
against the library timing one output placement, ``one``), with one judgement (``_search_oracles.judge_here``:
graphs of 20 launches, shuffled rounds, one preallocated output) after each tuning. The judgements, spread over the
whole run, are averaged per config: the long judge. After the tunings, the judge over output placements
(``address_check.over_placements``: each config writing at 16 offsets of one buffer) gives each config's mean over
them, what a served model's calls cost wherever its buffers lie. Prints each config's ratios by both judges, each
tuning's choice, and each arm's choices against both; writes them to ``--out``. With ``--regimes N``, after each
judgement the configs are also timed under each of ``regime_check.REGIMES`` and by the tuner's own screening
samples (``device_3_2``), N shuffled rounds each: which way of timing reads a config as the race does and which as
the judge does, interleaved in time in one process (a config whose level flips in time reads alike in all of them).

Launch (one GPU): ``python benchmarks/level_choices.py --family moe --m 32 --configs A,B,... --tunings 12
[--compare placements] --out F``
CPU plumbing: ``TRITON_INTERPRET=1 python benchmarks/level_choices.py --cpu-smoke --family moe --m 8 --configs ...``
(on CPU no race is timed on the device, so neither rule applies: both arms are the same library there).
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
from address_check import over_placements  # noqa: E402
from regime_check import configs_parser, kept_candidates, time_regimes, tune_these, tuner_samples  # noqa: E402

from triton_dist_tune.measure import lockstep, race  # noqa: E402

#: the two arms of each comparison: the library as it is first
ARMS = {"levels": ("levels", "medians"), "placements": ("placements", "one")}


def _rule_off(compare: str) -> Any:
    """Turn the compared rule off (``--compare``); returns what puts it back."""
    if compare == "levels":
        rule = race.slower_level
        race.slower_level = lambda ratios: 1.0

        def back() -> None:
            race.slower_level = rule
    else:
        placements = lockstep.PLACEMENTS
        lockstep.PLACEMENTS = 1

        def back() -> None:
            lockstep.PLACEMENTS = placements
    return back


def _report_arms(report: dict[str, Any], arms: tuple[str, ...], judge: str) -> None:
    for arm in arms:
        chosen = [row["choice"] for row in report["tunings"] if row["arm"] == arm]
        ratios = [report[judge][c] for c in chosen]
        bs.say(f"{arm} by the {judge.replace('_', ' ')}: chose "
               + ", ".join(f"{c} {r:.3f}" for c, r in zip(chosen, ratios, strict=True))
               + (f"; mean {statistics.mean(ratios):.4f}, worst {max(ratios):.3f}" if ratios else ""))


def _regimes(space: Any, kernel: Any, st: Any, texts: dict[str, Any], names: list[str], rounds: int,
             t: int) -> dict[str, dict[str, float]]:
    """Each config's ratio to the fastest under every regime of ``regime_check`` and by the tuner's own screening
    samples (median of ``rounds``), by the regime's label; one line printed."""
    got: dict[str, dict[str, float]] = {}
    for row in time_regimes(space, kernel, st, texts, names, rounds, quiet=True):
        got[f"{row['calls']}x-{row['output']}-{row['settle_ms']:g}/{row['window_ms']:g}ms"] = row["ratios"]
    if bs.GPU:
        views = tuner_samples({n: space.call(kernel, st, texts[n]) for n in names}, "device_3_2", rounds, seed=t)
        ms = {n: statistics.median(v["sample"]) for n, v in views.items() if v["sample"]}
        got["tuner-3/2ms"] = {n: ms[n] / min(ms.values()) for n in ms}
    bs.say(f"tuning {t}: regimes: " + "; ".join(
        f"{label} " + " ".join(f"{n.split('-', 4)[-1]} {r:.3f}" for n, r in ratios.items())
        for label, ratios in got.items()))
    return got


def main() -> int:
    p = configs_parser(__doc__.splitlines()[0])
    p.add_argument("--tunings", type=int, default=12, help="fresh tunings in all, alternating the two arms")
    p.add_argument("--compare", choices=sorted(ARMS), default="levels")
    p.add_argument("--regimes", type=int, default=0, help="after each judgement, time the configs under every "
                   "regime of regime_check.py (and the tuner's samples), this many rounds each (0: not)")
    args = p.parse_args()
    arms = ARMS[args.compare]
    space, kernel, st, texts, names = kept_candidates(args, "level_choices")
    compile_all(space, kernel, st, [texts[n] for n in names])
    report: dict[str, Any] = {"gpu": bs.gpu_name(), "family": args.family, "m": args.m, "compare": args.compare,
                              "tunings": [], "judgements": []}
    for t in range(args.tunings):
        arm = arms[t % 2]
        back = _rule_off(args.compare) if arm != arms[0] else (lambda: None)
        try:
            got = tune_these(space, kernel, st, [texts[n] for n in names], t)
        finally:
            back()
        report["tunings"].append({"arm": arm, **got})
        here = judge_here(space, args.m, kernel, names, args.rounds)
        report["judgements"].append(here["ratios"])
        bs.say(f"tuning {t} ({arm}) chose {got['choice']}; judged then: "
               + ", ".join(f"{n} {here['ratios'][n]:.3f}" for n in names))
        if args.regimes:
            report.setdefault("regimes", []).append(_regimes(space, kernel, st, texts, names, args.regimes, t))
    long = {n: statistics.mean(j[n] for j in report["judgements"]) for n in names}
    best = min(long.values())
    report["long_judge"] = {n: long[n] / best for n in names}
    placed = over_placements(st, kernel, texts, names, args.rounds)
    mean = {n: statistics.mean(placed[n]) for n in names}
    report["placements_judge"] = {n: mean[n] / min(mean.values()) for n in names}
    report["placements_ratios"] = placed
    for n in sorted(names, key=long.get):
        seen = [j[n] for j in report["judgements"]]
        bs.say(f"long judge: {n} {long[n] / best:.3f} (one judgement read {min(seen):.3f}-{max(seen):.3f}); over "
               f"{len(placed[n])} output placements {report['placements_judge'][n]:.3f} (one placement read "
               f"{min(placed[n]):.3f}-{max(placed[n]):.3f})")
    _report_arms(report, arms, "long_judge")
    _report_arms(report, arms, "placements_judge")
    for label in report["regimes"][0] if report.get("regimes") else ():
        for n in sorted(names, key=long.get):
            seen = [one[label][n] for one in report["regimes"]]
            bs.say(f"regime {label}: {n} mean {statistics.mean(seen):.3f} (one timing read {min(seen):.3f}-"
                   f"{max(seen):.3f})")
    args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
