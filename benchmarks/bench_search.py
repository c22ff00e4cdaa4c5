"""Large spaces (issue 28): ours (the defaults: the search) beside stock ``triton.autotune`` and ours exhaustive,
judged against an exhaustive device-time oracle and a sustained eager oracle.

Launch (one GPU)::

    python benchmarks/bench_search.py --out DIR [--spaces gemm,moe] [--shapes 16,256] \
        [--phases oracle,compile,tune,campaign] [--tuners ours,exhaustive,stock] [--tunings 3] \
        [--oracle-cache DIR/oracle.json] [--stock-compile]
    torchrun --nproc-per-node 4 benchmarks/bench_search.py --out DIR --phases campaign   # the campaign on 4 GPUs
    TRITON_INTERPRET=1 python benchmarks/bench_search.py --out DIR --cpu-smoke           # plumbing, on CPU

Spaces (``--spaces``):

- ``gemm``: the 960-config GEMM grid of issue 28 (BM 16-256 x BN 32-256 x BK 32-128 x GROUP_M {1, 8} x warps
  {4, 8} x stages 2-5) pruned by shared memory (840 configs in bf16 on Hopper), ``M x K x N`` with
  ``N = K = 4096`` (``--gemm-nk``), the examples' Triton GEMM (``examples/gemm_kernels.py``);
- ``moe``: the MoE grouped GEMM of ``examples/moe_gemm.py`` (vLLM's 1,920-config space; pruned per M by shared
  memory and shape: 160 configs at M = 16, 1,248 at M = 8192), 8 experts, top 2, N = 3584, K = 4096, bf16.

Shapes (``--shapes``): M = 16, 32, 64, 128, 256, 512, 2048, 8192 by default (most of them small).

Phases (``--phases``, in this order):

1. ``oracle``: the **exhaustive device-time oracle**, per (space, M) missing from ``--oracle-cache``: every kept
   config compiled (in parallel threads), captured as a CUDA graph of 20 launches (outputs preallocated) and
   screened (one settling replay, then timed replays of at least 2 ms, device events); the configs within 1.25x of
   the screened best (at least 16, at most 48) are the finalists: their graphs are replayed in ``--oracle-rounds``
   shuffled rounds, each config 10 ms settling then a 20 ms timed window, with no synchronize between configs (the
   device kept busy); a finalist's ratio is the median over the rounds of its time relative to the round's median
   finalist (drift-free, ``_oracle.scores``) over the best; other configs' ratios are screened time over the
   best finalist's time. The SM clock (pynvml, if installed) is sampled meanwhile. Saved into ``--oracle-cache``
   (default ``DIR/oracle.json``), keyed by space, shape and GPU; reused when present. The oracle and tune phases
   compile into one Triton cache folder (``--triton-cache``, kept across invocations when given; a fresh temp
   folder otherwise).
2. ``compile``: the first key with compiles (``--compile-shape``, default M = 256): ours with the defaults and no
   user code, a fresh Triton cache in a fresh temp folder and a fresh kernel copy; stock only with
   ``--stock-compile`` (it compiles every config serially: 10 minutes or more for 840 configs).
3. ``tune``: per (space, M), kernels compiled in memory first (each tuner its own kernel copy, compiled from one
   shared Triton cache): ``--tunings`` fresh tunings of ours (defaults; empty decision cache each), one of ours
   with ``search="exhaustive"`` (``--tuners`` ``exhaustive``) and ``--stock-tunings`` of stock (``stock``): the
   GEMM through ``triton.autotune`` (same configs, ``key=[M, N, K]``); the MoE kernel through Triton's own method
   (``triton.testing.do_bench`` per kept config, quantiles 0.5/0.2/0.8, least median wins), because the MoE
   tile's ``BLOCK_SIZE_M`` changes the token alignment (vLLM's tuning script does the same). Each choice is judged
   by the device oracle and by a **sustained eager oracle** (``_oracle.sustained``: shuffled rounds, 50 ms
   settling then a 100 ms window of eager calls per candidate, no synchronize between candidates; candidates: the
   device oracle's 8 best and every config a tuner chose; ``--eager-rounds``). The timing each tuning of ours used
   is read from its ``Decision`` (``timing`` and any other field the tuner records) and its rank log.
4. ``campaign``: ``tdt.campaign`` of the MoE function at 16 batch sizes (``--campaign-batches``), compiles
   included (fresh Triton and decision caches), every rank a unit (``local=True``); under torchrun the keys are
   spread over the ranks. Choices at batch sizes in the oracle cache are judged by it.

``--cpu-smoke`` runs every phase on CPU with Triton's interpreter: tiny spaces, 2 shapes, a wall-clock oracle
instead of CUDA graphs and events, stock without ``--stock-compile``; it checks the plumbing, not the numbers.

Fresh ``HOME``, ``TRITON_CACHE_DIR``, ``TRITON_DIST_AUTOTUNE_CACHE_DIR`` and ``TRITON_DIST_AUTOTUNE_LOG_DIR``
(temp folders) are set before Triton is imported. Results merge into ``DIR/search.json`` (several invocations with
the same ``--out`` add up) and ``DIR/search.md`` is rewritten from it. ``TRITON_DIST_AUTOTUNE_SEARCH`` is left as
found (and recorded).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _search_env  # noqa: E402  (fresh HOME and caches before Triton is imported)

BASE = _search_env.BASE

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
from _search_common import GPU, gpu_name, say, sync  # noqa: E402
from _search_oracles import device_oracle, eager_oracle, oracle_key  # noqa: E402
from _search_report import markdown, summary_line  # noqa: E402
from _search_spaces import GemmSpace, MoeSpace  # noqa: E402
from _search_tuners import ours_tuning, precompile  # noqa: E402
from bench_gemm_tuning import fresh_kernel, use_triton_cache  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402

SHAPES = (16, 32, 64, 128, 256, 512, 2048, 8192)
CAMPAIGN_BATCHES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 6144, 8192)


def phase_oracle(spaces: list[Any], shapes: list[int], cache: dict, cache_path: Path, rounds: int,
                 triton_cache: Path) -> None:
    """The ``oracle`` phase: the device oracle of every (space, M) missing from ``cache``, saved to ``cache_path``."""
    use_triton_cache(str(triton_cache))  # the tune phase's folder: its kernel copies load from here
    for space in spaces:
        kernel = fresh_kernel(space.source)  # one copy per space: compiled once, every shape
        for m in shapes:
            key = oracle_key(space, m)
            if key in cache:
                say(f"oracle {space.name} M={m}: cached in {cache_path}")
                continue
            cache[key] = device_oracle(space, m, kernel, rounds)
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=1))


def phase_compile(spaces: list[Any], m: int, stock_too: bool, report: dict) -> None:
    """The ``compile`` phase: the first key with compiles, ours (and stock with ``stock_too``), fresh caches."""
    rows = report.setdefault("compile", {})
    for space in spaces:
        st = space.state(m)
        row: dict[str, Any] = {"m": m, "kept": len(space.kept(m)), "cpus": os.cpu_count()}
        use_triton_cache(tempfile.mkdtemp(prefix="triton_ours_", dir=BASE))
        if GPU:
            from bench_fidelity import triton_runtime_init

            triton_runtime_init()
        got = ours_tuning(space, fresh_kernel(space.source), st, f"bs_compile_{space.name}_{os.getpid()}", None)
        row.update(ours_s=got["seconds"], ours=got["choice"], ours_decision=got["decision"])
        say(f"compile {space.name} M={m}: ours first key with compiles {got['seconds']:.1f} s -> {got['choice']}")
        if stock_too:
            use_triton_cache(tempfile.mkdtemp(prefix="triton_stock_", dir=BASE))
            choice, seconds = space.stock(fresh_kernel(space.source), st)
            row.update(stock_s=seconds, stock=choice)
            say(f"compile {space.name} M={m}: stock first key with compiles {seconds:.1f} s -> {choice}")
        rows[space.name] = row


def phase_tune(spaces: list[Any], shapes: list[int], tuners: list[str], tunings: int, stock_tunings: int,
               eager_rounds: int, cache: dict, report: dict, triton_cache: Path, ours_search: str | None = None
               ) -> None:
    """The ``tune`` phase: per (space, M), the tuners' choices judged by the device and eager oracles."""
    use_triton_cache(str(triton_cache))  # one cache: every kernel copy compiles from it once
    rows = report.setdefault("tune", {})
    for space in spaces:
        ours_kernel, stock_kernel = fresh_kernel(space.source), fresh_kernel(space.source)
        for m in shapes:
            st = space.state(m)
            t0 = time.perf_counter()
            seconds = precompile(space, ours_kernel, st) + precompile(space, stock_kernel, st)
            say(f"tune {space.name} M={m}: kernels compiled in memory ({seconds:.1f} s, not counted)")
            # an earlier invocation's tunings of this key stay (tuners not rerun), and are judged again below
            row: dict[str, Any] = {**rows.get(f"{space.name}|{m}", {}), "m": m, "kept": len(space.kept(m))}
            if "ours" in tuners:
                row["ours"] = [ours_tuning(space, ours_kernel, st, f"bs_{space.name}_{m}_{t}_{os.getpid()}",
                                           ours_search) for t in range(tunings)]
            if "exhaustive" in tuners:
                row["exhaustive"] = [ours_tuning(space, ours_kernel, st, f"bs_ex_{space.name}_{m}_{os.getpid()}",
                                                 "exhaustive")]
            if "stock" in tuners:
                row["stock"] = []
                for _ in range(stock_tunings):
                    choice, secs = space.stock(stock_kernel, st)
                    row["stock"].append({"choice": choice, "seconds": secs})
            chosen = {r["choice"] for who in ("ours", "exhaustive", "stock") for r in row.get(who, [])}
            dev = cache.get(oracle_key(space, m))
            if dev is not None:
                top = sorted(dev["finalists"], key=lambda n: dev["ratios"][n])[:8]
                row["device_oracle"] = {"best": dev["best"], "best_ms": dev["best_ms"],
                                        "ratios": {n: dev["ratios"].get(n) for n in chosen | set(top)}}
            else:
                top = []
                say(f"tune {space.name} M={m}: no device oracle cached (run --phases oracle first)")
            if eager_rounds > 0:
                row["eager_oracle"] = eager_oracle(space, m, ours_kernel, sorted(chosen | set(top)), eager_rounds)
            row["seconds"] = time.perf_counter() - t0
            rows[f"{space.name}|{m}"] = row
            say(f"tune {space.name} M={m}: " + summary_line(row))
            save(report)  # a call cut short at its time limit keeps the keys it finished


