"""When may a search leave out a straggler still compiling? The README's MoE campaign's rank logs, replayed.

A deferred config still compiling when the search has nothing else to screen is left out when the search's
additive model puts it far behind the finalists (``triton_dist_tune/function/searched.py``, ``contenders``). This
script replays that judgement from the screening samples each log holds (the model fitted to the samples taken
before the moment judged), in two ways:

1. **How the model reads good configs.** For every config's first screening that then read within ``--near`` of its
   key's choice, the model's prediction (fitted to the samples before it) over two bars: the slowest finalist's
   screened time (the rule before the eighteenth session) and the model's own prediction for the slowest finalist
   (the rule now). A good config over a bar would have been left out had it been that straggler.
2. **The stages that waited for stragglers alone** (a warm-up of at most two configs that waited 0.2 s or more,
   whose stage screened them alone): the model's prediction for each over the model's own bar, the wait, and how
   the config then read against its key's choice; for each factor, the seconds saved and what was left out. The
   logs do not say whether such a config had been deferred (the rule judges only those) or was named afresh, so
   the seconds saved are an upper bound. Logs written since the eighteenth session name each stage's deferred
   configs on its line (``deferred while they compile: ...``); in those, only configs deferred before count.

Launch: ``python benchmarks/straggler_rule.py LOG [LOG ...] [--near 1.02] [--factors 3,4,5,6]``, each LOG a
``campaign_rank.log.gz`` as ``benchmarks/gpu/_campaign.sh`` leaves it (the README's MoE campaign, 8 experts, top
2, bf16, H200 shared memory). Prints its tables; CPU only.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from moe_kernels import moe_config_space, moe_prune_for  # noqa: E402

from triton_dist_tune.measure.search import PatternSearch, SearchPlan  # noqa: E402
from triton_dist_tune.measure.surrogate import AdditiveModel  # noqa: E402

KEY = re.compile(r"key=\((\d+),")
#: a config's time on this rank, in the rank log's words before and after they said what each time is
MEASURED = re.compile(r"config (\d+) measured: (?:own |group time .*?; this rank's own time )([0-9.]+) ms")
WARM = re.compile(r"warm-up: (\d+) config\(s\) in ([0-9.]+) s")
STAGE = re.compile(r"search stage \d+: (\d+) config\(s\) \((\d+) sampled again\)")
DECISION = re.compile(r"decision: config \d+ .*?group time ([0-9.]+) ms")
DEFERRED = re.compile(r"deferred while they compile: ([\d ]+)")
SPACE = moe_config_space()
_STAGES = itertools.count(1)


@dataclass
class Judged:
    """One config judged at one moment: the model's prediction over the two bars, how it then read."""

    over_screened: float  # the prediction / the slowest finalist's screened time (the old bar)
    over_model: float  # the prediction / the model's prediction for the slowest finalist (the bar now)
    read: float  # its first sample / its key's choice
    wait: float = 0.0  # seconds its stage waited (stragglers alone)
    stage: int = 0  # which stage (stragglers alone): a stage's wait is saved when all of its configs are left out


def judge(search: PatternSearch, history: dict[int, list[float]], config: int) -> tuple[float, float] | None:
    """The model's prediction for ``config`` from ``history``, over the old bar and over the bar now."""
    times = search.posterior(history).times
    ranked, model = search.leaders(times, search.plan.finalists), AdditiveModel(search.grid)
    if not ranked or not model.fit(times) or config not in search.grid.point:
        return None
    predicted = model.predict(config)
    return (math.exp(predicted) / times[ranked[-1]],
            math.exp(predicted - max(model.predict(i) for i in ranked)))


def keys_of(log: Path) -> dict[int, list[str]]:
    """Each key's lines of the log."""
    found: dict[int, list[str]] = {}
    with gzip.open(log, "rt", errors="replace") as f:
        for line in f:
            if (key := KEY.search(line)) is not None:
                found.setdefault(int(key.group(1)), []).append(line)
    return found


