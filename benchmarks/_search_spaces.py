"""The spaces of ``bench_search.py``: the examples' Triton GEMM over issue 28's large grid, and the MoE grouped
GEMM over vLLM's space; each builds its shapes' tensors, launches and compiles a config, makes ours' tuned function
and runs stock's tuning (:func:`stock_loop` where Triton's autotuner cannot run)."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any

import torch
import triton
from _search_common import GPU, State, sync
from bench_gemm_tuning import gemm_args

import triton_dist_tune as tdt
from examples import moe_kernels
from examples.gemm_kernels import (
    H100_SHARED_MEMORY_BYTES,
    _gemm_kernel,
    large_gemm_config_specs,
    prune_by_shared_memory,
    to_triton_config,
)
from examples.moe_gemm import make_tuned_moe

parsed = functools.lru_cache(maxsize=None)(to_triton_config)  # a GEMM config string, parsed once


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

    def call(self, kernel: Any, st: State, config: str) -> Callable[[], None]:
        """The tuned function's body at one config: it writes the output it is given (as :meth:`launch`)."""
        return self.launch(kernel, st, config)

    def compile(self, kernel: Any, st: State, config: str) -> None:
        a, b, c = st.args
        self._launch(kernel, a, b, c, config, warmup=True)

    def ours(self, kernel: Any, name: str, search: str | None) -> Callable[..., Any]:
        space = self

        @tdt.autotune([{"config": c} for c in self.configs], key_fn=lambda a, b, c: (tuple(a.shape), tuple(b.shape)),
                      prune_fn=lambda cfg, a, b, c: prune_by_shared_memory(cfg["config"], 2, H100_SHARED_MEMORY_BYTES),
                      name=name, search=search or "auto")
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
    source = moe_kernels.fused_moe_kernel

    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.problem = moe_kernels.CPU_PROBLEM if smoke else moe_kernels.GPU_PROBLEM
        self.dtype = torch.float32 if smoke else torch.bfloat16
        self.configs = moe_kernels.moe_config_space(tiny=smoke)
        device = "cuda" if GPU else "cpu"
        self.w = moe_kernels.make_weights(self.problem, device, self.dtype)

    def text(self, config: dict[str, int]) -> str:
        return moe_kernels.config_text(config)

    @staticmethod
    def chosen(entry: dict[str, Any]) -> dict[str, int]:
        """The config of an entry of the tuned function's space (the six keywords themselves)."""
        return entry

    def kept(self, m: int) -> list[dict[str, int]]:
        p = self.problem
        return [c for c in self.configs if moe_kernels.moe_prune_for(c, m, p["top_k"], p["experts"], 2)]

    def state(self, m: int) -> State:
        p = moe_kernels.make_problem(m, self.w, self.problem["top_k"])
        out = torch.empty(m, self.problem["top_k"], self.problem["n"], dtype=self.dtype, device=self.w.device)
        return State(m, (p.a, p.w, p.routing), out)

    def launch(self, kernel: Any, st: State, config: dict[str, int]) -> Callable[[], None]:
        a, w, routing = st.args
        return lambda: moe_kernels.moe_gemm(a, w, routing, st.out, config, kernel)

    def prepare(self, st: State, configs: list[dict[str, int]]) -> None:
        """The token alignment of every BLOCK_SIZE_M among ``configs`` (kept by the routing)."""
        for block_m in sorted({c["BLOCK_SIZE_M"] for c in configs}):
            st.args[2].aligned(block_m)

    def compile(self, kernel: Any, st: State, config: dict[str, int]) -> None:
        a, w, routing = st.args
        aligned = routing.aligned(config["BLOCK_SIZE_M"])
        meta = {k: v for k, v in config.items() if k.startswith(("BLOCK", "GROUP"))}
        kernel.warmup(*moe_kernels.kernel_args(a, w, st.out, aligned, routing.top_k), top_k=routing.top_k,
                      num_warps=config["num_warps"], num_stages=config["num_stages"], grid=(1,), **meta)

    def ours(self, kernel: Any, name: str, search: str | None) -> Callable[..., Any]:
        return make_tuned_moe(self.configs, name=name, search=search, kernel=kernel)

    def stock(self, kernel: Any, st: State) -> tuple[str, float]:
        """Triton's autotuner's method by hand: ``do_bench`` per kept config (median; least wins)."""
        return stock_loop(self, kernel, st, self.kept(st.m), self.call)

    def call(self, kernel: Any, st: State, config: dict[str, int]) -> Callable[[], Any]:
        """The tuned function's body at one config (a new output per call, as ours runs it)."""
        a, w, routing = st.args
        return lambda: moe_kernels.moe_gemm(a, w, routing, None, config, kernel)


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