def phase_campaign(space: Any, batches: list[int], cache: dict, report: dict) -> None:
    """The ``campaign`` phase: ``tdt.campaign`` of ``space``'s tuned function over ``batches``, compiles included."""
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_initialized() else 1
    use_triton_cache(str(BASE / f"triton_campaign_{world}"))
    os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = str(BASE / f"decisions_campaign_{world}")
    tuned = space.ours(fresh_kernel(space.source), f"bs_campaign_{space.name}", None)
    sync()
    t0 = time.perf_counter()
    summary = tdt.campaign(tuned, lambda m: tdt.Call(*space.state(m).args), list(batches), local=True)
    sync()
    total = time.perf_counter() - t0
    rows = []
    for row in summary.rows:
        m = int(str(row.key).strip("()").split(",")[0])
        choice = space.text(space.chosen(tuned.tuner.space[row.index])) if row.index >= 0 else row.config
        dev = cache.get(oracle_key(space, m))
        rows.append({"m": m, "state": row.state, "seconds": row.seconds, "choice": choice,
                     "device_ratio": None if dev is None else dev["ratios"].get(choice)})
    report.setdefault("campaign", {})[f"{space.name}|{world} rank(s)"] = {
        "world": world, "total_s": total, "failed": len(summary.failed), "rows": rows}
    say(f"campaign {space.name} on {world} rank(s): {len(batches)} keys in {total:.1f} s, "
        f"{len(summary.failed)} failed")


