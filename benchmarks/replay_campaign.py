"""Replay a **campaign** over the recorded corpus, with no GPU: a function tuned at one shape after another, each
key's search seeded by the keys decided before it, as the live tuner does; and rules that search a seeded key
differently (the first key is never changed), chosen with one family held out.

A campaign is a problem's shapes in the order a program meets them: ascending (the README's MoE campaign), and a
shuffled order (one per seed). Each key is replayed with
:func:`~triton_dist_tune.measure.replay.simulate` over one universe of configs (the union of the sequence's
landscapes, so that an index names the same config at every shape; each key keeps the configs its landscape
recorded), with fresh noise for every sample. The seeds of a key are those of
:func:`~triton_dist_tune.function.searched.search_start`: the two configs with the least time (the estimates the
replay returns, as the live tuner ranks a decision's outcomes) of each of the 4 nearest decided keys (numeric
distance of the shape), nearest first.

**Compiled**: every config a key screened stays compiled for the later keys (a kernel keeps its compiled
specializations), so the campaign compiles the *union* of the configs its keys screened. Per rule the report gives
the misses (a key's best finalist more than 2% behind its best), the worst ratio, configs screened per key, and the
union over the campaign and its mean per key.

Method: every rule of ``RULES`` is replayed over every sequence, order, noise model and seed; for each family F the
rule with no more misses than the default's on the *other* families (at every noise model, then the least union of
compiles there relative to the default's) is F's choice, and its figures on F are held out.

Launch: ``python benchmarks/replay_campaign.py benchmarks/results/corpus/gpu*.json [--seeds 5] [--jobs 2]
[--out benchmarks/results/corpus/replay_campaign.md]``.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_search import NOISE_MODELS, Landscape, NoiseModel, load, publish  # noqa: E402

from triton_dist_tune.function.policy import numeric_distance  # noqa: E402
from triton_dist_tune.function.searched import SEED_KEYS, SEEDS_PER_KEY  # noqa: E402
from triton_dist_tune.measure.replay import run_search, simulate  # noqa: E402
from triton_dist_tune.measure.search import PatternSearch, SearchPlan  # noqa: E402


@dataclass
class Problem:
    """One problem's shapes: a universe of configs (every landscape's, by their description) and per shape the
    kept indices and each one's ratio to that shape's best."""

    family: str
    name: str
    configs: list[dict]
    shapes: list[tuple[int, ...]]
    kept: dict[tuple[int, ...], list[int]]
    ratios: dict[tuple[int, ...], dict[int, float]]


def problems(lands: list[Landscape]) -> list[Problem]:
    """The corpus's problems: landscapes grouped by their name's first part (``gemm_k4096_n4096|16|840``: problem
    ``gemm_k4096_n4096``, shape (16,); ``softmax|4096x4096|600``: shape (4096, 4096))."""
    grouped: dict[str, list[Landscape]] = {}
    for land in lands:
        grouped.setdefault(land.name.split("|")[0], []).append(land)
    found = []
    for name, group in sorted(grouped.items()):
        universe: dict[str, dict] = {}
        for land in group:
            for config in land.configs:
                universe.setdefault(repr(sorted(config.items())), config)
        specs = sorted(universe)
        index = {spec: i for i, spec in enumerate(specs)}
        problem = Problem(group[0].family, name, [universe[s] for s in specs], [], {}, {})
        for land in group:
            shape = tuple(int(x) for x in re.findall(r"\d+", land.name.split("|")[1]))
            at = [index[repr(sorted(c.items()))] for c in land.configs]
            best = min(land.ratios)
            problem.shapes.append(shape)
            problem.kept[shape] = sorted(at)
            problem.ratios[shape] = {i: r / best for i, r in zip(at, land.ratios, strict=True)}
        problem.shapes.sort()
        found.append(problem)
    return found


@dataclass(frozen=True)
class Rule:
    """How a key that has seeds is searched (a key without seeds: the default plan, as written)."""

    name: str
    #: the first look's size, as a share of the default's
    initial_share: float = 1.0
    #: the first look's coverage and random picks taken from configs earlier keys screened (compiled) first: the
    #: library's way since the thirty-sixth session (``PatternSearch``'s ``preferred``); False: as before it
    prefer_compiled: bool = True
    #: the model's checks at most (None: the plan's)
    model_rounds: int | None = None
    #: leaders whose neighbourhoods are explored (None: the plan's)
    leaders: int | None = None
    #: the rings of a leader's neighbourhood explored (3: all; 2: not the rest of each line)
    rings: int = 3
    #: leaders past this many explore only configs earlier keys screened (None: every leader explores all)
    full_leaders: int | None = None
    #: rings past this many explore only configs earlier keys screened
    full_rings: int = 3
    #: no search: a baseline that screens at random as many configs as the default search would at the key from
    #: the same seeds (one sample each) and races the 10 it read fastest (never chosen by the held-out selection)
    random_baseline: bool = False

    def search(self, configs: Sequence[dict], kept: Sequence[int], plan: SearchPlan, seeds: Sequence[int],
               compiled: set[int]) -> PatternSearch:
        """The search of one key under this rule."""
        if seeds and self.model_rounds is not None:
            plan = replace(plan, model_rounds=self.model_rounds)
        if seeds and self.leaders is not None:
            plan = replace(plan, leaders=self.leaders)
        search = RuledSearch(configs, kept, plan, seeds, compiled if self.prefer_compiled else ())
        if seeds:
            search.rings = self.rings
            search.full_leaders = self.full_leaders
            search.full_rings = self.full_rings
            search.free = compiled
            search.initial_count = max(len(search.seeds[:search.initial_count]),
                                       round(search.initial_count * self.initial_share))
        return search


class RuledSearch(PatternSearch):
    """:class:`PatternSearch` whose leaders may explore fewer rings, or only configs screened before."""

    rings = 3
    full_leaders: int | None = None
    full_rings = 3
    free: set[int] = set()

    def neighbours(self, leaders: list[int], times) -> list[int]:
        rings = [self.grid.rings(leader) for leader in leaders]
        full = len(leaders) if self.full_leaders is None else self.full_leaders
        batch: list[int] = []
        for ring in range(self.rings):
            for n, leader_rings in enumerate(rings):
                batch += [other for other in leader_rings[ring] if other not in times and other not in batch
                          and ((n < full and ring < self.full_rings) or other in self.free)]
        return batch


def run(search: PatternSearch, time_of) -> tuple[list[int], dict[int, float | None], int]:
    """``simulate``'s loop over a given search: (finalists, estimates, samples taken)."""
    taken = [0]

    def counted(i: int) -> float | None:
        taken[0] += 1
        return time_of(i)

    finalists, estimates = run_search(search, counted)
    return finalists, estimates, taken[0]


