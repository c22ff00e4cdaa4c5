"""Per-call overhead of a decided key: ``autotune``'s wrapper against a plain call (and, on a GPU, against stock
``triton.autotune`` around the same kernel launch).

Usage: python benchmarks/bench_hot_path.py [--out DIR]. Single process. Prints a table; writes hot_path.json.
Overhead = (time of the tuned call - time of a plain call with the same key_fn work) per call, for a call on the
default group and for one that passes ``autotune_pg=`` (as a tensor-parallel layer does); each figure is the
median of 7 rounds of N calls.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TRITON_DIST_AUTOTUNE_CACHE_DIR", tempfile.mkdtemp())
os.environ.setdefault("TRITON_DIST_AUTOTUNE_LOG_DIR", tempfile.mkdtemp())

import torch  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402


def per_call_us(fns: dict, n: int, sync=lambda: None) -> dict[str, float]:
    """Median over 7 rounds of the per-call time of each function; the functions alternate within a round."""
    rounds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(7):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            rounds[name].append((time.perf_counter() - start) / n * 1e6)
    return {name: statistics.median(times) for name, times in rounds.items()}


def python_overhead(n: int) -> dict[str, float]:
    x = torch.empty(16)

    def key_fn(x):
        return x.shape[0]

    def plain(x, *, block):
        return block

    tuned = tdt.autotune([{"block": 1}, {"block": 2}], key_fn=key_fn, n_warmup=0, n_repeat=1)(plain)
    tuned(x)  # decide

    def plain_with_key():
        key_fn(x)
        return plain(x, block=1)

    pg = process_group()
    tuned(x, autotune_pg=pg)  # decide for the explicit group too
    times = per_call_us({"base": plain_with_key, "ours": lambda: tuned(x),
                         "ours_pg": lambda: tuned(x, autotune_pg=pg)}, n)
    base, ours, ours_pg = times["base"], times["ours"], times["ours_pg"]
    return {"plain_call_with_key_fn_us": base, "tuned_call_us": ours, "overhead_us": ours - base,
            "tuned_call_with_autotune_pg_us": ours_pg, "overhead_with_autotune_pg_us": ours_pg - base}


def process_group():
    """A one-rank gloo group, so that calls can pass ``autotune_pg=`` as a tensor-parallel layer does."""
    import torch.distributed as dist

    if not dist.is_initialized():
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    return dist.new_group([0], backend="gloo")


def gpu_overhead(n: int) -> dict[str, float]:
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    configs = [triton.Config({"BLOCK": b}) for b in (128, 256, 512)]
    stock = triton.autotune(configs=configs, key=["n"])(add)
    x = torch.randn(4096, device="cuda")
    y = torch.empty_like(x)
    n_el = x.numel()

    def launch(x, y, *, cfg):
        add[(triton.cdiv(n_el, cfg.kwargs["BLOCK"]),)](x, y, n_el, **cfg.kwargs)

    tuned = tdt.autotune([{"cfg": c} for c in configs], key_fn=lambda x, y: x.numel(), n_warmup=1, n_repeat=3)(launch)
    tuned(x, y)
    stock[lambda m: (triton.cdiv(n_el, m["BLOCK"]),)](x, y, n_el)
    torch.cuda.synchronize()
    best = tuned.tuner.decided[n_el]["cfg"]
    times = per_call_us({"direct": lambda: launch(x, y, cfg=best), "ours": lambda: tuned(x, y),
                         "stock": lambda: stock[lambda m: (triton.cdiv(n_el, m["BLOCK"]),)](x, y, n_el)},
                        n, torch.cuda.synchronize)
    direct, ours, theirs = times["direct"], times["ours"], times["stock"]
    return {"direct_launch_us": direct, "tdt_autotune_launch_us": ours, "stock_autotune_launch_us": theirs,
            "tdt_overhead_us": ours - direct, "stock_overhead_us": theirs - direct}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    result = {"machine": platform.node(), "python": platform.python_version(), "torch": torch.__version__,
              "python_wrapper": python_overhead(args.calls)}
    if torch.cuda.is_available():
        result["gpu"] = torch.cuda.get_device_name()
        result["kernel_launch"] = gpu_overhead(args.calls // 10)
    for section, figures in result.items():
        if isinstance(figures, dict):
            for name, value in figures.items():
                print(f"{section:16} {name:28} {value:8.3f}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "hot_path.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