#: where :func:`save` writes (set by :func:`main`)
OUT_DIR: Path | None = None


def save(report: dict) -> None:
    """Write ``search.json`` and ``search.md`` into :data:`OUT_DIR` (rank 0 only)."""
    if OUT_DIR is None or int(os.environ.get("RANK", "0")) != 0:
        return
    (OUT_DIR / "search.json").write_text(json.dumps(report, indent=1, default=str))
    (OUT_DIR / "search.md").write_text(markdown(report))


def main() -> int:
    """The command line (see the module docstring); 0."""
    global OUT_DIR
    p = argparse.ArgumentParser(description="issue 28: large spaces, ours vs stock, device and eager oracles")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--spaces", default="gemm,moe")
    p.add_argument("--shapes", default="", help="comma-separated M (default 16,32,64,128,256,512,2048,8192)")
    p.add_argument("--phases", default="oracle,compile,tune,campaign")
    p.add_argument("--tuners", default="ours,exhaustive,stock", help="of the tune phase: ours, exhaustive, stock")
    p.add_argument("--tunings", type=int, default=3, help="fresh tunings of ours per key")
    p.add_argument("--stock-tunings", type=int, default=1)
    p.add_argument("--ours-search", default=None,
                   help="search= of ours in the tune phase (default: the decorator's default, auto)")
    p.add_argument("--oracle-cache", type=Path, default=None, help="default: OUT/oracle.json")
    p.add_argument("--oracle-rounds", type=int, default=5)
    p.add_argument("--eager-rounds", type=int, default=4, help="rounds of the eager oracle (0: none)")
    p.add_argument("--compile-shape", type=int, default=256)
    p.add_argument("--stock-compile", action="store_true", help="also stock's first key with compiles (slow)")
    p.add_argument("--campaign-batches", default="", help="comma-separated M (default: 16 from 16 to 8192)")
    p.add_argument("--gemm-nk", type=int, default=4096, help="N = K of the GEMM space")
    p.add_argument("--triton-cache", type=Path, default=None,
                   help="Triton cache folder of the oracle and tune phases, kept across invocations (default: a "
                        "fresh temp folder; the compile and campaign phases always use fresh ones)")
    p.add_argument("--cpu-smoke", action="store_true", help="CPU, interpreter, tiny spaces, 2 shapes, no graphs")
    args = p.parse_args()
    smoke = args.cpu_smoke
    world = int(os.environ.get("WORLD_SIZE", "1"))
    phases = args.phases.split(",")
    if GPU:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if world > 1:
        if phases != ["campaign"]:
            raise SystemExit("under torchrun only --phases campaign runs (the other phases use one GPU)")
        tdt.init_distributed()
    shapes = [int(m) for m in args.shapes.split(",")] if args.shapes else ([3, 20] if smoke else list(SHAPES))
    batches = ([int(m) for m in args.campaign_batches.split(",")] if args.campaign_batches
               else ([3, 20] if smoke else list(CAMPAIGN_BATCHES)))
    if smoke:
        args.tunings, args.oracle_rounds, args.eager_rounds = min(args.tunings, 2), 2, 2
    by_name = {"gemm": lambda: GemmSpace(smoke, args.gemm_nk), "moe": lambda: MoeSpace(smoke)}
    spaces = [by_name[s]() for s in args.spaces.split(",")]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    OUT_DIR = out
    cache_path = args.oracle_cache or out / "oracle.json"
    triton_cache = (args.triton_cache or BASE / "triton_tune").resolve()
    triton_cache.mkdir(parents=True, exist_ok=True)
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    report_path = out / "search.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    report["environment"] = {"gpu": gpu_name(), "torch": torch.__version__, "triton": triton.__version__,
                             "cpus": os.cpu_count(),
                             "search_env": os.environ.get("TRITON_DIST_AUTOTUNE_SEARCH"), "base": str(BASE)}
    say(f"{gpu_name()}, spaces {[s.name for s in spaces]} ({[len(s.configs) for s in spaces]} configs before "
        f"pruning), shapes {shapes}, phases {phases}, temp folders under {BASE}")
    for phase in phases:
        t0 = time.perf_counter()
        if phase == "oracle":
            phase_oracle(spaces, shapes, cache, cache_path, args.oracle_rounds, triton_cache)
        elif phase == "compile":
            phase_compile(spaces, shapes[0] if smoke else args.compile_shape, args.stock_compile, report)
        elif phase == "tune":
            phase_tune(spaces, shapes, args.tuners.split(","), args.tunings, args.stock_tunings, args.eager_rounds,
                       cache, report, triton_cache, args.ours_search)
        elif phase == "campaign":
            moe = next((s for s in spaces if s.name == "moe"), None) or MoeSpace(smoke)
            phase_campaign(moe, batches, cache, report)
        else:
            raise SystemExit(f"unknown phase {phase!r}")
        say(f"phase {phase}: {time.perf_counter() - t0:.1f} s")
        save(report)
    if int(os.environ.get("RANK", "0")) == 0:
        print(markdown(report), flush=True)
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
