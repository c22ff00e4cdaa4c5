"""A few configs of one corpus family and shape, timed against each other in three regimes side by side, on one GPU:
does a validation's judge read them as a served layer would?

- ``graph20``: as ``validate_search.py --judge-here`` judges (CUDA graphs of 20 launches of one config, replayed after a
  settling replay, shuffled rounds: ``_search_oracles.judge_here``);
- ``eager``: eager calls back to back, a window of about 10 ms per config and round, shuffled rounds, no synchronize
  between configs (``_oracle.windows``);
- ``among_heavy``: the same windows, each right after 20 ms of a heavy bf16 GEMM (8192^3, cuBLAS), the regime of a
  layer between other layers on a busy, power-limited device (``bench_fidelity.among_heavy``);
- ``graph20_new_output``: as ``graph20``, each graph of 20 calls of the tuned function's body at the config
  (``space.call``: a new output per call, as the tuner times the function) where ``graph20`` launches the kernel
  into one output (the fifty-fourth session: at MoE M = 128 the tuner's race put M64-N128-K64-G1 configs 0.9-1.4%
  ahead of M64-N64-K64-G16-w4-s3, the judge 2.5% behind).

Each regime's ratios are drift-free (each config relative to its round's median config), with the ratios of its even
and odd rounds apart (a regime's reading is no finer than its halves agree). The question it was written for (the
twenty-sixth session): at GEMM M = 16 the judge read `-s4` configs 1.038 where the tuner's race read them within 0.2%
of the `-s5` ones, and at MoE M = 32 the judge read the `w8-s3` tile 1.041-1.061 where the race read it fastest.

``--preludes flush,heavy1,heavy5`` adds a regime per prelude, each the eager windows right after it (``after_flush``:
a 512 MB buffer zeroed, which empties the 60 MB L2 and draws little power; ``after_heavyN``: N ms of the heavy
GEMM): is it the cache or the power limiter's clock that makes ``among_heavy`` read differently, and how short a
prelude gives its order? ``sleepN``: N ms of ``torch.cuda._sleep`` (the device busy, no power drawn, the host ahead
of it); ``gemm4kN``: N ms of 4096^3 bf16 GEMMs, at least one (0.2 ms each on an H200: compute-bound, short);
``copyN``: N ms of 1 GiB device-to-device copies (memory-bound, at least one); ``skinnyN``: N ms of 32 x 4096 by
4096 x 4096 bf16 GEMMs (cuBLAS, memory-bound: a decode step's projections; at least one); ``none``: no prelude.
``--graph-preludes`` the same, with each window's calls replayed from a CUDA graph of
20 calls of its config (``graph_after_*``): graph replay against stream launches. Each regime also records the SM
clock (pynvml, read as each window is queued).

Launch (one GPU)::

    python benchmarks/judge_regimes.py --family gemm_k4096_n4096 --shape 16 --configs A,B,C --rounds 10 --out F.json

``--cpu-smoke``: the interpreter on CPU, the graph20 regime on the wall clock only (plumbing).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (fresh HOME and caches before Triton is imported)
import corpus  # noqa: E402
from _search_clocks import GraphClock, WallClock  # noqa: E402
from _search_oracles import judge_among_heavy, judge_here, launches, ratios_of  # noqa: E402
from bench_gemm_tuning import fresh_kernel  # noqa: E402

PRELUDES = "none, flush, heavyN, gemm4kN, skinnyN, copyN, sleepN"


def repeated_call(kind: str):
    """The call a prelude of N ms repeats: ``heavy`` an 8192^3 and ``gemm4k`` a 4096^3 bf16 GEMM (compute-bound),
    ``skinny`` 32 rows through a 4096^2 weight (a decode step's projection, cuBLAS, memory-bound), ``copy`` 1 GiB
    copied on the device (memory-bound)."""
    import torch

    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    if kind in ("heavy", "gemm4k"):
        side = 8192 if kind == "heavy" else 4096
        x = torch.randn(side, side, **bf16)
        return lambda: torch.matmul(x, x)
    if kind == "skinny":
        rows, weight = torch.randn(32, 4096, **bf16), torch.randn(4096, 4096, **bf16)
        return lambda: torch.matmul(rows, weight)
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def prelude_of(name: str, clocks: list[float]):
    """The lead-in of one regime's windows (see the module docstring); each call appends the SM clock (MHz) read as
    it has queued the prelude, where pynvml can read it."""
    import torch
    from _interleave import Clock
    from _oracle import per_call_ms, run_for

    if name == "none":
        work = lambda per: None  # noqa: E731
    elif name.startswith("sleep"):
        cycles = int(float(name[5:]) * 1.98e6)  # cycles of the SM clock: N ms at an H200's 1,980 MHz
        work = lambda per: torch.cuda._sleep(cycles)  # noqa: E731
    elif name == "flush":
        buffer = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
        work = lambda per: buffer.zero_()  # noqa: E731
    elif (kind := name.rstrip("0123456789.")) in ("heavy", "gemm4k", "skinny", "copy"):  # one call at least
        call = repeated_call(kind)
        per_call, ms = per_call_ms(call), float(name[len(kind):])
        work = lambda per: run_for(call, ms, per_call)  # noqa: E731
    else:
        raise ValueError(f"unknown prelude {name!r}")
    sm = Clock()

    def lead_in(config: str, per: float) -> None:
        work(per)
        if (mhz := sm.read()) is not None:
            clocks.append(mhz)

    return lead_in


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", required=True)
    p.add_argument("--shape", required=True)
    p.add_argument("--configs", required=True, help="comma-separated config names, as the corpus writes them")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--preludes", default="", help=f"comma-separated: {PRELUDES} (N ms)")
    p.add_argument("--graph-preludes", default="", help="the same, before windows of graph replays")
    p.add_argument("--cpu-smoke", action="store_true")
    args = p.parse_args()
    preludes = [x.strip() for x in args.preludes.split(",") if x.strip()]
    graph_preludes = [x.strip() for x in args.graph_preludes.split(",") if x.strip()]
    named = r"none|flush|(heavy|gemm4k|skinny|copy|sleep)\d+(\.\d+)?"
    if any(not re.fullmatch(named, x) for x in preludes + graph_preludes):
        p.error(f"--preludes and --graph-preludes take {PRELUDES} (N ms), got {args.preludes!r} and "
                f"{args.graph_preludes!r}")
    space, _ = corpus.family(args.family, args.cpu_smoke)
    m = args.shape if "x" in args.shape else int(args.shape)
    kept = {space.text(c) for c in space.kept(m)}
    names = sorted(dict.fromkeys(n.strip() for n in args.configs.split(",") if n.strip()))
    missing = [n for n in names if n not in kept]
    if missing or len(names) < 2:
        p.error(f"need two or more of the shape's kept configs; not kept: {missing}")
    kernel = fresh_kernel(space.source)
    report: dict[str, Any] = {"gpu": bs.gpu_name(), "family": args.family, "shape": m, "rounds": args.rounds}
    alone = judge_here(space, m, kernel, names, args.rounds)
    report["graph20"] = {k: alone[k] for k in ("ratios", "best", "halves", "method") if k in alone}
    body = launches(space, m, kernel, names, new_output=True)
    clock = GraphClock() if bs.GPU else WallClock()
    report["graph20_new_output"] = {**ratios_of(clock.rounds(body, args.rounds, seed=m if isinstance(m, int) else 1),
                                                names), "method": clock.label + "; a new output per call"}
    if bs.GPU:
        from _oracle import windows
        calls = launches(space, m, kernel, names)
        report["eager"] = ratios_of(windows(calls, args.rounds, lambda name, per: None, 10.0, 3,
                                            m if isinstance(m, int) else 1), names)
        report["among_heavy"] = judge_among_heavy(space, m, kernel, names, args.rounds)
        graphs = {}
        if graph_preludes:
            captured = {n: GraphClock().capture(calls[n]) for n in names}
            graphs = {n: captured[n].replay for n in names}
        for label, timed, chosen in (("after", calls, preludes), ("graph_after", graphs, graph_preludes)):
            for prelude in chosen:
                clocks: list[float] = []
                lead_in = prelude_of(prelude, clocks)
                report[f"{label}_{prelude}"] = {
                    **ratios_of(windows(timed, args.rounds, lead_in, 10.0, 3, 7), names),
                    "sm_mhz_median": sorted(clocks)[len(clocks) // 2] if clocks else None}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    regimes = [r for r in report
               if r in ("graph20", "graph20_new_output", "eager", "among_heavy")
               or r.startswith(("after_", "graph_after_"))]
    print(f"{args.family} M={m} on {report['gpu']}, {args.rounds} rounds; ratio over each regime's best "
          f"[even, odd rounds]")
    print("| config | " + " | ".join(regimes) + " |")
    print("| --- |" + " --- |" * len(regimes))
    for n in names:
        cells = [f"{report[r]['ratios'][n]:.3f} [{report[r]['halves'][n][0]:.3f}, {report[r]['halves'][n][1]:.3f}]"
                 for r in regimes]
        print(f"| {n} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
