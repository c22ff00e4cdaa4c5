"""A quick check of the search and of device-time sampling on one GPU: the examples' Triton GEMM over an 840-config
space (BM 16-256 x BN 32-256 x BK 32-128 x GROUP_M {1, 8} x warps {4, 8} x stages 2-5, pruned by shared memory) at
a few shapes (N = K = 4096, bf16), tuned afresh with the defaults (the search).

For each shape: the first key with compiles (an empty Triton cache), then a fresh tuner over the kernels compiled
in memory; how many configs the search screened, how the key was timed (eager or CUDA-graph replays), and the
choice's device time against the best device time of a graph-replay screening of every kept config (the
``--oracle`` flag; each config captured as a graph of 20 calls and replayed 10 times after 3 untimed replays,
shuffled order, 3 passes, median). Also the same tuning with ``search="exhaustive"`` when ``--exhaustive``.

Launch: ``python benchmarks/probe_search.py --out DIR [--shapes 64,512,4096] [--oracle] [--exhaustive]``.
Writes DIR/probe_search.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
_TMP = tempfile.mkdtemp(prefix="probe_search_")
os.environ.setdefault("TRITON_CACHE_DIR", f"{_TMP}/triton")
os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = f"{_TMP}/tdt"
os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"] = f"{_TMP}/logs"

import torch  # noqa: E402
import triton  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from examples.gemm_kernels import _gemm_kernel, gemm, prune_by_shared_memory  # noqa: E402

SPECS = [f"{m}x{n}x{k}-g{g}-w{w}-s{s}" for m, n, k, g, w, s in
         itertools.product([16, 32, 64, 128, 256], [32, 64, 128, 256], [32, 64, 128], [1, 8], [4, 8], [2, 3, 4, 5])]


def space() -> list[dict[str, str]]:
    return [{"config": s} for s in SPECS if prune_by_shared_memory(s, 2)]


def tuned(name: str, search: str):
    @tdt.autotune(space(), key_fn=lambda a, b, out: tuple(a.shape), name=name, search=search)
    def f(a, b, out, *, config):
        gemm(a, b, out, config)

    return f


def clock_mhz() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM))
    except Exception:
        return None


def oracle(a, b, out, configs: list[str]) -> dict[str, float]:
    """Device time per call of every config, by graph replay (see the module docstring)."""
    graphs = {}
    for c in configs:
        gemm(a, b, out, c)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(20):
                gemm(a, b, out, c)
        graphs[c] = g
    times: dict[str, list[float]] = {c: [] for c in configs}
    for p in range(3):
        order = list(configs)
        random.Random(p).shuffle(order)
        for c in order:
            g = graphs[c]
            for _ in range(3):
                g.replay()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                g.replay()
            end.record()
            end.synchronize()
            times[c].append(start.elapsed_time(end) / 200)
    return {c: statistics.median(t) for c, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", default="64,512,4096")
    parser.add_argument("--oracle", action="store_true")
    parser.add_argument("--exhaustive", action="store_true")
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    triton.runtime.driver.active.get_current_device()
    rows = []
    for m in [int(x) for x in args.shapes.split(",")]:
        torch.manual_seed(0)
        a = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, 4096, device="cuda", dtype=torch.bfloat16)
        row: dict = {"M": m, "kept": len(space()), "clock_mhz_start": clock_mhz()}
        variants = [("first", "auto"), ("compiled", "auto"), ("compiled2", "auto")]
        if args.exhaustive:
            variants.append(("exhaustive", "exhaustive"))
        for label, mode in variants:
            f = tuned(f"probe_{label}_{m}", mode)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            f(a, b, c)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            ((_, d),) = f.tuner.decisions.items()
            row[label] = {"seconds": seconds, "config": f.tuner.space[d.index]["config"], "time_ms": d.time,
                          "search": d.search, "clock": d.clock, "margin": d.margin, "near_tie": d.near_tie}
            print(f"M={m} {label}: {seconds:.2f} s, {row[label]['config']} {d.time:.4f} ms, clock={d.clock}, "
                  f"{d.search}", flush=True)
        ref = a.float() @ b.float()
        gemm(a, b, c, row["compiled"]["config"])
        row["correct"] = bool(torch.allclose(c.float(), ref, atol=1, rtol=0.05))
        if args.oracle:
            t0 = time.perf_counter()
            times = oracle(a, b, c, [s["config"] for s in space()])
            best = min(times.values())
            row["oracle_seconds"] = time.perf_counter() - t0
            row["oracle_best"] = min(times, key=times.get)
            row["oracle_best_ms"] = best
            for label, _ in variants:
                chosen = row[label]["config"]
                row[label]["vs_oracle"] = times.get(chosen, float("nan")) / best
            print(f"M={m} oracle best {row['oracle_best']} {best:.4f} ms; ours/best " +
                  ", ".join(f"{label} {row[label]['vs_oracle']:.3f}" for label, _ in variants), flush=True)
        row["clock_mhz_end"] = clock_mhz()
        rows.append(row)
        (out_dir / "probe_search.json").write_text(json.dumps(rows, indent=1))
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    _ = _gemm_kernel
    main()
