"""Record the corpus of exhaustive device-time landscapes that choose and judge the search (issue 33).

A landscape is one (kernel family, shape): every kept config compiled, captured as a CUDA graph of 20 launches,
screened with device events, then the leaders refined in shuffled rounds (``bench_search.device_oracle``; its
docstring has the method). The replays (``benchmarks/replay_search.py``) read ``ratios`` (time / best) from it.

Families (``--family``; several per process, one GPU each):

- ``gemm``: the examples' Triton GEMM over issue 28's 960-config grid (840 kept in bf16 on Hopper), at three
  (K, N): ``gemm_k4096_n4096``, ``gemm_k8192_n2048``, ``gemm_k2048_n8192``;
- ``gemm_fp16_bt``: the same kernel in fp16 with ``B`` read transposed (a column-major ``[K, N]`` view), over a
  wider grid (``GROUP_M`` in {1, 4, 8, 16}: 1,680 kept), K = 4096, N = 6144;
- ``moe``: the MoE grouped GEMM of ``examples/moe_gemm.py`` (vLLM's 1,920-config space, pruned per M);
- ``softmax``: a memory-bound row softmax (online, looped over column blocks) over BLOCK x ROWS x warps x stages
  (600 configs, pruned per shape by tile size), bf16;
- the collective families (AG-GEMM, GEMM-RS on 4 ranks) are recorded by ``benchmarks/corpus_collective.py``.

Launch (one process per GPU, side by side)::

    CUDA_VISIBLE_DEVICES=0 python benchmarks/corpus.py --family gemm_k4096_n4096 --out DIR/c0.json
    TRITON_INTERPRET=1 python benchmarks/corpus.py --family softmax --out DIR/smoke.json --cpu-smoke

Each case is saved as soon as it is measured (``--out``, merged by key); ``--deadline`` seconds after the start no
new case begins.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (sets fresh HOME and caches before Triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _search_common import State  # noqa: E402
from bench_gemm_tuning import fresh_kernel, use_triton_cache  # noqa: E402

from examples.gemm_kernels import H100_SHARED_MEMORY_BYTES, prune_by_shared_memory  # noqa: E402

GEMM_SHAPES = (16, 64, 256, 1024, 4096, 8192)
MOE_SHAPES = (16, 32, 64, 128, 256, 512, 1024, 2048)
SOFTMAX_SHAPES = ("4096x4096", "16384x1024", "2048x16384", "65536x256", "8192x8192", "32768x2048", "1024x32768",
                  "256x4096")


class GemmVariant(bs.GemmSpace):
    """The examples' GEMM at one (K, N), dtype and layout of ``B``, over a grid of GEMM axes."""

    def __init__(self, smoke: bool, k: int, n: int, dtype: torch.dtype = torch.bfloat16, b_transposed: bool = False,
                 group_m: tuple[int, ...] = (1, 8), name: str = "") -> None:
        super().__init__(smoke, k)
        self.name = name or f"gemm_k{k}_n{n}"
        if smoke:
            return
        self.k, self.n, self.dtype, self.b_transposed = k, n, dtype, b_transposed
        axes = {"BLOCK_M": (16, 32, 64, 128, 256), "BLOCK_N": (32, 64, 128, 256), "BLOCK_K": (32, 64, 128),
                "GROUP_M": group_m, "num_warps": (4, 8), "num_stages": (2, 3, 4, 5)}
        specs = [f"{bm}x{bn}x{bk}-g{g}-w{w}-s{s}" for bm, bn, bk, g, w, s in itertools.product(*axes.values())]
        self.configs = [s for s in specs if prune_by_shared_memory(s, 2, H100_SHARED_MEMORY_BYTES)]

    def state(self, m: int) -> State:
        if self.smoke or not getattr(self, "b_transposed", False):
            return super().state(m)
        gen = torch.Generator().manual_seed(m)
        a = torch.randn(m, self.k, generator=gen).to("cuda", self.dtype)
        b = torch.randn(self.n, self.k, generator=gen).to("cuda", self.dtype).t()  # [K, N], column-major
        c = torch.empty(m, self.n, device="cuda", dtype=self.dtype)
        return State(m, (a, b, c), c)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, R, C, stride_x, stride_y, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """y = softmax(x) along rows; ROWS rows per program, columns in blocks of BLOCK (online max and sum)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < R
    big = tl.full([ROWS], float("-inf"), tl.float32)
    total = tl.zeros([ROWS], tl.float32)
    for start in tl.range(0, C, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = row_ok[:, None] & (cols[None, :] < C)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=float("-inf"))
        x = x.to(tl.float32)
        new = tl.maximum(big, tl.max(x, 1))
        new = tl.where(row_ok, new, 0.0)
        total = total * tl.exp(big - new) + tl.sum(tl.exp(x - new[:, None]), 1)
        big = new
    for start in tl.range(0, C, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = row_ok[:, None] & (cols[None, :] < C)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=float("-inf"))
        y = tl.exp(x.to(tl.float32) - big[:, None]) / total[:, None]
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


class SoftmaxSpace:
    """A memory-bound row softmax; configs are strings ``"BLOCKxROWS-wW-sS"``; shapes ``"RxC"``."""

    name = "softmax"
    source = _softmax_kernel

    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.dtype = torch.float32 if smoke else torch.bfloat16
        axes = ((16, 32), (1, 2), (1, 4), (1, 2)) if smoke else (
            (256, 512, 1024, 2048, 4096, 8192), (1, 2, 4, 8, 16), (1, 2, 4, 8, 16), (1, 2, 3, 4))
        self.configs = [f"{b}x{r}-w{w}-s{s}" for b, r, w, s in itertools.product(*axes)]

    @staticmethod
    def parse(config: str) -> tuple[int, int, int, int]:
        tile, warps, stages = config.split("-")
        block, rows = tile.split("x")
        return int(block), int(rows), int(warps[1:]), int(stages[1:])

    def text(self, config: str) -> str:
        return config

    @staticmethod
    def chosen(entry: dict[str, Any]) -> str:
        return entry["config"]

    @staticmethod
    def dims(m: str | int) -> tuple[int, int]:
        r, c = str(m).split("x")
        return int(r), int(c)

    def kept(self, m: str) -> list[str]:
        _, cols = self.dims(m)
        widest = max(16, triton.next_power_of_2(cols))
        return [c for c in self.configs if self.parse(c)[0] <= widest and self.parse(c)[0] * self.parse(c)[1] <= 16384]

    def state(self, m: str) -> State:
        r, c = self.dims(m)
        device = "cuda" if bs.GPU else "cpu"
        x = torch.randn(r, c, generator=torch.Generator().manual_seed(r * 7 + c)).to(device, self.dtype)
        y = torch.empty_like(x)
        return State(m, (x, y), y)

    def _launch(self, kernel: Any, x: torch.Tensor, y: torch.Tensor, config: str, warmup: bool = False) -> None:
        block, rows, warps, stages = self.parse(config)
        grid = (triton.cdiv(x.shape[0], rows),)
        args = (x, y, x.shape[0], x.shape[1], x.stride(0), y.stride(0))
        if warmup:
            kernel.warmup(*args, BLOCK=block, ROWS=rows, num_warps=warps, num_stages=stages, grid=grid)
        else:
            kernel[grid](*args, BLOCK=block, ROWS=rows, num_warps=warps, num_stages=stages)

    def launch(self, kernel: Any, st: State, config: str) -> Callable[[], None]:
        x, y = st.args
        return lambda: self._launch(kernel, x, y, config)

    def compile(self, kernel: Any, st: State, config: str) -> None:
        x, y = st.args
        self._launch(kernel, x, y, config, warmup=True)

    def ours(self, kernel: Any, name: str, search: str | None) -> Callable[..., Any]:
        """The softmax tuned by ``autotune`` over this space, pruned per shape as :meth:`kept` prunes."""
        space = self

        @bs.tdt.autotune([{"config": c} for c in self.configs], key_fn=lambda x, y: tuple(x.shape),
                         prune_fn=lambda cfg, x, y: cfg["config"] in space.kept(f"{x.shape[0]}x{x.shape[1]}"),
                         name=name, search=search or "auto")
        def softmax_fn(x, y, *, config):
            space._launch(kernel, x, y, config)

        return softmax_fn


def family(name: str, smoke: bool) -> tuple[Any, list[Any]]:
    """(the space, its shapes) of a ``--family`` name."""
    if name.startswith("gemm_k"):
        k, n = (int(part[1:]) for part in name.split("_")[1:3])
        return GemmVariant(smoke, k, n), list(GEMM_SHAPES)
    if name == "gemm_fp16_bt":
        return GemmVariant(smoke, 4096, 6144, torch.float16, True, (1, 4, 8, 16), name), list(GEMM_SHAPES)
    if name == "moe":
        return bs.MoeSpace(smoke), list(MOE_SHAPES)
    if name == "softmax":
        return SoftmaxSpace(smoke), list(SOFTMAX_SHAPES)
    raise SystemExit(f"unknown family {name!r}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", action="append", required=True)
    p.add_argument("--shapes", default="", help="comma-separated shapes of every family (default: its own)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--deadline", type=float, default=1e9, help="seconds after which no new case begins")
    p.add_argument("--cpu-smoke", action="store_true")
    args = p.parse_args()
    started = time.perf_counter()
    corpus = json.loads(args.out.read_text()) if args.out.exists() else {}
    use_triton_cache(str(bs.BASE / "triton_corpus"))
    for name in args.family:
        space, shapes = family(name, args.cpu_smoke)
        if args.shapes:
            shapes = [s if "x" in s else int(s) for s in args.shapes.split(",")]
        if args.cpu_smoke:
            shapes = shapes[:2] if name != "softmax" else ["8x40", "3x16"]
            if name.startswith("gemm"):
                shapes = [3, 20]
        kernel = fresh_kernel(space.source)
        for m in shapes:
            key = bs.oracle_key(space, m)
            if key in corpus:
                continue
            if time.perf_counter() - started > args.deadline:
                bs.say(f"deadline: {name} M={m} not recorded")
                continue
            found = bs.device_oracle(space, m, kernel, args.rounds)
            found["family"] = name.split("_k")[0] if name.startswith("gemm_k") else name
            corpus[key] = found
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(corpus, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
