"""The finalists' race under heavy noise on 4 gloo ranks, replayed: how to spend its samples (the sixty-ninth session).

``heavy_noise_replay.py`` found that the search brings a config within 1.05 of the best to the race in 87-88 of 100
replays, and that the race's choice among its 20 finalists loses the rest. This script replays the same search once
per seed (its probe and screening samples drawn from the live delays of the tunings given) and then races its
finalists under several rules, each seeing the same search:

- ``library``: the library's race as a 4-rank tuning on a host's clock planned it before this study (3 screening
  rounds, 6 settled leaders for 7 rounds: ``max_rounds`` 10; no sift, no far-behind rule, no near-tie block under
  noise) (a ``noisy`` rule, the chosen ``frace6x30p`` as the helper's branch ran it in the library's ``Race``,
  replayed alike in the ``.txt`` results; the live A/B did not keep it, and the rule is gone from here);
- ``top{k}x{R}``: ``k`` settled leaders for ``R`` rounds (rule a: fewer leaders, more rounds);
- ``spare{k}``: ``k`` settled leaders for 7 rounds plus as many as the screening's unused re-samples pay for (rule
  b: the search may take ``resample_share`` of its screened configs again; a re-sample is one call and a settled
  sample about two, so each ``2 k`` unused re-samples buy a settled round);
- ``frace{k}x{R}{p|u}``: ``k`` settled leaders and ``k R`` settled samples, a leader leaving the block once a test on
  the settled rounds says it is slower than the block's leader, its samples going to the others' further rounds
  (rule c, F-race style): ``p`` the library's paired test (:func:`~triton_dist_tune.stats.clearly_slower` on the
  per-round ratios: their median's lower bound over 1.01 at 0.125, or all over 1.25), ``u`` the same test on
  ratios paired at random (the rounds' order shuffled: no round shared).

The race's delays are drawn ``iid`` (the live race delays pooled, as ``heavy_noise_replay.py`` does) or by
``rounds``: each replayed round takes one live race round (the finalists' delays of one round of one live tuning)
and every config of it draws from that round's delays alone, so that a round's delay hits its configs alike as
far as it did live. Every rule sees the same draws up to where it differs.

Costs, modelled on the library's own sample plans (:func:`~triton_dist_tune.measure.timing.steady_calls` with the
host clock's rules and each config's probe as its time per call): a new config takes ``WARMUP_CALLS`` warm-up calls
(its probe) and its first sample; a screening sample settles one call only when it is its round's first (each stage
is a round of new configs, then one of re-samples); a settled sample settles one call and spans 10 ms. Calls per
config are the calls over the 600 configs, as ``bench_noise_gloo.py`` counts rank 0's; seconds are the calls' own
time (each call its sample's drawn time per call; no exchange, compile or start-up).

Live evidence on pairing (``--blocks``): the 20 live tunings of the 40-round arm of the sixty-eighth session's A/B
(6 settled leaders x 40 rounds each), the choice among the 6 by each statistic on ``n`` of their rounds, with the
rounds as recorded and with each config's rounds shuffled apart.

Usage::

    python benchmarks/heavy_noise_race.py --save DIR/delays.json WORK...      # delays and race rounds of live runs
    python benchmarks/heavy_noise_race.py DIR/delays.json --tunings 0-4 --seeds 0-99 --rules library,top3x20
    python benchmarks/heavy_noise_race.py --blocks WORK...                    # statistics on live settled blocks
    python benchmarks/heavy_noise_race.py --blocks --save DIR/blocks.json WORK...   # those blocks, to read later
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from heavy_noise_replay import SLEEP, SPACE, span, tuning_record  # noqa: E402

from triton_dist_tune.function.options import TuneOptions  # noqa: E402
from triton_dist_tune.measure.race import Race, RacePlan  # noqa: E402
from triton_dist_tune.measure.search import TIE_BLOCKS, PatternSearch, SearchPlan  # noqa: E402
from triton_dist_tune.measure.timing import steady_calls  # noqa: E402
from triton_dist_tune.stats import clearly_slower, paired_ratios  # noqa: E402

BEST = min(SLEEP)
#: warm-up calls of a new config (the live 4-rank runs: 378 of them for 182 configs screened, 2.08 each)
WARMUP_CALLS = 2
#: the group's size of the live runs
RANKS = 4
#: the calls bar of ``bench_noise_gloo.py``
CALLS_BAR = 2.5
#: the library's race of a 4-rank tuning on a host's clock (``Measurer.lockstep`` turns the sift and far-behind off)
LIBRARY = replace(TuneOptions().plan(60.0, "steady", "r", ranks=RANKS).race, tie_blocks=TIE_BLOCKS,
                  final_top_heavy=0, far_behind=0.0)


# -- the live delays ---------------------------------------------------------------------------------------------


def live_delays(work: Path, k: int) -> dict[str, Any]:
    """Tuning ``k``'s delays (sample less sleep, ms): the probe, the later screening samples, the race's samples,
    and the race's rounds (each the delays of the finalists that ran in it: a finalist runs from the first round
    until it leaves, so its ``j``-th sample is of round ``j``)."""
    record, finalists = tuning_record(work, k)
    found: dict[str, Any] = {"probe": [], "screen": [], "race": [], "rounds": []}
    for m in record["measurements"]:
        i, times = m["index"], [round(t - SLEEP[m["index"]], 3) for t in m["round_times"]]
        if m["state"] == "pruned" or not times:
            continue
        if i in finalists:
            found["race"] += times
            for j, t in enumerate(times):
                found["rounds"] += [[] for _ in range(j + 1 - len(found["rounds"]))]
                found["rounds"][j].append(t)
        else:
            found["probe"].append(times[0])
            found["screen"] += times[1:]
    return found


def load(path: Path, tunings: list[int]) -> dict[str, Any]:
    """The pooled delays of ``tunings`` of a ``--save`` file, and their race rounds of 4 configs or more."""
    saved = json.loads(path.read_text())
    found: dict[str, Any] = {"probe": [], "screen": [], "race": [], "rounds": []}
    for k in tunings:
        for kind, delays in saved[str(k)].items():
            found[kind] += [r for r in delays if len(r) >= 4] if kind == "rounds" else delays
    return found


# -- the search, once per seed ------------------------------------------------------------------------------------


@dataclass
class Screened:
    """One replayed search: its samples, finalists, costs and unused re-samples."""

    history: dict[int, list[float]]
    finalists: list[int]
    calls: int
    ms: float
    unused: int


def screen(found: dict[str, Any], seed: int) -> Screened:
    """The library's search over the landscape, each sample its sleep plus a live delay (its own random stream)."""
    rng = random.Random(f"search{seed}")
    search = PatternSearch(SPACE, range(len(SPACE)), SearchPlan(seed=f"k{seed}"))
    history: dict[int, list[float]] = {}
    batch, calls, ms = search.first(), 0, 0.0
    while batch:
        for group in ([i for i in batch if i not in history], [i for i in batch if i in history]):
            for n, i in enumerate(group):
                if i not in history:
                    probe = SLEEP[i] + rng.choice(found["probe"])
                    history[i] = [probe]
                    calls, ms = calls + WARMUP_CALLS, ms + WARMUP_CALLS * probe
                t = SLEEP[i] + rng.choice(found["screen"])
                history[i].append(t)
                steady = steady_calls(True, history[i][0], False, n == 0, None, RANKS)
                calls, ms = calls + steady.settle + steady.span, ms + (steady.settle + steady.span) * t
        batch = search.next(history, ())
    unused = max(0, math.ceil(search.plan.resample_share * len(history)) - search.resampled)
    return Screened(history, search.finalists(history), calls, ms, unused)


