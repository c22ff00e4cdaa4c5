"""Why a warm-up probe reads a near-best config slow (the twenty-fourth session: at an 840-config GEMM's M = 4096 on
one H200, a one-call probe read 1.55-1.60 times the config's device time, a three-call probe 1.19-1.22, with or
without a synchronize before the probe's span). For one shape, the corpus's ``--near`` best configs are each probed
as a tuning's warm-up probes them, after a slow config's calls (the config warmed up before them) and a host gap,
under variants: the gap (none, or a synchronize then ``G`` ms of host idling), the probe's calls (1 or 3), with or
without a synchronize before the span, and remedies (``S`` ms of the config's own calls settled before the span; a
spin hold of the device). Each probe is read against the config's sustained device time (CUDA graphs of 20
launches, settled 10 ms, 20 ms windows, 5 rounds) and printed per variant (median, 90%, max), with the SM clock's
median over the variant (pynvml).

Launch (one GPU): ``python benchmarks/probe_check.py --family gemm_k4096_n4096 --m 4096 --out FILE.json``
CPU plumbing: ``TRITON_INTERPRET=1 python benchmarks/probe_check.py --cpu-smoke --m 16 --out FILE.json``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (fresh HOME and caches before Triton is imported)
import corpus  # noqa: E402
from _search_clocks import GraphClock, WallClock, sm_clock  # noqa: E402
from bench_gemm_tuning import fresh_kernel  # noqa: E402
from replay_search import landscapes  # noqa: E402

#: name -> (host gap ms: None = no synchronize after the slow config, probe calls, synchronize before the span,
#: settling ms of the config's own calls before the span, spin hold ms before the span)
VARIANTS: dict[str, tuple[float | None, int, bool, float, float]] = {
    "gap0_1call": (None, 1, False, 0.0, 0.0),
    "gap0_3call": (None, 3, False, 0.0, 0.0),
    "gap0_1call_sync": (None, 1, True, 0.0, 0.0),
    "gap1_1call": (1.0, 1, False, 0.0, 0.0),
    "gap5_1call": (5.0, 1, False, 0.0, 0.0),
    "gap20_1call": (20.0, 1, False, 0.0, 0.0),
    "gap5_3call": (5.0, 3, False, 0.0, 0.0),
    "gap5_1call_settle1": (5.0, 1, False, 1.0, 0.0),
    "gap5_1call_settle3": (5.0, 1, False, 3.0, 0.0),
    "gap5_1call_hold05": (5.0, 1, False, 0.0, 0.5),
    "gap20_1call_settle3": (20.0, 1, False, 3.0, 0.0),
}


def probe_once(clock: Any, before: Callable[[], Any], call: Callable[[], Any], variant: tuple) -> float:
    """One probe of ``call`` as a tuning's warm-up takes it (a warm-up call, then the probe's span), after two calls of
    the slow config ``before`` and the variant's gap; ms per call."""
    from triton_dist_tune.measure import timing

    gap, calls, sync, settle_ms, hold_ms = variant
    before()
    before()
    if gap is not None:
        clock.synchronize()
        time.sleep(gap / 1e3)
    call()  # the warm-up run
    if settle_ms:
        token = timing.steady_span(clock, call, timing.Steady(1, 1))  # a quick read of the call's time
        clock.synchronize()
        per_call = clock.read(token.span)
        for _ in range(max(0, int(settle_ms / max(per_call, 1e-3)))):
            call()
    if hold_ms:
        clock.hold(hold_ms)
    if sync:
        clock.synchronize()
    token = timing.steady_span(clock, call, timing.Steady(0, calls))
    clock.synchronize()
    return timing.read_sample(clock, token, timing.Steady(0, calls))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", default="gemm_k4096_n4096")
    p.add_argument("--m", default="4096")
    p.add_argument("--corpus", type=Path, default=Path("benchmarks/results/corpus"))
    p.add_argument("--near", type=int, default=4, help="the corpus's best configs probed")
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cpu-smoke", action="store_true")
    args = p.parse_args()
    from triton_dist_tune.measure import clocks

    space, _ = corpus.family(args.family, args.cpu_smoke)
    m = args.m if "x" in args.m else int(args.m)
    st = space.state(m)
    kept = [space.text(c) for c in space.kept(m)]
    land = landscapes(args.corpus).get(bs.oracle_key(space, m))
    if land:
        ranked = sorted((n for n in land["ratios"] if n in kept), key=land["ratios"].__getitem__)
        near = ranked[:args.near]
        slow = next(n for n in ranked if land["ratios"][n] >= 4.0)  # a config the warm-up order puts before
    else:  # the CPU smoke: no corpus
        near, slow = kept[:args.near], kept[-1]
    kernel = fresh_kernel(space.source)
    calls = {n: space.launch(kernel, st, n) for n in near + [slow]}
    for call in calls.values():
        call()  # compiles these configs alone
    judge = GraphClock() if bs.GPU else WallClock()
    sustained = judge.rounds({n: calls[n] for n in near}, 5, seed=1)
    device = {n: statistics.median(sustained[n]) for n in near}
    clock = clocks.make_clock()
    rows: dict[str, dict[str, Any]] = {}
    rng = random.Random(7)
    for name, variant in VARIANTS.items():
        sampler = sm_clock()
        ratios: dict[str, list[float]] = {n: [] for n in near}
        with sampler if sampler is not None else contextlib.nullcontext():
            for _ in range(args.reps):
                for n in rng.sample(near, len(near)):
                    ratios[n].append(probe_once(clock, calls[slow], calls[n], variant) / device[n])
        every = sorted(r for rs in ratios.values() for r in rs)
        mhz = sampler.median() if sampler is not None else None
        rows[name] = {"variant": variant, "ratios": ratios, "median": statistics.median(every),
                      "p90": every[int(0.9 * (len(every) - 1))], "max": every[-1], "sm_mhz": mhz}
        print(f"{name:22s} probe / device time: median {rows[name]['median']:.2f}, 90% {rows[name]['p90']:.2f}, "
              f"max {rows[name]['max']:.2f}; SM clock {mhz} MHz", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"gpu": bs.gpu_name(), "family": args.family, "m": m, "near": near, "slow": slow,
                                    "device_ms": device, "variants": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
