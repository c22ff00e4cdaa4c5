"""Do a few configs keep their order across timing regimes? For one shape of a family, the given configs are timed
against each other in shuffled rounds (each config's calls captured as a CUDA graph, settled, then timed over a
window with device events, one synchronize per round, as ``_search_clocks.GraphClock.rounds``), under each regime:
calls per graph (the tuner's graphs hold as many calls as fill 0.5 ms of the fastest *eager* call: one, for the MoE
example, whose eager calls are host-bound), the output preallocated or allocated per call (the tuned function's
body), and the settling and window lengths (the tuner's screening samples, sized by eager probes, come to about
1 ms of device time each; the corpus's oracle settles 10 ms and times 20 ms). Prints each regime's median ms per
call of every config, their ratios to the fastest, and the SM clock's median (pynvml).

Launch (one GPU): ``python benchmarks/regime_check.py --family moe --m 512 --configs A,B,... --out FILE``
CPU plumbing: ``TRITON_INTERPRET=1 python benchmarks/regime_check.py --cpu-smoke --family moe --m 8 --configs ...``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (fresh HOME and caches before Triton is imported)
import corpus  # noqa: E402
from _search_clocks import GraphClock, WallClock, sm_clock  # noqa: E402
from bench_gemm_tuning import fresh_kernel, use_triton_cache  # noqa: E402

#: (calls per graph, output, settle ms, window ms): the tuner's graphs (one call, the output allocated per call) at
#: short and long windows, the judge's (20 calls, preallocated), and the two between them, which tell apart the
#: calls per graph and the output's allocation
REGIMES = [(1, "alloc", 1.0, 1.0), (1, "alloc", 5.0, 5.0), (1, "alloc", 10.0, 20.0), (1, "prealloc", 10.0, 20.0),
           (20, "alloc", 10.0, 20.0), (20, "prealloc", 10.0, 20.0)]


def timed_rounds(calls: dict[str, Callable[[], Any]], per_graph: int, settle_ms: float, window_ms: float,
                 rounds: int, seed: int) -> dict[str, list[float]]:
    """Shuffled rounds, as the judge's (:class:`_search_clocks.GraphClock` with ``per_graph`` calls per graph): each
    config settles, then is timed over a window; one synchronize per round (the CPU smoke: the wall clock)."""
    if not bs.GPU:
        return WallClock().rounds(calls, rounds, seed=seed)
    return GraphClock(per_graph).rounds(calls, rounds, settle_ms=settle_ms, window_ms=window_ms, seed=seed)


def time_regimes(space: Any, kernel: Any, st: Any, texts: dict[str, Any], names: list[str], rounds: int,
                 quiet: bool = False) -> list[dict[str, Any]]:
    """Each of :data:`REGIMES` in turn: the configs ``names`` timed against each other in ``rounds`` shuffled rounds
    (:func:`timed_rounds`), the SM clock's median beside them; one row per regime (its median ms per config and
    their ratios to the fastest), each printed unless ``quiet``."""
    sampler = sm_clock()
    rows = []
    for k, (per_graph, output, settle, window) in enumerate(REGIMES):
        make = space.launch if output == "prealloc" else space.call
        calls = {n: make(kernel, st, texts[n]) for n in names}
        if sampler is not None:
            with sampler:
                samples = timed_rounds(calls, per_graph, settle, window, rounds, seed=k)
            clock = sampler.median()
        else:
            samples, clock = timed_rounds(calls, per_graph, settle, window, rounds, seed=k), None
        ms = {n: statistics.median(v) for n, v in samples.items()}
        best = min(ms.values())
        rows.append({"calls": per_graph, "output": output, "settle_ms": settle, "window_ms": window,
                     "sm_mhz": clock, "ms": ms, "ratios": {n: ms[n] / best for n in names}})
        if not quiet:
            print(f"graph of {per_graph:2d}, {output:8s}, settle {settle:4.0f} ms, window {window:4.0f} ms, SM "
                  f"{clock} MHz: " + ", ".join(f"{n} {ms[n]:.4f} ({ms[n] / best:.3f})" for n in names), flush=True)
    return rows


def tune_these(space: Any, kernel: Any, st: Any, configs: list[Any], t: int) -> dict[str, Any]:
    """A fresh tuning (an empty decision cache) of the tuned function over ``configs`` alone: its race's times
    (``ms``: each config's time as ranked; ``samples``: its samples, round by round)."""
    import os
    import tempfile

    from examples.moe_gemm import make_tuned_moe

    os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="regime_", dir=bs.BASE)
    if space.name != "moe":
        raise SystemExit("regime_check --tune: the moe family only")
    tuned = make_tuned_moe(configs, name=f"regime_{st.m}_{t}_{os.getpid()}", kernel=kernel)
    tuned(*st.args)
    ((_, decision),) = tuned.tuner.decisions.items()
    ms = {space.text(configs[o.index]): o.time for o in decision.outcomes if o.time is not None}
    samples = {space.text(configs[o.index]): list(o.round_times) for o in decision.outcomes if o.round_times}
    return {"choice": space.text(configs[decision.index]), "clock": decision.clock, "ms": ms, "samples": samples}


#: the tuner's samples timed side by side (:func:`tuner_samples`): name -> (sized by "probe": an eager probe of
#: 0.5 ms per call, the MoE example's host-bound calls, as the tuner sized a graph's samples before; or by "device":
#: each config's replay timed after its capture, as it sizes them now; the screening's settling ms, its span ms)
VARIANTS = {"probe": ("probe", 5.0, 5.0), "device_3_2": ("device", 3.0, 2.0), "device_5_5": ("device", 5.0, 5.0),
            "device_2_2": ("device", 2.0, 2.0),
            "device_2_5": ("device", 2.0, 5.0), "device_5_2": ("device", 5.0, 2.0), "device_1_1": ("device", 1.0, 1.0)}


