"""Where a heavy-noise search on 4 gloo ranks loses the best config, read from a live recording and replayed.

Input: the work folder of a ``bench_noise_gloo.py`` run (``noise_gloo_*`` under its temporary folder: one
``tuningN`` per tuning, with its ranks' logs and its cache record). From each tuning's record (group rank 0's
samples of every config: ``round_times``) and its ``search finalists:`` log line:

- ``--summary``: per tuning, the chosen config's and the best finalist's landscape ratio, how many finalists lie
  within 1.05 / 1.10 of the best config, and the best config's own samples (the suite's landscape x1.5 ms: config
  386 is the best, 3.0 ms of sleep);
- the delay pools: every sample less its config's sleep (ms), by kind: the warm-up probe (a screening sample on CPU
  ranks), the screening's later samples, and the race's samples (the finalists' records hold only those).

Then the replay: the search (``PatternSearch``) over the same landscape, each new config's probe and first sample, and
each sample taken again, drawn as its sleep plus a delay from the pools of the tunings given (``--tunings``: one half
to choose a rule on, the other to report it); the finalists then race, chosen by the race's winner (``least``: the
library's ``Race`` with the plan a 4-rank tuning on a host's clock gives its finalists: no sift, no far-behind rule;
or with ``--race-k K`` a cruder model of it, each finalist's least of K samples) or by the search's posterior of
every screening and race sample (``posterior``: the landscape's additive model denoising the choice; ``running``:
the same among the configs the race kept to its end).
Variants of the search: ``baseline`` (the library's), ``optimistic`` (under heavy noise, the configs to sample again
ordered by their optimistic bound, log estimate less ``band`` standard deviations, not by their estimate) and
``corrected`` (under heavy noise, the least of n samples raised by the median gap between the least of a config's
first two samples and of its first n, over the configs sampled n times).

Usage::

    python benchmarks/heavy_noise_replay.py WORK --summary
    python benchmarks/heavy_noise_replay.py WORK --save delays.json     # the delays alone: a WORK for replays
    python benchmarks/heavy_noise_replay.py WORK --rechoose             # the live choices, by the posterior
    python benchmarks/heavy_noise_replay.py WORK --tunings 0-4 --seeds 0-59 --variants baseline,optimistic
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "scenarios"))

from search_cases import SPACE, landscape_ms  # noqa: E402

from triton_dist_tune.function.options import TuneOptions  # noqa: E402
from triton_dist_tune.measure.race import Race  # noqa: E402
from triton_dist_tune.measure.search import TIE_BLOCKS, PatternSearch, SearchPlan  # noqa: E402

SLEEP = [landscape_ms(c) * 1.5 for c in SPACE]
BEST = min(SLEEP)
BEST_INDEX = SLEEP.index(BEST)


def tuning_record(work: Path, k: int) -> tuple[dict[str, Any], list[int]]:
    """Tuning ``k``'s cache record (group rank 0's) and its finalists (rank 0's log line)."""
    record = json.loads(Path(glob.glob(str(work / f"tuning{k}" / "cache" / "*" / "*.json"))[0]).read_text())
    line = next(t for t in (work / f"tuning{k}" / "logs" / "rank-0.log").read_text().splitlines()
                if "search finalists:" in t)
    return record, [int(x) for x in line.split("search finalists:")[1].split()]


def summary(work: Path, tunings: list[int]) -> None:
    """One line per tuning: where the best config and the near-best ones stood."""
    for k in tunings:
        record, finalists = tuning_record(work, k)
        by = {m["index"]: m for m in record["measurements"]}
        ratio = {i: SLEEP[i] / BEST for i in by}
        best = by[BEST_INDEX]
        print(f"tuning {k}: chosen {ratio[record['index']]:.3f}, best finalist {min(ratio[i] for i in finalists):.3f}, "
              f"finalists within 1.05 / 1.10: {sum(ratio[i] <= 1.05 for i in finalists)} / "
              f"{sum(ratio[i] <= 1.10 for i in finalists)} of {len(finalists)}; best config "
              f"{'raced' if BEST_INDEX in finalists else best['state']}, samples "
              f"{[round(t, 2) for t in best['round_times']]}")


def rechoose(work: Path, tunings: list[int]) -> None:
    """Each tuning's finalists chosen again by the search's posterior of the recorded samples (the others' screening
    samples, the finalists' race samples: their screening samples are not in the record), beside the live choice;
    and how much of a round's delay the race's last leaders share (the variance of the round's mean residual over
    the total, of their log samples: i.i.d. delays give one over the leaders)."""
    for k in tunings:
        record, finalists = tuning_record(work, k)
        by = {m["index"]: m for m in record["measurements"]}
        history = {i: m["round_times"] for i, m in by.items() if m["state"] != "pruned" and m["round_times"]}
        post = PatternSearch(SPACE, range(len(SPACE)), SearchPlan(seed="x")).posterior(history)
        chosen = min(finalists, key=lambda i: post.times[i] or math.inf)
        leaders = [m["round_times"] for m in by.values() if m["state"] == "measured" and len(m["round_times"]) >= 8]
        rounds = min(map(len, leaders))
        residuals = [[math.log(t) - statistics.mean(map(math.log, r[:rounds])) for t in r[:rounds]] for r in leaders]
        shared = [statistics.mean(r[j] for r in residuals) for j in range(rounds)]
        share = statistics.mean(x * x for x in shared) / statistics.mean(x * x for r in residuals for x in r)
        print(f"tuning {k}: live {SLEEP[record['index']] / BEST:.3f}, by the posterior {SLEEP[chosen] / BEST:.3f}; "
              f"{len(leaders)} last leaders x {rounds} rounds share {share:.2f} of their variance "
              f"(i.i.d.: {1 / len(leaders):.2f})")


def pools(work: Path, tunings: list[int]) -> dict[str, list[float]]:
    """Every sample less its config's sleep (ms), by kind (``probe``, ``screen``, ``race``), over ``tunings``;
    ``work`` a work folder, or a file ``--save`` wrote (the delays of each tuning)."""
    found: dict[str, list[float]] = {"probe": [], "screen": [], "race": []}
    if work.is_file():
        saved = json.loads(work.read_text())
        for k in tunings:
            for kind, delays in saved[str(k)].items():
                found[kind] += delays
        return found
    for k in tunings:
        record, finalists = tuning_record(work, k)
        for m in record["measurements"]:
            i, times = m["index"], m["round_times"]
            if m["state"] == "pruned" or not times:
                continue
            if i in finalists:
                found["race"] += [t - SLEEP[i] for t in times]
            else:
                found["probe"].append(times[0] - SLEEP[i])
                found["screen"] += [t - SLEEP[i] for t in times[1:]]
    return found


class Optimistic(PatternSearch):
    """Under heavy noise, the configs to sample again ordered by their optimistic bound, not their estimate."""

    def _uncertain(self, ranked: list[int], post: Any, history: Any, sigma: float) -> dict[int, str]:
        reasons = super()._uncertain(ranked, post, history, sigma)
        if post.noise is None or not post.noise.heavy:
            return reasons

        def bound(i: int) -> float:
            return math.log(post.times[i]) - self.plan.band * math.sqrt(post.variance.get(i, sigma ** 2))

        return {i: reasons[i] for i in sorted(reasons, key=lambda i: (bound(i), i))}


class Corrected(PatternSearch):
    """Under heavy noise, each config's least sample raised to the footing of two samples (the probe and one)."""

    def estimates(self, samples: Any, noisy: bool = False, spike: float = math.inf) -> dict[int, float | None]:
        history = self.history(samples)
        times = PatternSearch.estimates(history, noisy, spike)
        if not noisy:
            return times
        lift = {}
        for n in range(3, self.plan.max_samples + 1):
            gaps = sorted(math.log(min(s[:2])) - math.log(min(s[:n])) for s in history.values() if s and len(s) >= n)
            lift[n] = gaps[len(gaps) // 2] if len(gaps) >= 5 else 0.0
        top = self.plan.max_samples
        return {i: t if t is None or len(history[i] or ()) < 3 else t * math.exp(lift[min(len(history[i] or ()), top)])
                for i, t in times.items()}


VARIANTS = {"baseline": PatternSearch, "optimistic": Optimistic, "corrected": Corrected}


def replay(variant: type[PatternSearch], found: dict[str, list[float]], seed: int, choose: str,
           race_k: int, race_plan: dict[str, int] | None = None) -> tuple[float, float, float, int, int, bool]:
    """One search and race; (best finalist's ratio, chosen ratio, samples per config, finalists within 1.05,
    within 1.10, whether the best config raced)."""
    rng = random.Random(seed)

    def draw(kind: str, i: int) -> float:
        return SLEEP[i] + rng.choice(found[kind])

    search = variant(SPACE, range(len(SPACE)), SearchPlan(seed=f"k{seed}"))
    history: dict[int, list[float]] = {}
    batch, samples = search.first(), 0
    while batch:
        for i in batch:
            history[i] = history[i] + [draw("screen", i)] if i in history else [draw("probe", i), draw("screen", i)]
            samples += 1 if len(history[i]) > 2 else 2
        batch = search.next(history, ())
    finalists = search.finalists(history)
    if race_k:  # a model: every finalist ``race_k`` samples
        race = {i: [draw("race", i) for _ in range(race_k)] for i in finalists}
        winner, running = min(finalists, key=lambda i: min(race[i])), set(finalists)
    else:  # the library's race, as a tuning of 4 ranks plans it for the finalists, their probes as the live ones
        plan = replace(TuneOptions().plan(60.0, "steady", f"r{seed}", ranks=4).race, tie_blocks=TIE_BLOCKS,
                       final_top_heavy=0, far_behind=0.0)  # on a host's clock (``Measurer.lockstep``): no sift
        plan = replace(plan, **(race_plan or {}))
        live = Race(sorted(finalists), plan, probes={i: history[i][0] for i in finalists})
        while not live.finished(0.0):
            for i in live.order():
                live.record(i, [draw("race", i)])
            live.end_round()
        race = {i: [t for t in live.entrants[i].samples if t is not None] for i in finalists}
        winner, running = live.winner(), set(live.running)
    if choose == "least":
        chosen = winner
    else:
        times = search.posterior({**history, **{i: history[i] + race[i] for i in finalists}}).times
        among = finalists if choose == "posterior" else sorted(running)  # running: those the race kept to its end
        chosen = min(among, key=lambda i: times[i] or math.inf)
    ratios = [SLEEP[i] / BEST for i in finalists]
    return (min(ratios), SLEEP[chosen] / BEST, (samples + sum(map(len, race.values()))) / len(SPACE),
            sum(r <= 1.05 for r in ratios), sum(r <= 1.10 for r in ratios), BEST_INDEX in finalists)


def span(text: str) -> list[int]:
    """``0-4`` -> [0, 1, 2, 3, 4]; ``3`` -> [3]."""
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="a bench_noise_gloo.py work folder (noise_gloo_*), or a --save file")
    p.add_argument("--summary", action="store_true", help="per tuning, where the best config stood")
    p.add_argument("--rechoose", action="store_true", help="the live finalists chosen again by the posterior")
    p.add_argument("--save", type=Path, help="write each tuning's delays to this file (a WORK for later replays)")
    p.add_argument("--tunings", default="0-9", help="the tunings whose delays are drawn (a range: 0-4)")
    p.add_argument("--seeds", default="0-59")
    p.add_argument("--variants", default="baseline")
    p.add_argument("--choose", default="least,posterior,running", help="least, posterior, running (comma-separated)")
    p.add_argument("--race-plan", default="", help="the race plan's fields changed: min_rounds=6,final_top=6")
    p.add_argument("--race-k", type=int, default=0, help="race samples per finalist (0: the library's race)")
    args = p.parse_args()
    tunings = span(args.tunings)
    if args.summary:
        summary(args.work, tunings)
        return
    if args.rechoose:
        rechoose(args.work, tunings)
        return
    if args.save:
        args.save.write_text(json.dumps({str(k): pools(args.work, [k]) for k in tunings}))
        return
    found = pools(args.work, tunings)
    race_plan = {k: int(v) for k, v in (f.split("=") for f in args.race_plan.split(",") if f)}
    print(f"delays (ms) of tunings {args.tunings}: " + ", ".join(
        f"{k} {len(v)} median {statistics.median(v):.2f}" for k, v in found.items()))
    for name in args.variants.split(","):
        for choose in args.choose.split(","):
            rows = [replay(VARIANTS[name], found, s, choose, args.race_k, race_plan) for s in span(args.seeds)]
            n = len(rows)
            print(f"{name} / {choose}: chosen within 1.05 {sum(r[1] <= 1.05 for r in rows)} / 1.10 "
                  f"{sum(r[1] <= 1.10 for r in rows)} of {n} (mean {statistics.mean(r[1] for r in rows):.3f}, worst "
                  f"{max(r[1] for r in rows):.3f}); a finalist within 1.05 in {sum(r[0] <= 1.05 for r in rows)}; "
                  f"finalists within 1.05 / 1.10 {statistics.mean(r[3] for r in rows):.2f} / "
                  f"{statistics.mean(r[4] for r in rows):.2f}; best config raced {sum(r[5] for r in rows)}; samples "
                  f"per config {statistics.mean(r[2] for r in rows):.2f} (max {max(r[2] for r in rows):.2f})",
                  flush=True)


if __name__ == "__main__":
    main()
