"""Where a key's tuning time goes (issue 41 item 1): every key's breakdown beside its device-time floor.

Launch (one GPU)::

    python benchmarks/bench_breakdown.py --out DIR [--shapes 16,256,1024,4096,8192] [--passes 3] [--gemm-nk 4096] \
        [--budget 0.1]
    python benchmarks/bench_breakdown.py --out DIR --passes 2 --budget 0.1 --profile   # where the host time goes
    TRITON_INTERPRET=1 python benchmarks/bench_breakdown.py --out DIR --cpu-smoke [--profile]  # plumbing, on CPU

The space is the examples' Triton GEMM over issue 28's large grid (``_search_spaces.GemmSpace``: 840 configs in
bf16 after pruning by shared memory on Hopper; ``--cpu-smoke``: 4 tiny configs in fp32 under Triton's interpreter),
``M x K x N`` with ``N = K = --gemm-nk``, tuned by ``autotune`` with its defaults (the search, steady timing, device
time under 1 ms per call).

``--passes`` passes over ``--shapes``, each pass a fresh tuned function (its own name, so its own cache entries; the
keys of one pass are tuned in order and seed each other's search, as in a program that meets its shapes one by
one). The first pass's first key compiles every config it measures (a fresh kernel copy and a fresh Triton cache):
it is the "first key with compiles"; the later passes find the kernels compiled in memory. With ``--budget S``, one
more pass tunes every shape under ``budget=S`` and reports whether each tuning ended within twice the budget, cut
and provisional (issue 41 item 5c).

Per key it prints the tuner's own breakdown (:class:`triton_dist_tune.records.TimeBreakdown`, group rank 0's, as
the summary line, the rank log and the cache record carry it): compile (configs), capture, warm-up, screening,
race, host, exchanges (count), restore, model, other; the parts sum to the key's wall time. Beside it, the
**device-time floor**: the sum, over every config the tuning ran, of the calls it launched of that config (warm-up
runs, probe, every sample's settling, timed and queued calls, graph replays counted as their calls, the capture's
warm-up call) times that config's own device time per call: the median of its samples as the tuning measured them
(CUDA events around eager spans, or around graph replays when the tuning timed on the device), or its probe's when
it has no sample. It is what the GPU had to do; ``wall / floor`` is how far the key's time is from it.

With ``--profile``, every pass after the first (the kernels compiled: the compile check, the argument restores and
the model, not the compiler) and the budget pass run under ``cProfile`` (the standard library's; the main thread
only: the compile threads are not in it), each written to ``DIR/profile_<pass>.txt``: the garbage collector's
pauses (by generation: a full collection over a heap of torch and Triton objects can take a tenth of a second), the
40 functions with the most cumulative time, then the 40 with the most time of their own. cProfile slows Python
code (often 1.5-2x), so the profiled passes' rows in the tables are marked and read as shares, not as seconds.

``TDT_BENCH_SWITCH_S``, when set, is the interpreter's thread switch interval for the run (``sys.setswitchinterval``;
Python's default is 0.005 s): how long the tuning's thread may wait for the interpreter lock that compile threads
hold (an experiment of issue 41).

Writes ``DIR/breakdown.json`` (every key's breakdown and decision) and ``DIR/breakdown.md`` (the tables).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

if os.environ.get("TDT_BENCH_SWITCH_S"):
    sys.setswitchinterval(float(os.environ["TDT_BENCH_SWITCH_S"]))

import _search_env  # noqa: E402,F401  (fresh HOME and caches before Triton is imported)
import triton  # noqa: E402
from _search_common import GPU, gpu_name, say, sync  # noqa: E402
from _search_spaces import GemmSpace  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from examples.gemm_kernels import H100_SHARED_MEMORY_BYTES, prune_by_shared_memory  # noqa: E402
from triton_dist_tune.records import TIME_PARTS  # noqa: E402

SHAPES = (16, 256, 1024, 4096, 8192)
SMOKE_SHAPES = (16, 32)
#: the table's columns after the key: the breakdown's parts, then the floor and the ratio
HEADER = ("pass", "M", "wall s", *TIME_PARTS, "floor s", "wall/floor", "screened", "cut")


def tuned_gemm(space: GemmSpace, kernel: Any, name: str, budget: float | None) -> Any:
    """``autotune`` (defaults, ``budget`` when given) over the GEMM space, launching ``kernel``."""

    @tdt.autotune([{"config": c} for c in space.configs], key_fn=lambda a, b, c: (tuple(a.shape), tuple(b.shape)),
                  prune_fn=lambda cfg, a, b, c: prune_by_shared_memory(cfg["config"], 2, H100_SHARED_MEMORY_BYTES),
                  name=name, budget=budget)
    def gemm_fn(a, b, c, *, config):
        space._launch(kernel, a, b, c, config)

    return gemm_fn


def tune_pass(space: GemmSpace, kernel: Any, shapes: list[int], label: str, budget: float | None) -> list[dict]:
    """Tune every shape once with a fresh tuned function; one row per key."""
    fn = tuned_gemm(space, kernel, f"breakdown_{label}", budget)
    rows = []
    for m in shapes:
        st = space.state(m)
        sync()
        started = time.perf_counter()
        fn(*st.args)
        sync()
        seconds = time.perf_counter() - started
        decision = next(d for (_, key), d in fn.tuner.decisions.items() if key[0][0] == m)
        spent = decision.breakdown.to_json() if decision.breakdown is not None else {}
        rows.append({"pass": label, "m": m, "call_seconds": seconds, "decision_seconds": decision.seconds,
                     "breakdown": spent, "config": decision.config, "time_ms": decision.time, "cut": decision.cut,
                     "search": decision.search, "clock": decision.clock, "budget": budget})
        say(f"{label} M={m}: {decision.breakdown.text() if decision.breakdown else '?'}"
            + (" [cut]" if decision.cut else ""))
    return rows


#: functions listed per ordering in a profile
PROFILE_TOP = 40


class GcPauses:
    """A ``gc.callbacks`` entry: the collector's pauses by generation (count, seconds, the longest)."""

    def __init__(self) -> None:
        self.started = 0.0
        self.seconds = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.longest = [0.0, 0.0, 0.0]

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            return
        generation, spent = info["generation"], time.perf_counter() - self.started
        self.seconds[generation] += spent
        self.count[generation] += 1
        self.longest[generation] = max(self.longest[generation], spent)

    def text(self) -> str:
        return ", ".join(f"generation {g}: {self.count[g]} pause(s), {self.seconds[g]:.3f} s, longest "
                         f"{self.longest[g] * 1e3:.1f} ms" for g in range(3))