# -- the race's rules ------------------------------------------------------------------------------------------------


class Eliminating(Race):
    """A race whose settled leaders leave once clearly slower than the block's leader on their settled rounds
    (``paired``: round by round; else on ratios of the rounds shuffled apart), their samples going to the others'
    further rounds: ``budget`` settled samples in all (rule c)."""

    def __init__(self, indices: list[int], plan: RacePlan, budget: int, paired: bool, seed: str,
                 probes: dict[int, float]) -> None:
        super().__init__(indices, plan, probes=probes)
        self.budget, self.paired, self.rng, self.spent = budget, paired, random.Random(seed), 0

    def end_round(self) -> list[int]:
        settling = self.settled_from is not None
        left = super().end_round()
        if not settling:
            return left
        self.spent += len(self.running)  # the round's settled samples
        leaders = [i for i in self.running if self.entrants[i].settled]
        leader = self.leader(leaders)
        best = self.entrants[leader].settled
        for i in leaders:
            if i == leader:
                continue
            mine = list(self.entrants[i].settled)
            if not self.paired:
                self.rng.shuffle(mine)
            if clearly_slower(paired_ratios(mine, best)):
                self.entrants[i].state = "stopped"
                left.append(i)
        # the block runs on while the budget lasts (nobody else leaves a settled block)
        self.plan = replace(self.plan, final_rounds=self.rounds - self.settled_from + 1, max_rounds=self.rounds + 1)
        if self.spent + len(self.running) > self.budget or len(self.running) <= 1:
            self.plan = replace(self.plan, final_rounds=self.rounds - self.settled_from, max_rounds=self.rounds)
        return sorted(left)