def replay(log: Path, near: float) -> tuple[list[Judged], list[Judged]]:
    """(good configs at their first screening, stragglers whose stage screened them alone) of one log."""
    good, alone = [], []
    keys = keys_of(log)
    named = any(DEFERRED.search(line) for lines in keys.values() for line in lines)  # the log names deferrals
    for tokens, lines in keys.items():
        choice = next((float(d.group(1)) for line in lines if (d := DECISION.search(line))), None)
        if choice is None:
            continue
        search = PatternSearch(SPACE, [i for i, c in enumerate(SPACE) if moe_prune_for(c, tokens, 2, 8, 2)],
                               SearchPlan())
        history: dict[int, list[float]] = {}
        deferred: set[int] = set()
        for j, line in enumerate(lines):
            if "search finalists" in line:
                break
            if (d := DEFERRED.search(line)) is not None:
                deferred.update(int(i) for i in d.group(1).split())
            warm = WARM.search(line)
            if warm and int(warm.group(1)) <= 2 and float(warm.group(2)) >= 0.2 and len(history) >= 10:
                stage = next((s for later in lines[j:j + 12] if (s := STAGE.search(later))), None)
                after = [(int(m.group(1)), float(m.group(2))) for later in lines[j + 1:j + 8]
                         if (m := MEASURED.search(later))][:int(warm.group(1))]
                if named:
                    after = [(config, ms) for config, ms in after if config in deferred]
                if after and stage and int(stage.group(1)) == len(after) and int(stage.group(2)) == 0:
                    number = next(_STAGES)
                    for config, ms in after:
                        if (bars := judge(search, history, config)) is not None:
                            alone.append(Judged(*bars, ms / choice, float(warm.group(2)), number))
            if (m := MEASURED.search(line)) is None:
                continue
            config, ms = int(m.group(1)), float(m.group(2))
            if config not in history and ms <= near * choice and len(history) >= 30:
                if (bars := judge(search, history, config)) is not None:
                    good.append(Judged(*bars, ms / choice))
            history.setdefault(config, []).append(ms)
    return good, alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--near", type=float, default=1.02, help="a good config reads within this of the choice")
    parser.add_argument("--factors", default="3,4,5,6", help="factors over the model's own bar to tabulate")
    args = parser.parse_args()
    good: list[Judged] = []
    alone: list[Judged] = []
    for log in args.logs:
        g, a = replay(log, args.near)
        good += g
        alone += a
    print(f"{len(args.logs)} campaign log(s); {len(good)} first screenings within {args.near} of their key's choice")
    print(f"  over the slowest finalist's screened time (the old bar): {sum(j.over_screened > 1 for j in good)}; "
          f"the most {max((j.over_screened for j in good), default=0):.2f} times")
    print(f"  over the model's own prediction for it: {sum(j.over_model > 1 for j in good)}; "
          f"the most {max((j.over_model for j in good), default=0):.2f} times")
    stages: dict[int, list[Judged]] = {}
    for j in alone:
        stages.setdefault(j.stage, []).append(j)
    waits = sum(group[0].wait for group in stages.values())
    print(f"{len(alone)} straggler(s) in {len(stages)} stage(s) of stragglers alone that waited, {waits:.1f} s in all; "
          "each (model / its own bar, wait s, read / choice):")
    print("  " + ", ".join(f"({j.over_model:.2f}, {j.wait:.2f}, {j.read:.2f})" for j in alone))
    print("| factor | good configs over it | stragglers left out | wait saved s | they read x the choice |")
    print("| --- | --- | --- | --- | --- |")
    for factor in (float(f) for f in args.factors.split(",")):
        out = [j for j in alone if j.over_model > factor]
        saved = sum(group[0].wait for group in stages.values() if all(j.over_model > factor for j in group))
        reads = f"{min(j.read for j in out):.2f}-{max(j.read for j in out):.2f}" if out else "-"
        print(f"| {factor:g} | {sum(j.over_model > factor for j in good)} | {len(out)} | {saved:.1f} | {reads} |")


if __name__ == "__main__":
    main()
