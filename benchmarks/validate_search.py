"""Judge ``autotune``'s choices on a GPU against the recorded corpus (issue 33, "GPU choices"): for each shape of a
family, fresh tunings with the defaults (an empty decision cache each, kernels compiled beforehand: the cost "once
compiled"), each choice's ratio read from the corpus landscape of the same GPU, and optionally the first key with
compiles (a fresh Triton cache, no user code). ``--judge-here N`` also judges each shape's choices on this host:
the corpus's N best configs and every config chosen, timed against each other after the tunings as the corpus's
oracle times its finalists (each row's ``ratio_here``), and on a GPU also among heavy layers (each row's
``ratio_among_heavy``: ``_search_oracles.judge_among_heavy``); the corpus was recorded on another host, and hosts
can rank its best configs otherwise (``benchmarks/corpus_vs_host.py``). The first judge times graphs of 20 launches
of one config; a served layer runs among other layers, and some configs read otherwise there. On one H200, GEMM
M = 16's ``-s4`` tiles, judged 1.016-1.038 so, read 1.000-1.012 among heavy layers. The MoE example's ``w8-s3`` tile
at M = 32, judged 1.04-1.06, read 4% ahead of its neighbours there in two processes; in a third, the ``G1-s3``
tiles read 4% ahead in half the rounds and level in the other half (``benchmarks/judge_regimes.py``, which times a
few configs in three regimes side by side; ``results/session_h200_26``, calls 5-7).

On a GPU the corpus holds no landscapes of, ``--corpus-gpu NAME`` reads another GPU's (``"NVIDIA H200"``): each
row's ``ratio`` is then that host's, and ``--judge-here`` (the other GPU's N best configs and the choices, timed
here) is this machine's only judge.

Launch (one GPU; the corpus must hold this GPU's landscapes, or name another's with ``--corpus-gpu``)::

    python benchmarks/validate_search.py --family gemm_k4096_n4096 --corpus benchmarks/results/corpus \
        --tunings 3 --out DIR/v.json [--first-key 256] [--judge-here 8]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (fresh HOME and caches before Triton is imported)
import corpus  # noqa: E402
import race_samples  # noqa: E402
from _search_oracles import judge_among_heavy, judge_here  # noqa: E402
from _search_tuners import decision_info  # noqa: E402
from bench_gemm_tuning import fresh_kernel, use_triton_cache  # noqa: E402
from replay_search import landscapes  # noqa: E402

#: every warm-up probe of the tuning running now, in warm-up order: (config index, the time per call of the config
#: warmed up before it, which sets the probe's calls, this probe's time per call, the host's seconds since the
#: previous config's warm-up ended, this warm-up's seconds); filled by :func:`record_probes`
PROBES: list[tuple[int, float, float | None, float | None, float]] = []
#: every screening sample of the tuning running now, batch by batch (a stage's new configs, or its configs sampled
#: again): (config index, its time per call or None for a failure, the batch's number from 0, seconds from the
#: tuning's first batch to this one's start, its place in the batch's measurement order); filled by
#: :func:`record_probes`
SAMPLES: list[tuple[int, float | None, int, float, int | None]] = []
#: when each batch of screening samples of the tuning running now began (``time.perf_counter``)
BATCHES: list[float] = []


def record_probes() -> None:
    """Record every config's warm-up probe (``--record-probes``): wraps the measurer's warm-up of one config; and
    every screening sample with its batch, when the batch began and its place in the batch's measurement order (a
    phase of the machine shows as a run of samples in that order, a config's own mode does not)."""
    from triton_dist_tune.function.searched import Searched
    from triton_dist_tune.measure.lockstep import Measurer
    warm, screened, lockstep = Measurer._warm, Searched._screened, Measurer.lockstep

    def measured(self: Any, *args: Any, **kwargs: Any) -> Any:
        BATCHES.append(time.perf_counter())
        return lockstep(self, *args, **kwargs)

    def sampled(self: Any, outcome: Any, history: Any, outcomes: Any) -> None:
        SAMPLES.append((outcome.index, outcome.time if outcome.usable else None, len(BATCHES) - 1,
                        BATCHES[-1] - BATCHES[0], outcome.order[-1] if outcome.order else None))
        screened(self, outcome, history, outcomes)

    ended = [0.0]  # when the last warm-up ended

    def recorded(self: Any, index: int, config: Any, desc: str, aligned: bool, previous_ms: float) -> Any:
        began = time.perf_counter()
        got = warm(self, index, config, desc, aligned, previous_ms)
        gap = began - ended[0] if PROBES else None
        ended[0] = time.perf_counter()
        PROBES.append((index, previous_ms, got[0], gap, ended[0] - began))
        return got

    Measurer._warm, Measurer.lockstep, Searched._screened = recorded, measured, sampled