def plan_of(rule: str, screened: Screened) -> tuple[RacePlan, int, bool | None]:
    """The race plan of ``rule``, with the settled-sample budget and test of an eliminating rule (None: none)."""
    def leaders(k: int, rounds: int) -> RacePlan:
        top = dict(final_top=k, final_top_fast=0) if k <= LIBRARY.final_top else dict(final_top_fast=k)
        return replace(LIBRARY, **top, final_rounds=rounds, max_rounds=LIBRARY.min_rounds + rounds)

    if rule == "library":
        return LIBRARY, 0, None
    if rule.startswith("top"):
        k, rounds = map(int, rule[3:].split("x"))
        return leaders(k, rounds), 0, None
    if rule.startswith("spare"):
        k = int(rule[5:])
        return leaders(k, 7 + screened.unused // (2 * k)), 0, None
    if rule.startswith("frace"):
        k, rounds = map(int, rule[5:-1].split("x"))
        return leaders(k, rounds), k * rounds, rule.endswith("p")
    raise ValueError(f"unknown rule {rule}")


def race(screened: Screened, rule: str, found: dict[str, Any], model: str, seed: int) -> tuple[int, int, float]:
    """Race the finalists by ``rule``; (the winner, the race's calls, their ms)."""
    rng = random.Random(f"race{seed}")
    plan, budget, paired = plan_of(rule, screened)
    plan = replace(plan, seed=f"r{seed}")
    finalists = sorted(screened.finalists)
    probes = {i: screened.history[i][0] for i in finalists}
    live = (Race(finalists, plan, probes=probes) if paired is None
            else Eliminating(finalists, plan, budget, paired, f"e{seed}", probes))
    rounds: dict[int, list[float]] = {}

    def draw(i: int) -> float:
        if model == "iid":
            return SLEEP[i] + rng.choice(found["race"])
        pool = rounds.setdefault(live.rounds, rng.choice(found["rounds"]))
        return SLEEP[i] + rng.choice(pool)

    calls, ms = 0, 0.0
    while not live.finished(0.0):
        first_round = live.settled_from is None or live.rounds == live.settled_from
        for n, i in enumerate(live.order()):
            t = draw(i)
            live.record(i, [t])
            steady = steady_calls(True, probes[i], live.settling, first_round and n == 0, None, RANKS)
            calls, ms = calls + steady.settle + steady.span, ms + (steady.settle + steady.span) * t
        live.end_round()
    winner = live.winner()
    assert winner is not None
    return winner, calls, ms


# -- reports ------------------------------------------------------------------------------------------------------


def replay(path: Path, tunings: list[int], seeds: list[int], rules: list[str], models: list[str]) -> None:
    """One line per rule and delay model: the choices within 1.05 / 1.10 of the best, calls per config and seconds."""
    found = load(path, tunings)
    searches = [screen(found, s) for s in seeds]
    print(f"tunings {tunings[0]}-{tunings[-1]}, seeds {seeds[0]}-{seeds[-1]}: a finalist within 1.05 in "
          f"{sum(min(SLEEP[i] for i in s.finalists) / BEST <= 1.05 for s in searches)} of {len(seeds)}; unused "
          f"re-samples median {statistics.median(s.unused for s in searches)} (max {max(s.unused for s in searches)})"
          f"; {len(found['rounds'])} live race rounds", flush=True)
    for model in models:
        for rule in rules:
            rows = []
            for s, screened in zip(seeds, searches, strict=True):
                winner, calls, ms = race(screened, rule, found, model, s)
                rows.append((SLEEP[winner] / BEST, (screened.calls + calls) / len(SPACE),
                             (screened.ms + ms) / 1000, calls))
            n = len(rows)
            print(f"{model:6s} {rule:14s} within 1.05 {sum(r[0] <= 1.05 for r in rows):3d} / 1.10 "
                  f"{sum(r[0] <= 1.10 for r in rows):3d} of {n} (mean {statistics.mean(r[0] for r in rows):.3f}, "
                  f"worst {max(r[0] for r in rows):.3f}); calls per config {statistics.mean(r[1] for r in rows):.2f} "
                  f"(max {max(r[1] for r in rows):.2f}, over {CALLS_BAR} in {sum(r[1] > CALLS_BAR for r in rows)}); "
                  f"race calls {statistics.mean(r[3] for r in rows):.0f}; "
                  f"seconds {statistics.mean(r[2] for r in rows):.1f}",
                  flush=True)


def live_blocks(works: list[Path]) -> list[dict[int, list[float]]]:
    """The live settled blocks of 40 rounds or more in ``works``' tunings: each leader's last 40 samples, by index
    (``works``: work folders, or one file ``--save --blocks`` wrote)."""
    if len(works) == 1 and works[0].is_file():
        return [{int(i): v for i, v in b.items()} for b in json.loads(works[0].read_text())]
    found = []
    for work in works:
        for k in range(len(glob.glob(str(work / "tuning*")))):
            record, _ = tuning_record(work, k)
            measured = [m for m in record["measurements"] if m["state"] == "measured"]
            last = min(len(m["round_times"]) for m in measured)
            if last >= 40:
                found.append({m["index"]: [round(t, 3) for t in m["round_times"][last - 40:last]] for m in measured})
    return found


def blocks(found: list[dict[int, list[float]]]) -> None:
    """On the live settled blocks of 40 rounds: the choice among each block's leaders by each statistic, on ``n``
    of its rounds drawn 50 times, with the rounds as recorded (paired) and shuffled apart per config."""

    def ranks(b: dict[int, list[float]], rounds: list[int]) -> dict[int, float]:
        total = dict.fromkeys(b, 0.0)
        for j in rounds:
            for r, i in enumerate(sorted(b, key=lambda i: b[i][j])):
                total[i] += r
        return total

    def to_round(b: dict[int, list[float]], rounds: list[int], of: Callable[[list[float]], float]) -> dict:
        middle = {j: statistics.median(b[k][j] for k in b) for j in rounds}
        return {i: of([b[i][j] / middle[j] for j in rounds]) for i in b}

    rules: dict[str, Callable[[dict[int, list[float]], list[int]], dict]] = {
        "least sample (the library)": lambda b, rr: {i: min(b[i][j] for j in rr) for i in b},
        "median sample": lambda b, rr: {i: statistics.median(b[i][j] for j in rr) for i in b},
        "rank in its round, summed (Friedman)": ranks,
        "median ratio to its round's median": lambda b, rr: to_round(b, rr, statistics.median),
        "least ratio to its round's median": lambda b, rr: to_round(b, rr, min),
    }
    rng = random.Random(1)
    print(f"{len(found)} live settled blocks of 40 rounds, {statistics.mean(map(len, found)):.1f} leaders each")
    for n in (8, 16, 40):
        for paired in (True, False):
            ratios: dict[str, list[float]] = {name: [] for name in rules}
            for b in found:
                best = min(SLEEP[i] for i in b)
                for _ in range(50 if n < 40 else 1):
                    chosen_rounds = sorted(rng.sample(range(40), n))
                    bb = b if paired else {i: rng.sample(v, len(v)) for i, v in b.items()}
                    for name, rule in rules.items():
                        v = rule(bb, chosen_rounds)
                        ratios[name].append(SLEEP[min(v, key=lambda i: (v[i], i))] / best)
            print(f"{n} rounds, {'as recorded (paired)' if paired else 'shuffled apart per config'}:")
            for name, r in ratios.items():
                print(f"    {name:38s} mean ratio to the block's best {statistics.mean(r):.4f}, the block's best "
                      f"chosen in {sum(x <= 1.0001 for x in r) / len(r):.2f}, within 1.05 in "
                      f"{sum(x <= 1.05 for x in r) / len(r):.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", type=Path, nargs="+", help="a --save file (replays), or live work folders")
    p.add_argument("--save", type=Path, help="write the delays of the live work folders given, numbered in order "
                   "(with --blocks: their settled blocks)")
    p.add_argument("--blocks", action="store_true", help="statistics on the live 40-round settled blocks")
    p.add_argument("--tunings", default="0-4")
    p.add_argument("--seeds", default="0-99")
    p.add_argument("--rules", default="library")
    p.add_argument("--models", default="iid,rounds")
    args = p.parse_args()
    if args.blocks and args.save:
        args.save.write_text(json.dumps(live_blocks(args.paths)))
        return
    if args.blocks:
        blocks(live_blocks(args.paths))
        return
    if args.save:
        saved, k = {}, 0
        for work in args.paths:
            for t in range(len(glob.glob(str(work / "tuning*")))):
                saved[str(k)], k = live_delays(work, t), k + 1
        args.save.write_text(json.dumps(saved))
        return
    replay(args.paths[0], span(args.tunings), span(args.seeds), args.rules.split(","), args.models.split(","))


if __name__ == "__main__":
    main()
