"""Per-call cost of a decided ``contextual_autotune`` function, beside a plain launch and a decided stock
``triton.autotune``, in one run (issue 19, point 7).

Usage: python benchmarks/bench_decided_overhead.py [--out DIR] [--calls N] [--standin]

Three callables, each one Python function that launches one kernel once, called N times per round, 7 rounds
alternating, median per call:

- ``plain``: the jitted kernel launched with a fixed config (``kernel[grid](..., BLOCK=..)``);
- ``stock``: the same kernel behind ``triton.autotune``, its key decided (Triton's cache hit);
- ``contextual``: a function decorated with ``contextual_autotune`` (``is_dist=True``; one rank) that launches the
  kernel behind another ``triton.autotune``, decided by the first call's tuning (a hot call: no communication);
- ``contextual_alone``: the same with ``is_dist=False`` (no group at all).

Stock and contextual are measured in the same run, alternating within each round, so that their figures compare
(the question: does a decided contextual call cost more than a decided stock launch?). Once the first contextual
call has installed the interception, stock launches outside a tuned call also pass through its wrapper (one
context lookup) before Triton's own ``run``: ``stock`` here includes that.

On a GPU (default when CUDA is there) the kernel is a real 4096-element add, and each round ends with a device
synchronize: the figures are host time per launch in a burst of N launches. Without a GPU (or with ``--standin``)
the kernel is a stand-in whose ``run`` does nothing (Triton's interpreter is far too slow to show launch overheads):
the figures are then the wrappers' own Python cost, not a launch. Prints a table; writes decided_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TRITON_DIST_AUTOTUNE_CACHE_DIR", tempfile.mkdtemp())
os.environ.setdefault("TRITON_DIST_AUTOTUNE_LOG_DIR", tempfile.mkdtemp())

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
from bench_hot_path import per_call_us  # noqa: E402  (this folder: the same 7-round median)
from triton.runtime.autotuner import Autotuner  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402

CONFIGS = [triton.Config({"BLOCK": b}) for b in (128, 256, 512)]


class StandIn:
    """Stands in for a jitted kernel on a machine without a GPU: ``run`` does nothing, ``[grid]`` launches it."""

    def __init__(self) -> None:
        self.fn = lambda x, y, n, BLOCK: None  # noqa: N803 - Triton walks .fn to the Python function
        self.arg_names = ["x", "y", "n", "BLOCK"]

    def run(self, *args, **kwargs):
        return None

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


def real_kernel():
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    return add


def autotuned(kernel, standin: bool) -> Autotuner:
    if standin:
        return Autotuner(kernel, kernel.arg_names, CONFIGS, ["n"], None, None)
    return triton.autotune(configs=CONFIGS, key=["n"])(kernel)


def one_rank_group() -> None:
    if not dist.is_initialized():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--standin", action="store_true", help="the no-op kernel stand-in even on a GPU")
    opts = parser.parse_args()
    standin = opts.standin or not torch.cuda.is_available()
    device = "cpu" if standin else "cuda"
    kernel = StandIn() if standin else real_kernel()
    stock, inner = autotuned(kernel, standin), autotuned(kernel, standin)
    x = torch.randn(4096, device=device)
    y = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 256),)
    meta_grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    if standin:
        stock.cache[(n, str(x.dtype), str(y.dtype))] = CONFIGS[1]  # decided (no GPU to benchmark on)
    sync = torch.cuda.synchronize if not standin else (lambda: None)

    def plain():
        kernel[grid](x, y, n, BLOCK=256)

    def stock_call():
        stock[meta_grid](x, y, n)

    one_rank_group()

    @tdt.contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def contextual():
        inner[meta_grid](x, y, n)

    alone_inner = autotuned(kernel, standin)

    @tdt.contextual_autotune(is_dist=False, n_warmup=1, n_repeat=2)
    def contextual_alone():
        alone_inner[meta_grid](x, y, n)

    stock_call()  # Triton tunes its key (GPU), or it was set above
    contextual()  # the first call tunes; every later call is decided
    contextual_alone()
    sync()
    times = per_call_us({"plain": plain, "stock": stock_call, "contextual": contextual,
                         "contextual_alone": contextual_alone}, opts.calls, sync)
    result = {"machine": platform.node(), "device": torch.cuda.get_device_name() if not standin else "cpu",
              "kernel": "no-op stand-in" if standin else "4096-element add", "python": platform.python_version(),
              "torch": torch.__version__, "triton": triton.__version__, "calls_per_round": opts.calls,
              "us_per_call": times, "stock_adds_us": times["stock"] - times["plain"],
              "contextual_adds_us": times["contextual"] - times["plain"],
              "contextual_alone_adds_us": times["contextual_alone"] - times["plain"]}
    print(f"{result['device']} ({result['kernel']}), triton {triton.__version__}, {opts.calls} calls x 7 rounds")
    print("| call | us per call | over plain |\n|---|---|---|")
    for name, us in times.items():
        print(f"| {name} | {us:.2f} | {us - times['plain']:+.2f} |")
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    (Path(opts.out) / "decided_overhead.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