#: every rule but the last takes the first look's configs from those screened before first (the default since the
#: thirty-sixth session: "compiled first" in the earlier reports)
RULES = [
    Rule("default"),
    Rule("first look /2", initial_share=0.5),
    Rule("first look /4", initial_share=0.25),
    Rule("model checks 1", model_rounds=1),
    Rule("leaders 4", leaders=4),
    Rule("leaders 6", leaders=6),
    Rule("rings 2 (no whole lines)", rings=2),
    Rule("leaders 7-8 compiled only", full_leaders=6),
    Rule("leaders 5-8 compiled only", full_leaders=4),
    Rule("whole lines compiled only", full_rings=2),
    Rule("leaders 7-8 and whole lines compiled only", full_leaders=6, full_rings=2),
    Rule("first look in the shuffled order alone (before the thirty-sixth session)", prefer_compiled=False),
    Rule("random search (as many configs as the default, its 10 best raced)", random_baseline=True),
]


@dataclass
class KeyResult:
    shape: tuple[int, ...]
    found: float
    screened: int
    samples: int
    new: int  # configs compiled for this key (screened, not screened by an earlier key)
    seeded: bool


@dataclass
class Campaign:
    """One replayed campaign: each key in the order met, and the union of configs screened."""

    rule: str
    noise: str
    problem: str
    family: str
    order: str
    seed: int
    keys: list[KeyResult] = field(default_factory=list)
    union: int = 0


