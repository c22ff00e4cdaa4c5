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


def _fresh_environment() -> Path:
    """Fresh HOME / Triton / tuner folders, before Triton is imported. Ranks of one torchrun job share one folder
    (named after the job's run id), so that the node's ranks share compiled kernels as they would in a job."""
    if "--cpu-smoke" in sys.argv:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        base = Path(tempfile.gettempdir()) / f"tdt_bench_search_{run_id}"
        base.mkdir(exist_ok=True)
    else:
        base = Path(tempfile.mkdtemp(prefix="tdt_bench_search_"))
    for var, sub in (("HOME", "home"), ("TRITON_CACHE_DIR", "triton"), ("TRITON_DIST_AUTOTUNE_CACHE_DIR", "decisions"),
                     ("TRITON_DIST_AUTOTUNE_LOG_DIR", "logs")):
        (base / sub).mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(base / sub)
    return base


BASE = _fresh_environment()

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
from _oracle import ClockSampler, all_even_odd, host_launch_ms, sustained  # noqa: E402
from _oracle import scores as oracle_scores  # noqa: E402
from bench_gemm_tuning import fresh_kernel, gemm_args, use_triton_cache  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from examples import moe_gemm as moe_mod  # noqa: E402
from examples.gemm_kernels import (  # noqa: E402
    H100_SHARED_MEMORY_BYTES,
    _gemm_kernel,
    large_gemm_config_specs,
    prune_by_shared_memory,
    to_triton_config,
)

GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
SHAPES = (16, 32, 64, 128, 256, 512, 2048, 8192)
CAMPAIGN_BATCHES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 6144, 8192)
GRAPH_CALLS = 20
#: a config whose settling replay is this many times the best screened so far is not timed further
SCREEN_CUTOFF = 3.0
parsed = functools.lru_cache(maxsize=None)(to_triton_config)  # a GEMM config string, parsed once


def say(text: str) -> None:
    """A progress line (rank 0 of a job only), flushed at once."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"[bench_search {time.strftime('%H:%M:%S')}] {text}", flush=True)


def sync() -> None:
    if GPU:
        torch.cuda.synchronize()


# -- the spaces ---------------------------------------------------------------------------------------------------


@dataclass
class State:
    """One shape's tensors: the call's arguments for the tuned function, and a preallocated output for the
    oracle's launches (graphs must not allocate)."""

    m: int
    args: tuple
    out: torch.Tensor


