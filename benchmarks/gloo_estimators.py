"""Which statistic ranks configs best behind a real gloo collective (issue 39, item 1: how ranks combine, and how a
config's samples combine), chosen from recorded data rather than assumed.

Records, on ``--ranks`` CPU ranks (separate processes, gloo), ``--rounds`` rounds over ``--configs`` configs of the
live benchmark's landscape (``bench_noise_gloo.py``: the suite's smooth 600-config landscape x1.5, each call sleeping
its config's time then all-reducing a float32 tensor of about 2.5 ms). The configs are the best ones (the bottom of
the landscape, where a tuning must decide) and a few at random; every round runs them in a shuffled order shared by
the ranks, and each sample is the tuner's steady sample of a slow call: one untimed settling call, then one timed
call, on every rank's own host clock. Nothing is exchanged between samples (one all-gather at the end).

Then, offline, for every estimator (how the ranks' times of one sample combine: MAX, median, MIN; then how a
config's samples combine: median, mean, lower quartile, second smallest, min; or each rank's own statistic first,
then the MAX over ranks) and every sample count k, it draws k samples per config at random (1,000 draws) and reports
how often the config with the least estimate lies within 1.10 of the best config's landscape time, the mean of that
ratio, and the rank correlation of the estimates with the landscape. Then, paired as a race's settled block takes
them (:func:`analyse_paired`): a few leaders sampled in the same rounds, ranked by their least sample, by their
ranks within rounds (Friedman, as F-race ranks), by their least ratio to each round's median, or by their median.

Usage::

    PYTHONPATH=$PWD python benchmarks/gloo_estimators.py --out DIR [--ranks 2] [--rounds 24] [--configs 48]
    python benchmarks/gloo_estimators.py --out DIR --replay OLD/estimators.json   # analyse a recording again

Writes ``DIR/estimators.json`` (the samples and the table) and ``DIR/estimators.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "scenarios"))
sys.path.insert(0, str(ROOT / "benchmarks"))

SCALE, BAR, COUNTS, DRAWS = 1.5, 1.10, (1, 2, 3, 4, 6, 8, 12), 1000


def chosen_configs(count: int) -> list[int]:
    """The ``count`` configs: the best third of them from the landscape's bottom, the rest evenly spaced over the
    configs within 1.6 of the best (where a tuning's finalists lie, around the 1.10 bar)."""
    from search_cases import SPACE, landscape_ms

    ranked = sorted(range(len(SPACE)), key=lambda i: (landscape_ms(SPACE[i]), i))
    near = [i for i in ranked if landscape_ms(SPACE[i]) <= 1.6 * landscape_ms(SPACE[ranked[0]])]
    best = near[:count // 3]
    rest = near[len(best):]
    step = max(1, len(rest) // (count - len(best)))
    return sorted(best + rest[::step][:count - len(best)])


def worker(args: argparse.Namespace) -> None:
    """One rank: record every sample, then rank 0 prints ``SAMPLES {json}`` with every rank's."""
    import torch
    import torch.distributed as dist
    from bench_noise_gloo import _calibrate
    from search_cases import SPACE, landscape_ms

    dist.init_process_group("gloo")
    elems = _calibrate(2.5)
    buf = torch.ones(elems)
    configs = chosen_configs(args.configs)

    def call(index: int) -> None:
        time.sleep(landscape_ms(SPACE[index]) * SCALE / 1e3)
        dist.all_reduce(buf)

    samples: dict[int, list[float]] = {i: [] for i in configs}
    for r in range(args.rounds):
        order = list(configs)
        random.Random(f"round{r}").shuffle(order)
        for index in order:
            call(index)  # settling (untimed), as a steady sample of a slow call
            start = time.perf_counter()
            call(index)
            samples[index].append((time.perf_counter() - start) * 1e3)
    gathered: list[dict[int, list[float]] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, samples)
    if dist.get_rank() == 0:
        os.write(1, ("SAMPLES " + json.dumps({"elems": elems, "by_rank": gathered}) + "\n").encode())
    dist.barrier()
    dist.destroy_process_group()


def record(args: argparse.Namespace) -> dict:
    """Start the ranks; rank 0's gathered samples."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(args.ranks),
           "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, __file__, "--worker", "--rounds", str(args.rounds), "--configs", str(args.configs)]
    procs = [subprocess.Popen(command, env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, text=True)
             for r in range(args.ranks)]
    outs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    lines = [line[8:] for line in outs[0].splitlines() if line.startswith("SAMPLES ")]
    if any(p.returncode for p in procs) or not lines:
        raise SystemExit(f"a rank failed: exit codes {[p.returncode for p in procs]}")
    data = json.loads(lines[-1])
    data["by_rank"] = [{int(k): v for k, v in rank.items()} for rank in data["by_rank"]]
    return data


def _q25(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 4]


RANKS: dict[str, Callable[[Sequence[float]], float]] = {"max": max, "median": statistics.median, "min": min}
def _second(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(1, len(ordered) - 1)]


STATS: dict[str, Callable[[Sequence[float]], float]] = {"median": statistics.median, "mean": statistics.fmean,
                                                      "q25": _q25, "second": _second, "min": min}


def analyse(by_rank: list[dict[int, list[float]]], draws: int = DRAWS) -> list[dict]:
    """The table: every estimator at every sample count (see the module docstring)."""
    from search_cases import SPACE, landscape_ms

    configs = sorted(by_rank[0])
    rounds = len(by_rank[0][configs[0]])
    truth = {i: landscape_ms(SPACE[i]) for i in configs}
    best = min(truth.values())
    estimators: dict[str, Callable[[int, list[int]], float]] = {}
    for rname, rfun in RANKS.items():
        for sname, sfun in STATS.items():
            estimators[f"{sname} of {rname}"] = (
                lambda i, picks, rf=rfun, sf=sfun: sf([rf([rank[i][p] for rank in by_rank]) for p in picks]))
    for sname, sfun in STATS.items():
        estimators[f"max of each rank's {sname}"] = (
            lambda i, picks, sf=sfun: max(sf([rank[i][p] for p in picks]) for rank in by_rank))
    rows = []
    rng = random.Random(11)
    plans = {k: [{i: rng.sample(range(rounds), k) for i in configs} for _ in range(draws)]
             for k in COUNTS if k <= rounds}
    for name, estimate in estimators.items():
        for k, picks_list in plans.items():
            ratios, taus = [], []
            for picks in picks_list:
                values = {i: estimate(i, picks[i]) for i in configs}
                choice = min(configs, key=lambda i: (values[i], i))
                ratios.append(truth[choice] / best)
                taus.append(_spearman([values[i] for i in configs], [truth[i] for i in configs]))
            rows.append({"estimator": name, "samples": k, "within": sum(r <= BAR for r in ratios) / len(ratios),
                         "mean_ratio": statistics.fmean(ratios), "worst_ratio": max(ratios),
                         "spearman": statistics.fmean(taus)})
    return rows


#: the paired analysis: leaders raced together, and rounds each leader takes (as a race's settled block does)
PAIRED_LEADERS, PAIRED_ROUNDS = (6, 10), (4, 8, 12)


def analyse_paired(by_rank: list[dict[int, list[float]]], draws: int = DRAWS) -> list[dict]:
    """Rankings that compare leaders within a round (paired, as F-race ranks them) against the least sample: each
    draw takes ``L`` configs at random and ``k`` rounds at random, the same rounds for every one of them (each
    sample the MAX over ranks), and scores the config each statistic ranks first: within 1.10 of the best of the
    ``L``, and the mean ratio. ``rank in round``: the sum of each config's rank within every round (Friedman);
    ``least ratio to round median``: the least, over rounds, of its sample over the round's median."""
    from search_cases import SPACE, landscape_ms

    configs = sorted(by_rank[0])
    rounds = len(by_rank[0][configs[0]])
    group = {i: [max(rank[i][r] for rank in by_rank) for r in range(rounds)] for i in configs}
    truth = {i: landscape_ms(SPACE[i]) for i in configs}
    rng, rows = random.Random(12), []
    for leaders in PAIRED_LEADERS:
        for k in (k for k in PAIRED_ROUNDS if k <= rounds):
            found: dict[str, list[float]] = {"least sample": [], "rank in round": [],
                                             "least ratio to round median": [], "median": []}
            for _ in range(draws):
                chosen, picks = rng.sample(configs, leaders), rng.sample(range(rounds), k)
                ranks = {i: 0 for i in chosen}
                for r in picks:
                    for place, i in enumerate(sorted(chosen, key=lambda i: (group[i][r], i))):
                        ranks[i] += place
                middle = {r: statistics.median(group[i][r] for i in chosen) for r in picks}
                values = {"least sample": {i: min(group[i][r] for r in picks) for i in chosen},
                          "rank in round": ranks,
                          "least ratio to round median": {i: min(group[i][r] / middle[r] for r in picks)
                                                          for i in chosen},
                          "median": {i: statistics.median(group[i][r] for r in picks) for i in chosen}}
                best = min(truth[i] for i in chosen)
                for name, value in values.items():
                    found[name].append(truth[min(chosen, key=lambda i: (value[i], i))] / best)
            rows += [{"estimator": name, "leaders": leaders, "rounds": k,
                      "within": sum(x <= BAR for x in ratios) / len(ratios), "mean_ratio": statistics.fmean(ratios)}
                     for name, ratios in found.items()]
    return rows


def _spearman(a: Sequence[float], b: Sequence[float]) -> float:
    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        out = [0.0] * len(v)
        for r, i in enumerate(order):
            out[i] = float(r)
        return out

    ra, rb = ranks(a), ranks(b)
    n = len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb, strict=True)) / (n * (n * n - 1))


def markdown_paired(rows: list[dict]) -> str:
    """The paired analysis's table (:func:`analyse_paired`)."""
    cases = list(dict.fromkeys((r["leaders"], r["rounds"]) for r in rows))
    lines = ["", "Paired rounds (L leaders, k rounds shared by all of them): share of draws whose first-ranked config "
             "is within 1.10 of the best of the L (mean ratio):", "",
             "| estimator | " + " | ".join(f"L={L}, k={k}" for L, k in cases) + " |",
             "| --- | " + " | ".join("---" for _ in cases) + " |"]
    for name in dict.fromkeys(r["estimator"] for r in rows):
        cells = {(r["leaders"], r["rounds"]): r for r in rows if r["estimator"] == name}
        lines.append(f"| {name} | " + " | ".join(
            f"{cells[c]['within']:.2f} ({cells[c]['mean_ratio']:.3f})" for c in cases) + " |")
    return "\n".join(lines) + "\n"


def markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"# Estimators behind a gloo all-reduce ({meta['ranks']} ranks, {meta['machine']})", "",
             f"- command: `{meta['command']}`; {meta['rounds']} rounds over {meta['configs']} configs; load before "
             f"{meta['load_before']}, after {meta['load_after']}", f"- all-reduce of {meta['elems']} float32", "",
             "Share of random draws whose least estimate is within 1.10 of the best config (mean ratio; mean Spearman "
             "of the estimates with the landscape):", "",
             "| estimator | " + " | ".join(f"k={k}" for k in COUNTS) + " |",
             "| --- | " + " | ".join("---" for _ in COUNTS) + " |"]
    for name in dict.fromkeys(r["estimator"] for r in rows):
        cells = {r["samples"]: r for r in rows if r["estimator"] == name}
        lines.append(f"| {name} | " + " | ".join(
            f"{c['within']:.2f} ({c['mean_ratio']:.3f}; {c['spearman']:.2f})" if (c := cells.get(k)) else "-"
            for k in COUNTS) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=24)
    p.add_argument("--configs", type=int, default=48)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--replay", type=Path, help="analyse this estimators.json's samples again (no recording)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    if args.out is None:
        p.error("--out is required")
    load_before = os.getloadavg()
    if args.replay:
        old = json.loads(args.replay.read_text())
        data, meta = old["data"], old["meta"]
        data["by_rank"] = [{int(k): v for k, v in rank.items()} for rank in data["by_rank"]]
    else:
        started = time.perf_counter()
        data = record(args)
        meta = {"machine": platform.node(), "ranks": args.ranks, "rounds": args.rounds, "configs": args.configs,
                "elems": data["elems"], "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "seconds": time.perf_counter() - started, "load_before": load_before, "load_after": os.getloadavg(),
                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    rows, paired = analyse(data["by_rank"]), analyse_paired(data["by_rank"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "estimators.json").write_text(json.dumps({"meta": meta, "data": data, "rows": rows,
                                                          "paired": paired}))
    report = markdown(meta, rows) + markdown_paired(paired)
    (args.out / "estimators.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