def tune_once(space: Any, kernel: Any, st: Any, name: str) -> dict[str, Any]:
    """``bench_search.ours_tuning``, plus the group's time of every config the tuning screened ({text: ms}): against
    the landscape it tells a search that never screened the best from a screening that mis-timed it; with
    ``--record-probes``, every warm-up probe ([text, the previous config's ms per call, the probe's, the host's
    seconds since the warm-up before it ended, its warm-up's seconds], in warm-up order) and the configs screened by
    their probe alone."""
    os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="decisions_", dir=bs.BASE)
    PROBES.clear()
    SAMPLES.clear()
    BATCHES.clear()
    tuned = space.ours(kernel, name, None)
    bs.sync()
    t0 = time.perf_counter()
    tuned(*st.args)
    bs.sync()
    seconds = time.perf_counter() - t0
    decided = {**tuned.tuner.decided, **tuned.tuner.decided_in}
    choice = space.text(space.chosen(next(iter(decided.values()))))
    screened: dict[str, float] = {}
    raced: dict[str, list[float]] = {}  # the round times of the configs raced MIN_ROUNDS rounds or more
    spent, rounds, probed = "", 0, []
    text_of = lambda index: space.text(space.chosen(tuned.tuner.space[index]))  # noqa: E731
    for decision in tuned.tuner.decisions.values():
        spent = decision.breakdown.text() if decision.breakdown is not None else ""
        rounds = decision.rounds
        for o in decision.outcomes:
            text = text_of(o.index)
            if o.time is not None:
                screened[text] = o.time
            if o.probed:
                probed.append(text)
            if len(o.round_times) >= race_samples.MIN_ROUNDS:
                raced[text] = list(o.round_times)
    got = {"choice": choice, "seconds": seconds, "decision": decision_info(tuned, name), "screened": screened,
           "breakdown": spent, "raced": raced, "rounds": rounds, "probed": probed}
    if PROBES:
        got["probes"] = [[text_of(i), previous, ms, gap, took] for i, previous, ms, gap, took in PROBES]
        got["samples"] = [[text_of(i), ms, batch, at, place] for i, ms, batch, at, place in SAMPLES]
    return got