class GemmSpace:
    """The examples' Triton GEMM over issue 28's large space; configs are strings like ``"64x128x64-g8-w4-s3"``."""

    name = "gemm"
    source = _gemm_kernel

    def __init__(self, smoke: bool, nk: int) -> None:
        self.smoke = smoke
        self.n = self.k = 32 if smoke else nk
        self.dtype = torch.float32 if smoke else torch.bfloat16
        self.configs = (["16x32x16-g1-w4-s2", "32x32x16-g1-w4-s2", "16x32x32-g8-w4-s2", "32x32x32-g8-w4-s2"]
                        if smoke else large_gemm_config_specs(2, H100_SHARED_MEMORY_BYTES))

    def text(self, config: str) -> str:
        return config

    @staticmethod
    def chosen(entry: dict[str, Any]) -> str:
        """The config of an entry of the tuned function's space (``{"config": spec}``)."""
        return entry["config"]

    def kept(self, m: int) -> list[str]:
        return [c for c in self.configs if prune_by_shared_memory(c, 2, H100_SHARED_MEMORY_BYTES)]

    def state(self, m: int) -> State:
        device = "cuda" if GPU else "cpu"
        gen = torch.Generator().manual_seed(m)
        a = torch.randn(m, self.k, generator=gen).to(device, self.dtype)
        b = torch.randn(self.k, self.n, generator=gen).to(device, self.dtype)
        c = torch.empty(m, self.n, device=device, dtype=self.dtype)
        return State(m, (a, b, c), c)

    def _launch(self, kernel: Any, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, config: str,
                warmup: bool = False) -> None:
        cfg = parsed(config)
        kw = cfg.kwargs
        m, n = c.shape
        grid = (triton.cdiv(m, kw["BLOCK_M"]) * triton.cdiv(n, kw["BLOCK_N"]), 1)
        meta = {"EVEN_K": a.shape[1] % kw["BLOCK_K"] == 0, "num_warps": cfg.num_warps,
                "num_stages": cfg.num_stages, **kw}
        if warmup:  # compile only
            kernel.warmup(*gemm_args(a, b, c), grid=grid, **meta)
        else:
            kernel[grid](*gemm_args(a, b, c), **meta)

    def launch(self, kernel: Any, st: State, config: str) -> Callable[[], None]:
        a, b, c = st.args
        return lambda: self._launch(kernel, a, b, c, config)

    def compile(self, kernel: Any, st: State, config: str) -> None:
        a, b, c = st.args
        self._launch(kernel, a, b, c, config, warmup=True)

    def ours(self, kernel: Any, name: str, search: str | None) -> Callable[..., Any]:
        space = self

        @tdt.autotune([{"config": c} for c in self.configs], key_fn=lambda a, b, c: (tuple(a.shape), tuple(b.shape)),
                      prune_fn=lambda cfg, a, b, c: prune_by_shared_memory(cfg["config"], 2, H100_SHARED_MEMORY_BYTES),
                      name=name, **moe_mod.search_option(search))
        def gemm_fn(a, b, c, *, config):
            space._launch(kernel, a, b, c, config)

        return gemm_fn

    def stock(self, kernel: Any, st: State) -> tuple[str, float]:
        """One tuning by ``triton.autotune`` over the kept configs (its own autotuner over ``kernel``)."""
        a, b, c = st.args
        kept = self.kept(st.m)
        if not GPU:  # triton.autotune needs a driver: the interpreter has none; its method by hand instead
            return stock_loop(self, kernel, st, kept)
        tuned = triton.autotune(configs=[to_triton_config(s) for s in kept], key=["M", "N", "K"])(kernel)
        m, n = c.shape
        even = all(a.shape[1] % to_triton_config(s).kwargs["BLOCK_K"] == 0 for s in kept)
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]), 1)  # noqa: E731
        sync()
        t0 = time.perf_counter()
        tuned[grid](*gemm_args(a, b, c), EVEN_K=even)
        sync()
        seconds = time.perf_counter() - t0
        best = next(iter(tuned.cache.values()))
        kw = best.kwargs
        return (f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}-g{kw['GROUP_M']}-w{best.num_warps}"
                f"-s{best.num_stages}"), seconds


