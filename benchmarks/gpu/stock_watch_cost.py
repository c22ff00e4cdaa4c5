"""What the contextual interception adds to a stock ``@triton.autotune`` launch outside every tuned call.

Once a process has made its first contextual or undecided ``autotune`` call, ``Autotuner.run`` is replaced for the
rest of the process (``contextual/intercept.py``), and a launch of a kernel with more than one config outside a
tuned call goes through ``stock_watch.launched_unhandled`` (two cache lengths and a function call). This script
times the host side of such launches, side by side in shuffled rounds, on a warm kernel whose config is chosen:

- ``stock``: ``Autotuner.run`` as Triton ships it (the replacement taken out for the round);
- ``watched``: the replacement and its observer, as a process has them after its first tuned call;
- ``jit``: the same kernel launched through ``@triton.jit`` alone, with the chosen config's meta-parameters.

Each round launches ``--launches`` times back to back (no synchronize in the loop: the launch's host cost, which is
what a layer's Python pays; the kernel is tiny, so the GPU keeps up) and synchronizes once at its end.
Prints per-launch microseconds per arm (median over rounds) and writes them as JSON with ``--out``.

Usage: ``python3 benchmarks/gpu/stock_watch_cost.py [--rounds 20] [--launches 2000] [--out FILE]``
(CPU plumbing: ``TRITON_INTERPRET=1 python3 benchmarks/gpu/stock_watch_cost.py --rounds 2 --launches 5``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch
import triton
import triton.language as tl

from triton_dist_tune.contextual import intercept, stock_watch


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _cpu_bench(fn, quantiles=None):  # the interpreter has no driver for Triton's own benchmarker (CPU plumbing)
    fn()
    return [1.0, 1.0, 1.0] if quantiles else 1.0


_tuned = triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["n"],
                         do_bench=None if torch.cuda.is_available() else _cpu_bench)(_add)


def _arms(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> dict[str, object]:
    n = x.numel()
    block = next(iter(_tuned.cache.values())).kwargs["BLOCK"]  # the config the warm-up chose

    def autotuned() -> None:
        _tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)

    def jit() -> None:
        _add[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)

    return {"stock": autotuned, "watched": autotuned, "jit": jit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--launches", type=int, default=2000)
    parser.add_argument("--out", default=None)
    options = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, y = (torch.randn(4096, device=device) for _ in range(2))
    out = torch.empty_like(x)
    _tuned[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, out, x.numel())  # chooses the config
    if device == "cuda":
        torch.cuda.synchronize()
    stock_run = intercept._autotuner_class().__dict__["run"]
    intercept.install()  # what a process's first tuned call does
    stock_watch.watch_decided_calls(main.__code__)
    watched_run = intercept._autotuner_class().__dict__["run"]
    assert watched_run is not stock_run, "the interception did not install"
    arms = _arms(x, y, out)
    samples: dict[str, list[float]] = {name: [] for name in arms}
    rng = random.Random(0)
    for _ in range(options.rounds):
        order = list(arms)
        rng.shuffle(order)
        for name in order:
            intercept._autotuner_class().run = stock_run if name == "stock" else watched_run
            launch = arms[name]
            for _ in range(20):
                launch()
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(options.launches):
                launch()
            if device == "cuda":
                torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - start) / options.launches * 1e6)
    intercept._autotuner_class().run = watched_run
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"device: {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}; triton {triton.__version__}; "
          f"{options.rounds} rounds of {options.launches} launches")
    for name, value in medians.items():
        spread = (min(samples[name]), max(samples[name]))
        print(f"{name:8s} {value:8.2f} us per launch (rounds {spread[0]:.2f}-{spread[1]:.2f})")
    print(f"watched - stock: {medians['watched'] - medians['stock']:+.2f} us per launch; "
          f"stock - jit (Triton's own autotuner): {medians['stock'] - medians['jit']:+.2f} us")
    if options.out:
        with open(options.out, "w") as handle:
            json.dump({"medians_us": medians, "samples_us": samples}, handle, indent=1)


if __name__ == "__main__":
    main()