def tuner_samples(calls: dict[str, Callable[[], Any]], variant: str, rounds: int, seed: int
                  ) -> dict[str, dict[str, list[float]]]:
    """The tuner's own screening samples (``timing.steady_span`` over a graph of one call, the library's device
    clock, queued calls where the tuner takes them), sized as :data:`VARIANTS` says, in shuffled rounds (one
    synchronize each); per config the sample's time and its two views: the span's and the queued calls'."""
    from triton_dist_tune.measure import clocks, graphs, timing

    sizing, settle_ms, span_ms = VARIANTS[variant]
    clock = clocks.make_clock()
    g = graphs.Graphs(1)
    names = sorted(calls)
    for k, name in enumerate(names):
        g.capture(k, calls[name])
    saved = timing.SCREEN_SETTLE_MS, timing.SCREEN_SPAN_MS, timing.LONG_CALL_SETTLE_MS
    timing.SCREEN_SETTLE_MS, timing.SCREEN_SPAN_MS = settle_ms, span_ms
    timing.LONG_CALL_SETTLE_MS = min(timing.LONG_CALL_SETTLE_MS, settle_ms)
    try:
        steady = {k: timing.steady_calls(False, 0.5 if sizing == "probe" else g.device_ms[k], False, False, None, 1)
                  for k in range(len(names))}
    finally:
        timing.SCREEN_SETTLE_MS, timing.SCREEN_SPAN_MS, timing.LONG_CALL_SETTLE_MS = saved
    rng = random.Random(seed)
    out: dict[str, dict[str, list[float]]] = {n: {"sample": [], "span": [], "queued": []} for n in names}
    for _ in range(rounds):
        order = list(range(len(names)))
        rng.shuffle(order)
        tokens = [(k, timing.steady_span(clock, g.replay(k), steady[k])) for k in order]
        clock.synchronize()
        for k, token in tokens:
            views, each = out[names[k]], steady[k]
            views["sample"].append(timing.read_sample(clock, token, each))
            views["span"].append(clock.read(token.span) / each.span)
            if token.queued is not None:
                views["queued"].append(clock.read(token.queued) / each.queued_timed)
    g.release()
    return out


def configs_parser(description: str) -> argparse.ArgumentParser:
    """The arguments of a script that times a few configs of one shape against each other (this one,
    ``judge_repeat.py``, ``level_choices.py``): the family, the shape, the configs, the rounds, the output file,
    the CPU smoke."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--family", default="moe")
    p.add_argument("--m", type=int, required=True)
    p.add_argument("--configs", required=True, help="config texts, comma-separated")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cpu-smoke", action="store_true")
    return p


def kept_candidates(args: argparse.Namespace, script: str) -> tuple[Any, Any, Any, dict[str, Any], list[str]]:
    """For a script that judges a few kept configs of one shape (:func:`configs_parser`'s ``args``): its own Triton
    cache, a fresh kernel, the shape's state, the kept configs by text and the candidates' names, each checked
    (a name not kept ends the script, naming it); (space, kernel, state, texts, names)."""
    space, _ = corpus.family(args.family, args.cpu_smoke)
    use_triton_cache(str(bs.BASE / f"triton_{script}"))
    kernel = fresh_kernel(space.source)
    st = space.state(args.m)
    texts = {space.text(c): c for c in space.kept(args.m)}
    names = args.configs.split(",")
    missing = [n for n in names if n not in texts]
    if missing:
        raise SystemExit(f"{script}: not kept configs of {args.family} at {args.m}: {missing}")
    return space, kernel, st, texts, names


def main() -> int:
    p = configs_parser(__doc__.splitlines()[0])
    p.add_argument("--variants", default=",".join(VARIANTS), help="the tuner's sample variants to time (VARIANTS)")
    p.add_argument("--tune", type=int, default=1, help="then this many fresh tunings over these configs alone "
                   "(the tuner's race of them), each printing the times it measured")
    args = p.parse_args()
    space, _ = corpus.family(args.family, args.cpu_smoke)
    kernel = fresh_kernel(space.source)
    st = space.state(args.m)
    texts = {space.text(c): c for c in space.configs}
    names = args.configs.split(",")
    missing = [n for n in names if n not in texts]
    if missing:
        raise SystemExit(f"regime_check: not configs of {args.family}: {missing}")
    report: dict[str, Any] = {"gpu": bs.gpu_name(), "family": args.family, "m": args.m,
                              "regimes": time_regimes(space, kernel, st, texts, names, args.rounds)}
    for variant in args.variants.split(",") if bs.GPU else ():
        calls = {n: space.call(kernel, st, texts[n]) for n in names}
        views = tuner_samples(calls, variant, args.rounds, seed=7)
        report.setdefault("tuner_samples", []).append({"variant": variant, "views": views})
        for view in ("sample", "span", "queued"):
            ms = {n: statistics.median(v[view]) for n, v in views.items() if v[view]}
            if ms:
                best = min(ms.values())
                print(f"the tuner's samples, {variant}, {view}: "
                      + ", ".join(f"{n} {ms[n]:.4f} ({ms[n] / best:.3f})" for n in names), flush=True)
    for t in range(args.tune):
        report.setdefault("tunings", []).append(tune_these(space, kernel, st, [texts[n] for n in names], t))
        row = report["tunings"][-1]
        best = min(row["ms"].values())
        print(f"tuning {t} of these configs alone ({row['clock']}): chose {row['choice']}; "
              + ", ".join(f"{n} {row['ms'][n]:.4f} ({row['ms'][n] / best:.3f})" for n in names if n in row["ms"]),
              flush=True)
    args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