def profiled_pass(space: GemmSpace, kernel: Any, shapes: list[int], label: str, budget: float | None,
                  out: Path | None) -> list[dict]:
    """:func:`tune_pass`, under ``cProfile`` when ``out`` is given (written to ``out/profile_<label>.txt``)."""
    if out is None:
        return tune_pass(space, kernel, shapes, label, budget)
    profile = cProfile.Profile()
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    try:
        rows = profile.runcall(tune_pass, space, kernel, shapes, label, budget)
    finally:
        gc.callbacks.remove(pauses)
    text = io.StringIO()
    text.write(f"# pass {label}: M = {shapes}, budget={budget}, under cProfile (main thread; times inflated)\n\n"
               f"garbage collector pauses (any thread): {pauses.text()}\n")
    for order in ("cumulative", "tottime"):
        text.write(f"\n## top {PROFILE_TOP} by {order}\n")
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(PROFILE_TOP)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"profile_{label}.txt").write_text(text.getvalue())
    for row in rows:
        row["profiled"] = True
    return rows


def cells(row: dict) -> list[str]:
    spent = row["breakdown"]
    floor = spent.get("floor", 0.0)
    wall = spent.get("wall", row["decision_seconds"])
    parts = [f"{spent.get(p, 0.0):.2f}" for p in TIME_PARTS]
    parts[TIME_PARTS.index("compile")] += f" ({spent.get('compiled', 0)})"
    parts[TIME_PARTS.index("exchange")] += f" ({spent.get('exchanges', 0)})"
    screened = row["search"].split(" configs screened")[0].removeprefix("search: ") if row["search"] else "all"
    label = row["pass"] + (" (profiled)" if row.get("profiled") else "")
    return [label, str(row["m"]), f"{wall:.2f}", *parts, f"{floor:.3f}",
            f"{wall / floor:.1f}x" if floor > 0 else "-", screened, "cut" if row["cut"] else ""]


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    return "\n".join(lines + ["| " + " | ".join(cells(r)) + " |" for r in rows])


def budget_lines(rows: list[dict]) -> list[str]:
    """Issue 41 item 5c's check: each budgeted tuning within twice its budget, cut and provisional."""
    out = []
    for r in rows:
        within = r["decision_seconds"] <= 2 * r["budget"]
        out.append(f"- M = {r['m']}: {r['decision_seconds']:.3f} s for budget={r['budget']} "
                   f"({'within' if within else 'OVER'} twice the budget), {'cut' if r['cut'] else 'NOT cut'}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default=None, help="M values, comma-separated")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--gemm-nk", type=int, default=4096)
    parser.add_argument("--budget", type=float, default=None, help="one more pass under budget=S")
    parser.add_argument("--cpu-smoke", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="the passes after the first and the budget pass under cProfile: DIR/profile_<pass>.txt")
    args = parser.parse_args()
    if args.cpu_smoke == GPU:
        parser.error("--cpu-smoke runs on CPU only (TRITON_INTERPRET=1); without it a GPU is needed")
    shapes = [int(s) for s in args.shapes.split(",")] if args.shapes else list(SMOKE_SHAPES if args.cpu_smoke
                                                                             else SHAPES)
    space = GemmSpace(args.cpu_smoke, args.gemm_nk)
    kernel = triton.jit(GemmSpace.source.fn)  # a fresh in-memory compile cache: the first key compiles
    say(f"{len(space.configs)} configs, shapes {shapes}, N = K = {space.n}, {args.passes} pass(es) on {gpu_name()}")
    rows: list[dict] = []
    profiles = args.out if args.profile else None
    for p in range(args.passes):
        rows += profiled_pass(space, kernel, shapes, f"p{p}", None, profiles if p > 0 else None)
    budgeted = (profiled_pass(space, kernel, shapes, "budget", args.budget, profiles) if args.budget is not None
                else [])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "breakdown.json").write_text(json.dumps({"gpu": gpu_name(), "configs": len(space.configs),
                                                         "nk": space.n, "rows": rows + budgeted}, indent=1))
    text = [f"# Where a key's tuning time goes ({gpu_name()}, {len(space.configs)} GEMM configs, N = K = {space.n})",
            "", "Seconds per part on group rank 0 (the parts sum to the wall time); floor: the device time of every "
            "launch the tuning made (see benchmarks/bench_breakdown.py). Pass p0's first key compiles.", "",
            table(rows)]
    if budgeted:
        text += ["", f"## budget={args.budget}", "", table(budgeted), "", *budget_lines(budgeted)]
    (args.out / "breakdown.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