class MoeSpace:
    """The MoE grouped GEMM of ``examples/moe_gemm.py``; configs are dicts of ints."""

    name = "moe"
    source = moe_mod.fused_moe_kernel

    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.problem = moe_mod.CPU_PROBLEM if smoke else moe_mod.GPU_PROBLEM
        self.dtype = torch.float32 if smoke else torch.bfloat16
        self.configs = moe_mod.moe_config_space(tiny=smoke)
        device = "cuda" if GPU else "cpu"
        self.w = moe_mod.make_weights(self.problem, device, self.dtype)

    def text(self, config: dict[str, int]) -> str:
        return moe_mod.config_text(config)

    @staticmethod
    def chosen(entry: dict[str, Any]) -> dict[str, int]:
        """The config of an entry of the tuned function's space (the six keywords themselves)."""
        return entry

    def kept(self, m: int) -> list[dict[str, int]]:
        p = self.problem
        return [c for c in self.configs if moe_mod.moe_prune_for(c, m, p["top_k"], p["experts"], 2)]

    def state(self, m: int) -> State:
        p = moe_mod.make_problem(m, self.w, self.problem["top_k"])
        out = torch.empty(m, self.problem["top_k"], self.problem["n"], dtype=self.dtype, device=self.w.device)
        return State(m, (p.a, p.w, p.routing), out)

    def launch(self, kernel: Any, st: State, config: dict[str, int]) -> Callable[[], None]:
        a, w, routing = st.args
        return lambda: moe_mod.moe_gemm(a, w, routing, st.out, config, kernel)

    def prepare(self, st: State, configs: list[dict[str, int]]) -> None:
        """The token alignment of every BLOCK_SIZE_M among ``configs`` (kept by the routing)."""
        for block_m in sorted({c["BLOCK_SIZE_M"] for c in configs}):
            st.args[2].aligned(block_m)

    def compile(self, kernel: Any, st: State, config: dict[str, int]) -> None:
        a, w, routing = st.args
        aligned = routing.aligned(config["BLOCK_SIZE_M"])
        meta = {k: v for k, v in config.items() if k.startswith(("BLOCK", "GROUP"))}
        kernel.warmup(*moe_mod.kernel_args(a, w, st.out, aligned, routing.top_k), top_k=routing.top_k,
                      num_warps=config["num_warps"], num_stages=config["num_stages"], grid=(1,), **meta)

    def ours(self, kernel: Any, name: str, search: str | None) -> Callable[..., Any]:
        return moe_mod.make_tuned_moe(self.configs, name=name, search=search, kernel=kernel)

    def stock(self, kernel: Any, st: State) -> tuple[str, float]:
        """Triton's autotuner's method by hand: ``do_bench`` per kept config (median; least wins)."""
        return stock_loop(self, kernel, st, self.kept(st.m), self.call)

    def call(self, kernel: Any, st: State, config: dict[str, int]) -> Callable[[], Any]:
        """The tuned function's body at one config (a new output per call, as ours runs it)."""
        a, w, routing = st.args
        return lambda: moe_mod.moe_gemm(a, w, routing, None, config, kernel)


def stock_loop(space: Any, kernel: Any, st: State, kept: list[Any],
               call: Callable[..., Callable[[], Any]] | None = None) -> tuple[str, float]:
    """Triton's autotuner's method by hand: :func:`bench_stock` per config, the least median wins; (choice,
    seconds)."""
    call = call or space.launch
    sync()
    t0 = time.perf_counter()
    best, best_ms = None, math.inf
    for config in kept:
        try:
            ms = bench_stock(call(kernel, st, config))
        except Exception:  # Triton's autotuner drops configs that cannot run
            sync()
            continue
        if ms < best_ms:
            best, best_ms = config, ms
    sync()
    return space.text(best), time.perf_counter() - t0


def bench_stock(fn: Callable[[], Any]) -> float:
    """``triton.testing.do_bench`` as Triton's autotuner calls it (its median); on CPU a plain wall clock."""
    if GPU:
        return triton.testing.do_bench(fn, quantiles=(0.5, 0.2, 0.8))[0]
    fn()
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    return (time.perf_counter() - t0) / 3 * 1e3


# -- clocks -------------------------------------------------------------------------------------------------------


def sm_clock() -> Any:
    """A sampler of the SM clock (``_oracle.ClockSampler``, pynvml), or None without pynvml."""
    try:
        import pynvml  # noqa: F401
    except Exception:
        return None
    return ClockSampler()