#: ``contextual_autotune``'s search plan under its defaults (``n_warmup`` 3, ``max_runs`` 1,000: the screening takes
#: at most 60% of the runs, each config ``n_warmup`` + 1 of them; one screening sample per config; contextual/stages.py)
CONTEXTUAL_PLAN = {"max_measured": max(16, int(0.6 * 1000) // (3 + 1)), "max_samples": 1}


def seeds_for(shape: tuple[int, ...], decided: dict[tuple[int, ...], list[int]]) -> list[int]:
    """The seeds of ``shape``'s search as ``search_start`` gives them: the first two configs (by estimated time) of
    each of the 4 decided shapes nearest it, nearest first (``decided``: shape -> its configs, best first)."""
    near = sorted((numeric_distance(shape, other), repr(other), other) for other in decided if other != shape)
    return list(dict.fromkeys(i for _, _, other in near[:SEED_KEYS] for i in decided[other][:SEEDS_PER_KEY]))


def campaign(rule: Rule, problem: Problem, order: str, noise: NoiseModel, seed: int,
             check_default: bool = False, plan_kind: str = "autotune") -> Campaign:
    """Replay one campaign of ``problem``'s shapes (``ascending`` or ``shuffled``) under ``rule``, each key with
    ``autotune``'s plan or ``contextual_autotune``'s (:data:`CONTEXTUAL_PLAN`)."""
    shapes = list(problem.shapes)
    if order == "shuffled":
        random.Random(f"order/{problem.name}/{seed}").shuffle(shapes)
    result = Campaign(rule.name, noise.name, problem.name, problem.family, order, seed)
    decided: dict[tuple[int, ...], list[int]] = {}  # shape -> its configs ranked by estimated time
    compiled: set[int] = set()
    for shape in shapes:
        seeds = seeds_for(shape, decided)
        kept, ratios = problem.kept[shape], problem.ratios[shape]
        rng = random.Random(f"{problem.name}/{shape}/{seed}/{noise.name}/{order}")
        plan = SearchPlan(seed=f"k{seed}/{shape}", **(CONTEXTUAL_PLAN if plan_kind == "contextual" else {}))
        search = (RULES[0] if rule.random_baseline else rule).search(problem.configs, kept, plan, seeds, compiled)
        finalists, estimates, taken = run(search, lambda i: noise.draw(rng, ratios[i]))  # noqa: B023
        if rule.random_baseline:
            drawn = random.Random(f"random/{problem.name}/{shape}/{seed}/{order}").sample(list(kept), len(estimates))
            estimates = {i: noise.draw(rng, ratios[i]) for i in drawn}
            finalists, taken = sorted(drawn, key=lambda i: (estimates[i], i))[:plan.finalists], len(drawn)
        if check_default:  # the default rule replays simulate exactly
            rng = random.Random(f"{problem.name}/{shape}/{seed}/{noise.name}/{order}")
            again = simulate(problem.configs, kept, plan, lambda i: noise.draw(rng, ratios[i]), seeds,  # noqa: B023
                             preferred=compiled)
            assert again == (finalists, estimates), shape
        screened = set(estimates)
        result.keys.append(KeyResult(shape, min(ratios[i] for i in finalists), len(screened), taken,
                                     len(screened - compiled), bool(seeds)))
        compiled |= screened
        decided[shape] = sorted((t, i) for i, t in estimates.items() if t is not None)
        decided[shape] = [i for _, i in decided[shape]]
    result.union = len(compiled)
    return result


def _job(args: tuple) -> Campaign:
    return campaign(*args)


@dataclass
class Totals:
    """Campaigns summed: keys' ratios, configs screened, compiles, and per campaign its union."""

    found: list[float] = field(default_factory=list)
    screened: list[int] = field(default_factory=list)
    seeded_screened: list[int] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    unions: list[int] = field(default_factory=list)

    def add(self, c: Campaign) -> None:
        self.found += [k.found for k in c.keys]
        self.screened += [k.screened for k in c.keys]
        self.seeded_screened += [k.screened for k in c.keys if k.seeded]
        self.samples += [k.samples for k in c.keys]
        self.unions.append(c.union)

    @property
    def misses(self) -> int:
        return sum(f > 1.02 for f in self.found)

    @property
    def union(self) -> int:
        return sum(self.unions)

    def text(self) -> str:
        n = len(self.found)
        return (f"{self.misses}/{n} miss, worst {max(self.found):.3f}, {statistics.mean(self.screened):.0f} screened "
                f"per key ({statistics.mean(self.seeded_screened or [0]):.0f} seeded), union "
                f"{statistics.mean(self.unions):.0f} per campaign = {self.union / len(self.found):.0f} per key")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", type=Path, nargs="+")
    parser.add_argument("--noise-models", default="gauss2,gauss5")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--plan", choices=("autotune", "contextual"), default="autotune",
                        help="each key's search plan: autotune's, or contextual_autotune's under its defaults")
    parser.add_argument("--rules", default=None, help="these rules only (names, separated by ;)")
    parser.add_argument("--out", type=Path, default=None, help="also write the report (markdown) here")
    args = parser.parse_args()
    probs = problems(load(args.corpus))
    models = [NOISE_MODELS[name] for name in args.noise_models.split(",")]
    rules = [r for r in RULES if args.rules is None or r.name in args.rules.split(";") or r.name == "default"]
    orders = ("ascending", "shuffled")
    jobs = [(rule, p, order, model, seed, rule.name == "default" and seed == 0, args.plan)
            for rule in rules for p in probs for order in orders for model in models for seed in range(args.seeds)]
    with Pool(args.jobs) as pool:
        done = pool.map(_job, jobs, chunksize=1)
    families = sorted({p.family for p in probs})

    def total(rule: str, model: str, fams: Sequence[str], order: str | None = None) -> Totals:
        t = Totals()
        for c in done:
            if c.rule == rule and c.noise == model and c.family in fams and order in (None, c.order):
                t.add(c)
        return t

    def key(rule: str, fams: Sequence[str]) -> tuple[int, float]:
        """Misses beyond the default's (summed over the noise models), then the union relative to the default's."""
        extra = sum(max(0, total(rule, m.name, fams).misses - total("default", m.name, fams).misses) for m in models)
        ratio = statistics.mean(total(rule, m.name, fams).union / max(1, total("default", m.name, fams).union)
                                for m in models)  # no campaign of ``fams`` (one family given): 0
        return (extra, ratio)

    names = [r.name for r in rules]
    lines = [f"# Campaign replays: {len(probs)} problems ({', '.join(p.name for p in probs)}), ascending and "
             f"shuffled, {args.seeds} seeds, noise drawn afresh for every sample, {args.plan}'s search plan"
             + (" (one screening sample per config, at most 150 configs screened; seeded as autotune seeds: "
                "contextual_autotune seeds with every decided key's choice and the perf model's best)"
                if args.plan == "contextual" else ""), "",
             "Each key seeded as the live tuner does (choice and runner-up of the 4 nearest decided keys); the first "
             "key of a campaign is never changed. A miss: a key's best finalist more than 2% behind its best. "
             "Union: configs screened by any key of a campaign (= compiled). Per key: the union over the keys.", "",
             "## Held out: each family's rule chosen on the other families", "",
             "(no more misses than the default there at every noise model, then the least union relative to the "
             "default's)", "",
             "| held-out family | rule chosen on the others | noise | default | chosen | union change |",
             "| --- | --- | --- | --- | --- | --- |"]
    for family in families:
        others = [f for f in families if f != family]
        candidates = [r.name for r in rules if not r.random_baseline]
        chosen = min(candidates, key=lambda n: (*key(n, others), names.index(n)))
        for m in models:
            d, c = total("default", m.name, [family]), total(chosen, m.name, [family])
            lines.append(f"| {family} | {chosen} | {m.name} | {d.text()} | {c.text()} | "
                         f"{c.union / d.union - 1:+.0%} |")
    for order in (None, *orders):
        lines += ["", f"## Every rule, every family, {order or 'both orders'}", "",
                  "| rule | noise | " + " | ".join(families) + " | all |",
                  "| --- | --- |" + " --- |" * (len(families) + 1)]
        for name in names:
            for m in models:
                cells = [total(name, m.name, [f], order).text() for f in families]
                cells.append(total(name, m.name, families, order).text())
                lines.append(f"| {name} | {m.name} | " + " | ".join(cells) + " |")
    lines += ["", "## Per key, MoE ascending (the README's campaign), gauss2: mean over seeds", "",
              "| rule | " + " | ".join(str(s[0]) for s in next(p for p in probs if p.family == "moe").shapes)
              + " | union |", "| --- |" + " --- |" * 9]
    for name in names:
        cs = [c for c in done if c.rule == name and c.family == "moe" and c.order == "ascending"
              and c.noise == models[0].name]
        per = [f"{statistics.mean(c.keys[k].screened for c in cs):.0f} "
               f"({statistics.mean(c.keys[k].new for c in cs):.0f} new)" for k in range(len(cs[0].keys))]
        lines.append(f"| {name} | " + " | ".join(per) + f" | {statistics.mean(c.union for c in cs):.0f} |")
    lines += ["", "Rules (a seeded key only): *default*: the library's search, whose first look takes its covering "
              "and random configs from those earlier keys screened before any other (\"compiled first\" before the "
              "thirty-sixth session made it the default); *first look in the shuffled order alone*: as before that; "
              "*leaders 7-8 compiled only*: the 7th and 8th "
              "leaders' neighbours are screened only where an earlier key screened them; *whole lines compiled "
              "only*: the third ring (the rest of each line) likewise; *first look /2*: half the default's size; "
              "*rings 2*: no third ring. Command: `python benchmarks/replay_campaign.py "
              f"benchmarks/results/corpus/gpu*.json --seeds {args.seeds} --jobs 2 --out "
              "benchmarks/results/corpus/replay_campaign.md`."]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