def judged_here(space: Any, m: int, kernel: Any, land: dict, rows: list[dict], args: argparse.Namespace,
                report: dict) -> None:
    """Judge shape ``m``'s choices on this host (``--judge-here``): each row gets its ``ratio_here``."""
    ranked = sorted(land["ratios"], key=land["ratios"].__getitem__)[:args.judge_here]
    kept = {space.text(c) for c in space.kept(m)}
    candidates = sorted({n for n in ranked + [r["choice"] for r in rows] if n in kept})
    here = judge_here(space, m, kernel, candidates, args.judge_rounds)
    report.setdefault("here", {})[str(m)] = {**here, "corpus_best": ranked[0] if ranked else None}
    try:  # a second judge: its failure costs its own figures, not the rows
        heavy = judge_among_heavy(space, m, kernel, candidates, args.judge_rounds)
    except Exception as error:  # noqa: BLE001
        heavy = None
        report.setdefault("among_heavy", {})[str(m)] = {"error": f"{type(error).__name__}: {error}"}
    if heavy is not None:
        report.setdefault("among_heavy", {})[str(m)] = heavy
    for row in rows:
        row["ratio_here"] = here["ratios"].get(row["choice"])
        row["ratio_here_halves"] = here.get("halves", {}).get(row["choice"])
        if heavy is not None:
            row["ratio_among_heavy"] = heavy["ratios"].get(row["choice"])
    corpus_best = here["ratios"].get(ranked[0]) if ranked else None
    repeat = here.get("repeat_max_dev")
    bs.say(f"{args.family} M={m} judged here ({len(candidates)} configs, {args.judge_rounds} rounds): best "
           f"{here['best']}, the corpus's best at {corpus_best}; choices "
           + ", ".join(f"{r['choice']} {r['ratio_here']:.3f}" for r in rows)
           + ("" if repeat is None else f"; its even and odd rounds disagree by up to {100 * repeat:.1f}%"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", required=True)
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--shapes", default="")
    p.add_argument("--tunings", type=int, default=3)
    p.add_argument("--first-key", default="", help="also time the first key with compiles at this shape")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cpu-smoke", action="store_true", help="the interpreter on CPU, tiny spaces: plumbing only")
    p.add_argument("--one-sample", action="store_true",
                   help="screen with one sample per config (the search before issue 39), for a side-by-side run")
    p.add_argument("--no-far-behind", action="store_true",
                   help="give every screened config its steady sample (before the probe screened those far behind)")
    p.add_argument("--screen-settle-ms", type=float, default=None,
                   help="the screening samples' settling (timing.SCREEN_SETTLE_MS), for a side-by-side run")
    p.add_argument("--round-settle-ms", type=float, default=None,
                   help="the extra settling of a round's first sample (timing.ROUND_SETTLE_MS), side by side")
    p.add_argument("--long-call-settle-ms", type=float, default=None,
                   help="the screening settling of device-bound calls (timing.LONG_CALL_SETTLE_MS), side by side")
    p.add_argument("--graph-screen-span-ms", type=float, default=None,
                   help="a graph's screening span (timing.GRAPH_SCREEN_SPAN_MS), for a side-by-side run")
    p.add_argument("--settled-span-ms", type=float, default=None,
                   help="the settled block's span (timing.SETTLED_SPAN_MS), for a side-by-side run")
    p.add_argument("--probe-one-call-ms", type=float, default=None,
                   help="a probe's one-call threshold (timing.PROBE_ONE_CALL_MS), for a side-by-side run")
    p.add_argument("--judge-here", type=int, default=0, metavar="N",
                   help="also judge each shape's choices on this host: the corpus's N best configs and every config "
                        "chosen, timed against each other after the tunings (its ratio_here; 0: not)")
    p.add_argument("--judge-rounds", type=int, default=10, help="the rounds of that judgement")
    p.add_argument("--corpus-gpu", default="", metavar="NAME",
                   help="read the corpus landscapes recorded on GPU NAME (default: this GPU's), e.g. 'NVIDIA H200'")
    p.add_argument("--record-probes", action="store_true",
                   help="record every warm-up probe of each tuning and the configs screened by their probe alone")
    args = p.parse_args()
    if args.record_probes:
        record_probes()
    from triton_dist_tune.measure import timing
    if args.screen_settle_ms is not None:
        timing.SCREEN_SETTLE_MS = args.screen_settle_ms
    if args.round_settle_ms is not None:
        timing.ROUND_SETTLE_MS = args.round_settle_ms
    if args.long_call_settle_ms is not None:
        timing.LONG_CALL_SETTLE_MS = args.long_call_settle_ms
    if args.graph_screen_span_ms is not None:
        timing.GRAPH_SCREEN_SPAN_MS = args.graph_screen_span_ms
    if args.settled_span_ms is not None:
        timing.SETTLED_SPAN_MS = args.settled_span_ms
    if args.probe_one_call_ms is not None:
        timing.PROBE_ONE_CALL_MS = args.probe_one_call_ms
    if args.no_far_behind:
        from triton_dist_tune.measure import probe_screen
        probe_screen.FAR_BEHIND = float("inf")
    if args.one_sample:  # the tuner builds its plan as SearchPlan(seed=...): the same plan, one screening sample
        import functools

        from triton_dist_tune.function import tuning
        from triton_dist_tune.measure.search import SearchPlan
        tuning.SearchPlan = functools.partial(SearchPlan, max_samples=1)
    known = landscapes(args.corpus)
    space, shapes = corpus.family(args.family, args.cpu_smoke)

    def corpus_key(m: Any) -> str:  # this GPU's landscape of (space, M), or --corpus-gpu's
        return (f"{args.corpus_gpu}|{space.name}|{m}|{len(space.configs)}" if args.corpus_gpu
                else bs.oracle_key(space, m))

    if args.shapes:
        shapes = [s if "x" in s else int(s) for s in args.shapes.split(",")]
    rows: list[dict] = []
    report = {"gpu": bs.gpu_name(), "family": args.family, "cpus": os.cpu_count(), "rows": rows,
              "corpus_gpu": args.corpus_gpu or bs.gpu_name()}
    if args.first_key:
        m = args.first_key if "x" in args.first_key else int(args.first_key)
        use_triton_cache(tempfile.mkdtemp(prefix="triton_first_", dir=bs.BASE))
        got = tune_once(space, fresh_kernel(space.source), space.state(m), f"first_{os.getpid()}")
        report["first_key"] = {"m": m, "seconds": got["seconds"], "choice": got["choice"],
                               "search": got["decision"].get("search"), "breakdown": got["breakdown"]}
        bs.say(f"first key with compiles at {m}: {got['seconds']:.1f} s -> {got['choice']}; {got['breakdown']}")
    # TDT_BENCH_SHARED_TRITON_CACHE: the runs of one A/B (validate_ab.sh) compile the same kernels into one folder
    use_triton_cache(os.environ.get("TDT_BENCH_SHARED_TRITON_CACHE") or str(bs.BASE / "triton_validate"))
    kernel = fresh_kernel(space.source)
    for m in shapes:
        land = known.get(corpus_key(m))
        st = space.state(m)
        bs.precompile(space, kernel, st)
        for t in range(args.tunings):
            got = tune_once(space, kernel, st, f"v_{args.family}_{m}_{t}_{os.getpid()}")
            ratio = land["ratios"].get(got["choice"]) if land else None
            screened = got["screened"]
            best = land["best"] if land else None
            rows.append({"m": m, "tuning": t, "corpus_key": corpus_key(m), "choice": got["choice"],
                         "ratio": ratio, "seconds": got["seconds"],
                         "search": got["decision"].get("search"), "best_screened": best in screened,
                         "best_sampled": best in screened and best not in got["probed"],
                         "clock": got["decision"].get("clock"), "breakdown": got["breakdown"],
                         "screened": screened, "raced": got["raced"], "rounds": got["rounds"],
                         "probed": got["probed"], **{k: got[k] for k in ("probes", "samples") if k in got}})
            bs.say(f"{args.family} M={m} tuning {t}: {got['choice']} ratio {ratio} in {got['seconds']:.2f} s; "
                   f"{got['decision'].get('search')}; {got['breakdown']}")
        if args.judge_here and land:
            judged_here(space, m, kernel, land, [r for r in rows if r["m"] == m], args, report)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str))
    args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