class GraphClock:
    """Device time of a config: a CUDA graph of :data:`GRAPH_CALLS` launches, replayed (GPU only)."""

    label = "CUDA graph of 20 launches, replayed; device events"

    def __init__(self) -> None:
        self.stream = torch.cuda.Stream()

    def capture(self, call: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """A graph of :data:`GRAPH_CALLS` calls, captured on a side stream with the low-level API (the
        ``torch.cuda.graph`` context empties the allocator's cache at every capture: thousands of captures)."""
        call()  # outside the graph: the first launch (and the MoE alignment for this BLOCK_SIZE_M)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.stream):
            # each graph its own memory pool: a pool shared by graphs that were freed is released with them, and a
            # capture into it then fails an allocator assertion (seen on an H100, torch 2.11)
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                for _ in range(GRAPH_CALLS):
                    call()
            finally:
                graph.capture_end()
        torch.cuda.synchronize()
        return graph

    def screen(self, call: Callable[[], None], min_ms: float = 2.0, cutoff_ms: float = math.inf) -> float:
        """ms per call: one settling replay, then at least ``min_ms`` of replays timed with device events; a
        config whose settling replay takes over ``cutoff_ms`` per call is not timed further (the settling replay's
        time is returned: it is no contender)."""
        graph = self.capture(call)
        s0, s1, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        s0.record()
        graph.replay()
        s1.record()
        torch.cuda.synchronize()
        per_replay = max(s0.elapsed_time(s1), 1e-3)
        if per_replay / GRAPH_CALLS > cutoff_ms:
            return per_replay / GRAPH_CALLS
        reps = min(50, max(1, math.ceil(min_ms / per_replay)))
        s1.record()
        for _ in range(reps):
            graph.replay()
        e.record()
        torch.cuda.synchronize()
        return s1.elapsed_time(e) / (reps * GRAPH_CALLS)

    def rounds(self, calls: dict[str, Callable[[], None]], rounds: int, settle_ms: float = 10.0,
               window_ms: float = 20.0, seed: int = 0) -> dict[str, list[float]]:
        """Shuffled rounds over the finalists' graphs: each settles ``settle_ms`` then is timed over a window of
        ``window_ms`` (device events), no synchronize between configs (one per round). {name: [ms per call]}"""
        graphs = {name: self.capture(call) for name, call in calls.items()}
        per = {name: self.screen_graph(g) for name, g in graphs.items()}
        rng = random.Random(seed)
        out: dict[str, list[float]] = {}
        for _ in range(rounds):
            order = list(graphs)
            rng.shuffle(order)
            marks = []
            for name in order:
                per_replay = per[name] * GRAPH_CALLS
                for _ in range(max(1, math.ceil(settle_ms / per_replay))):
                    graphs[name].replay()
                n = max(1, math.ceil(window_ms / per_replay))
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(n):
                    graphs[name].replay()
                e.record()
                marks.append((name, s, e, n))
            torch.cuda.synchronize()
            for name, s, e, n in marks:
                out.setdefault(name, []).append(s.elapsed_time(e) / (n * GRAPH_CALLS))
        return out

    @staticmethod
    def screen_graph(graph: torch.cuda.CUDAGraph) -> float:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        graph.replay()
        s.record()
        graph.replay()
        e.record()
        torch.cuda.synchronize()
        return max(s.elapsed_time(e), 1e-3) / GRAPH_CALLS


class WallClock:
    """The CPU smoke test's stand-in: wall-clock time of eager calls (the interpreter has no device)."""

    label = "CPU smoke: wall clock of eager calls (no device, no graphs)"

    def screen(self, call: Callable[[], None], min_ms: float = 0.0, cutoff_ms: float = math.inf) -> float:
        call()
        t0 = time.perf_counter()
        call()
        return (time.perf_counter() - t0) * 1e3

    def rounds(self, calls: dict[str, Callable[[], None]], rounds: int, seed: int = 0, **_: Any
               ) -> dict[str, list[float]]:
        rng = random.Random(seed)
        out: dict[str, list[float]] = {}
        for _ in range(rounds):
            order = list(calls)
            rng.shuffle(order)
            for name in order:
                out.setdefault(name, []).append(self.screen(calls[name]))
        return out


# -- the oracles --------------------------------------------------------------------------------------------------


def compile_all(space: Any, kernel: Any, st: State, configs: list[Any]) -> dict[str, str]:
    """Compile ``configs`` on ``kernel`` in parallel threads (Triton's compile-only launch); {config: error}."""
    if not GPU:
        return {}
    failed: dict[str, str] = {}
    prepare = getattr(space, "prepare", None)
    if prepare is not None:  # shared state the launches read, built once before the threads start
        prepare(st, configs)

    def one(config: Any) -> None:
        try:
            space.compile(kernel, st, config)
        except Exception as exc:  # out of resources and the like: the config cannot run
            failed[space.text(config)] = f"{type(exc).__name__}: {str(exc)[:200]}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        list(pool.map(one, configs))
    return failed


def scores(samples: dict[str, list[float]], names: list[str]) -> dict[str, float]:
    """``_oracle.scores`` over every round: each config's median time relative to its round's median."""
    return oracle_scores(samples, names, list(range(len(samples[names[0]]))))


def device_oracle(space: Any, m: int, kernel: Any, rounds: int) -> dict[str, Any]:
    """The exhaustive device-time oracle of one (space, M) (see the module docstring)."""
    st = space.state(m)
    kept = space.kept(m)
    t0 = time.perf_counter()
    failed = compile_all(space, kernel, st, kept)
    compile_s = time.perf_counter() - t0
    clock = GraphClock() if GPU else WallClock()
    sampler = sm_clock() if GPU else None
    screened: dict[str, float] = {}
    order = list(kept)
    random.Random(m).shuffle(order)
    with sampler if sampler is not None else _null():
        for i, config in enumerate(order):
            name = space.text(config)
            if name in failed:
                continue
            try:
                cutoff = SCREEN_CUTOFF * min(screened.values(), default=math.inf)
                screened[name] = clock.screen(space.launch(kernel, st, config), cutoff_ms=cutoff)
            except Exception as exc:  # a launch that fails (e.g. out of resources at run time)
                failed[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
                sync()
            if (i + 1) % 200 == 0:
                say(f"oracle {space.name} M={m}: screened {i + 1}/{len(order)}")
        by_time = sorted(screened, key=screened.get)
        best_screen = screened[by_time[0]]
        finalists = [n for n in by_time if screened[n] <= 1.25 * best_screen][:48]
        finalists = finalists if len(finalists) >= 16 else by_time[:16]
        configs = {space.text(c): c for c in kept}
        samples = clock.rounds({n: space.launch(kernel, st, configs[n]) for n in finalists}, rounds, seed=m)
    sc = scores(samples, finalists)
    best = min(sc, key=sc.get)
    final_ms = {n: statistics.median(samples[n]) for n in finalists}
    ratios = {n: screened[n] / final_ms[best] for n in screened}
    ratios.update({n: sc[n] / sc[best] for n in finalists})
    found = {"space": space.name, "m": m, "kept": len(kept), "compile_s": compile_s, "failed": failed,
             "screen_ms": screened, "finalists": finalists, "final_ms": final_ms, "ratios": ratios, "best": best,
             "best_ms": final_ms[best], "rounds": rounds, "method": clock.label,
             "sm_clock_mhz": sampler.median() if sampler is not None else None,
             "seconds": time.perf_counter() - t0}
    say(f"oracle {space.name} M={m}: {len(kept)} kept, {len(failed)} failed, best {best} "
        f"{1e3 * final_ms[best]:.1f} us/call, {len(finalists)} finalists, {found['seconds']:.1f} s "
        f"(compile {compile_s:.1f} s), SM clock {found['sm_clock_mhz']}")
    return found


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def eager_oracle(space: Any, m: int, kernel: Any, candidates: list[str], rounds: int) -> dict[str, Any]:
    """The sustained eager oracle over ``candidates`` (``_oracle.sustained``: 50 ms settling and a 100 ms
    window of eager calls per candidate and round; drift-free scores; even/odd halves for repeatability)."""
    st = space.state(m)
    configs = {space.text(c): c for c in space.kept(m)}
    calls = {n: space.launch(kernel, st, configs[n]) for n in candidates}
    samples = (sustained(calls, rounds=rounds, settle_ms=50, window_ms=100, seed=1) if GPU
               else WallClock().rounds(calls, rounds, seed=1))
    names = sorted(candidates)
    every = scores(samples, names)
    best = min(every, key=every.get)
    out: dict[str, Any] = {"ratios": {n: every[n] / every[best] for n in names}, "best": best,
                           "ms": {n: statistics.median(samples[n]) for n in names}, "rounds": rounds}
    if GPU and rounds >= 2:
        _, even, odd = all_even_odd(samples, names)
        ratio = lambda sc, n: sc[n] / min(sc.values())  # noqa: E731
        out["repeat_max_dev"] = max(abs(ratio(even, n) / ratio(odd, n) - 1) for n in names)
        host = statistics.median(host_launch_ms(calls[best]) for _ in range(3))
        out["host_ms"], out["host_bound"] = host, host >= 0.9 * out["ms"][best]
    return out


# -- the tuners ---------------------------------------------------------------------------------------------------


def decision_info(tuned: Any, name: str) -> dict[str, Any]:
    """What the tuner says about its decision: the Decision's plain fields (``timing``, ``rounds``, ``margin``,
    and whatever the search stage adds), and its rank log's lines about timing or search."""
    info: dict[str, Any] = {}
    decisions = list(getattr(tuned.tuner, "decisions", {}).values())
    if decisions:
        d = decisions[-1]
        fields = vars(d) if hasattr(d, "__dict__") else {}
        info = {k: v for k, v in fields.items() if isinstance(v, (str, int, float, bool, type(None)))}
    try:
        from triton_dist_tune.disk import logs

        lines = [line for path in logs.log_folder().rglob("rank-*.log")
                 for line in path.read_text(errors="replace").splitlines()
                 if name in line and re.search(r"timing|timed|graph|device|search|warm-up:|race:", line)]
        info["log"] = [line[-300:] for line in lines[-6:]]
    except Exception as exc:  # the log is a nicety
        info["log"] = [f"unreadable: {exc}"]
    return info


def ours_tuning(space: Any, kernel: Any, st: State, name: str, search: str | None) -> dict[str, Any]:
    """One fresh tuning by ours (empty decision cache): choice, seconds, what the tuner said."""
    os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="decisions_", dir=BASE)
    tuned = space.ours(kernel, name, search)
    sync()
    t0 = time.perf_counter()
    tuned(*st.args)
    sync()
    seconds = time.perf_counter() - t0
    decided = {**tuned.tuner.decided, **tuned.tuner.decided_in}
    choice = space.text(space.chosen(next(iter(decided.values()))))
    return {"choice": choice, "seconds": seconds, "decision": decision_info(tuned, name)}


def precompile(space: Any, kernel: Any, st: State) -> float:
    t0 = time.perf_counter()
    compile_all(space, kernel, st, space.kept(st.m))
    return time.perf_counter() - t0


# -- phases -------------------------------------------------------------------------------------------------------


def gpu_name() -> str:
    return torch.cuda.get_device_name() if GPU else "cpu-smoke"


def oracle_key(space: Any, m: int) -> str:
    return f"{gpu_name()}|{space.name}|{m}|{len(space.configs)}"


def phase_oracle(spaces: list[Any], shapes: list[int], cache: dict, cache_path: Path, rounds: int,
                 triton_cache: Path) -> None:
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
                row["exhaustive_option"] = moe_mod.supports_search()
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


def summary_line(row: dict[str, Any]) -> str:
    parts = []
    for who in ("ours", "exhaustive", "stock"):
        runs = row.get(who)
        if not runs:
            continue
        dev = [fmt_ratio(row, "device_oracle", r["choice"]) for r in runs]
        eag = [fmt_ratio(row, "eager_oracle", r["choice"]) for r in runs]
        secs = [f"{r['seconds']:.1f}" for r in runs]
        parts.append(f"{who} dev {dev} eager {eag} in {secs} s")
    return "; ".join(parts)


def timing_text(decision: dict[str, Any]) -> str:
    """How a tuning timed its key, from its Decision: ``timing`` and every other text field it records (a search
    stage may add how it timed: device / graph replay or eager), the config's text left out."""
    parts = [str(decision.get("timing", "?"))]
    parts += [f"{k}={v}" for k, v in decision.items() if isinstance(v, str) and v and k not in ("timing", "config")]
    return " ".join(parts)


def fmt_ratio(row: dict[str, Any], oracle: str, choice: str) -> str:
    value = row.get(oracle, {}).get("ratios", {}).get(choice)
    return "-" if value is None else f"{value:.3f}"


def phase_campaign(space: Any, batches: list[int], cache: dict, report: dict) -> None:
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


# -- the report ---------------------------------------------------------------------------------------------------


def markdown(report: dict) -> str:
    env = report.get("environment", {})
    lines = [f"# Large spaces: ours vs stock, {env.get('gpu')} (torch {env.get('torch')}, triton "
             f"{env.get('triton')}, {env.get('cpus')} CPUs, search option: {env.get('search_option')}, "
             f"TRITON_DIST_AUTOTUNE_SEARCH={env.get('search_env')})", "",
             "Ratios: choice time / best time; `dev` = exhaustive device-time oracle (CUDA graphs, sustained), "
             "`eager` = sustained eager oracle over the candidates. Tuning seconds exclude compiles.", ""]
    tune = report.get("tune", {})
    if tune:
        lines += ["| space | M | kept | best us (dev) | ours dev | ours eager | ours s | ours timing | exhaustive "
                  "dev / eager / s | stock dev / eager / s | eager host-bound |", "|---" * 11 + "|"]
        for key in sorted(tune, key=lambda k: (k.split("|")[0], int(k.split("|")[1]))):
            row = tune[key]
            space, m = key.split("|")
            best = row.get("device_oracle", {}).get("best_ms")
            ours = row.get("ours", [])

            def cell(who: str) -> str:
                runs = row.get(who, [])
                if not runs:
                    return "-"
                dev = ", ".join(fmt_ratio(row, "device_oracle", r["choice"]) for r in runs)
                eager = ", ".join(fmt_ratio(row, "eager_oracle", r["choice"]) for r in runs)
                secs = ", ".join(f"{r['seconds']:.1f}" for r in runs)
                return f"{dev} / {eager} / {secs}"

            timing = ", ".join(sorted({timing_text(r["decision"]) for r in ours})) or "-"
            lines.append(" | ".join([
                f"| {space}", m, str(row["kept"]), "-" if best is None else f"{1e3 * best:.1f}",
                ", ".join(fmt_ratio(row, "device_oracle", r["choice"]) for r in ours) or "-",
                ", ".join(fmt_ratio(row, "eager_oracle", r["choice"]) for r in ours) or "-",
                ", ".join(f"{r['seconds']:.1f}" for r in ours) or "-", timing, cell("exhaustive"), cell("stock"),
                str(row.get("eager_oracle", {}).get("host_bound", "-"))]) + " |")
        lines.append("")
    comp = report.get("compile", {})
    if comp:
        lines += ["| space | first key M | kept | CPUs | ours s (with compiles) | stock s (with compiles) |",
                  "|---|---|---|---|---|---|"]
        for name, row in comp.items():
            stock = f"{row['stock_s']:.1f}" if "stock_s" in row else "not run"
            lines.append(f"| {name} | {row['m']} | {row['kept']} | {row['cpus']} | {row['ours_s']:.1f} | {stock} |")
        lines.append("")
    for name, camp in report.get("campaign", {}).items():
        lines += [f"Campaign {name}: {len(camp['rows'])} keys in {camp['total_s']:.1f} s (compiles included), "
                  f"{camp['failed']} failed", "", "| M | state | s | choice | dev ratio |", "|---|---|---|---|---|"]
        for r in camp["rows"]:
            ratio = "-" if r["device_ratio"] is None else f"{r['device_ratio']:.3f}"
            lines.append(f"| {r['m']} | {r['state']} | {r['seconds']:.1f} | {r['choice']} | {ratio} |")
        lines.append("")
    return "\n".join(lines) + "\n"


#: where :func:`save` writes (set by :func:`main`)
OUT_DIR: Path | None = None


def save(report: dict) -> None:
    """Write ``search.json`` and ``search.md`` into :data:`OUT_DIR` (rank 0 only)."""
    if OUT_DIR is None or int(os.environ.get("RANK", "0")) != 0:
        return
    (OUT_DIR / "search.json").write_text(json.dumps(report, indent=1, default=str))
    (OUT_DIR / "search.md").write_text(markdown(report))


def main() -> int:
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
                             "cpus": os.cpu_count(), "search_option": moe_mod.supports_search(),
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
