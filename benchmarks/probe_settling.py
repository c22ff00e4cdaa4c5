"""How long does a GPU take to reach its sustained (power-limited) state, and how long does a burst last?

Exploratory probe for issue 20 (one GPU). For several bf16 GEMM sizes (torch.matmul, no compiles):

1. after ``--idle`` ms of idle, ``--calls`` back-to-back calls with an event between every two: each call's time
   against the time since the first call started (the settling curve), with the SM clock and power read by
   pynvml in a thread every ~1 ms;
2. sustained, then an idle gap of g ms (g in 1, 3, 10, 30, 100), then calls again: how fast the first calls run
   (the burst an idle gap lends);
3. a slow op then a fast op with no gap: how long the fast op's calls take to reach their own sustained time.

Writes JSON to --out and prints a short table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import torch


def sampler(stop, rows, t0):
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:  # no NVML: curves from events only
        rows.append({"error": str(exc)})
        return
    while not stop.is_set():
        try:
            rows.append((time.perf_counter() - t0, pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                         pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0))
        except Exception:
            pass
        time.sleep(0.001)


def curve(op, calls: int) -> list[tuple[float, float]]:
    """(ms since the first call started, ms of this call) for ``calls`` back-to-back calls."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(calls + 1)]
    events[0].record()
    for i in range(calls):
        op()
        events[i + 1].record()
    torch.cuda.synchronize()
    out = []
    for i in range(calls):
        out.append((events[0].elapsed_time(events[i]), events[i].elapsed_time(events[i + 1])))
    return out


def windows(points, edges):
    """Median call time in windows of elapsed ms."""
    res = {}
    for lo, hi in edges:
        xs = [d for t, d in points if lo <= t < hi]
        res[f"{lo}-{hi}"] = statistics.median(xs) if xs else None
    return res


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--total-ms", type=float, default=1500)
    args = p.parse_args()
    torch.manual_seed(0)
    shapes = [(8192, 8192, 4096), (4096, 4096, 4096), (1024, 8192, 8192), (256, 4096, 4096), (64, 512, 512)]
    ops = {}
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ops[f"{m}x{n}x{k}"] = (lambda a=a, b=b, c=c: torch.matmul(a, b, out=c))
    for op in ops.values():
        op()
    torch.cuda.synchronize()
    stop = threading.Event()
    nvml: list = []
    t0 = time.perf_counter()
    th = threading.Thread(target=sampler, args=(stop, nvml, t0), daemon=True)
    th.start()
    report = {"settle": {}, "gap": {}, "switch": {}, "marks": []}
    edges = [(0, 2), (2, 5), (5, 10), (10, 20), (20, 50), (50, 100), (100, 200), (200, 400), (400, 800),
             (800, 1500)]
    for name, op in ops.items():
        t = time.perf_counter()
        op()
        torch.cuda.synchronize()
        one = curve(op, 20)[-1][1]
        calls = max(50, int(args.total_ms / max(one, 0.002)))
        calls = min(calls, 30000)
        time.sleep(0.5)
        report["marks"].append((name, time.perf_counter() - t0))
        pts = curve(op, calls)
        w = windows(pts, edges)
        report["settle"][name] = {"calls": calls, "windows": w, "host_ms_per_call": None}
        # host launch cost: time to enqueue calls with no sync (host side)
        torch.cuda.synchronize()
        h0 = time.perf_counter()
        for _ in range(200):
            op()
        h1 = time.perf_counter()
        torch.cuda.synchronize()
        report["settle"][name]["host_ms_per_call"] = (h1 - h0) * 1e3 / 200
        # gaps after sustained
        g = {}
        for gap in (1, 3, 10, 30, 100):
            curve(op, max(20, int(300 / max(one, 0.002))))  # ~300 ms sustained
            time.sleep(gap / 1e3)
            pts = curve(op, max(20, int(60 / max(one, 0.002))))
            g[gap] = windows(pts, [(0, 1), (1, 3), (3, 10), (10, 30), (30, 60)])
        report["gap"][name] = g
        print(name, f"{time.perf_counter()-t:.1f}s", flush=True)
    # switch: slow then fast, no gap
    slow, fast = ops["8192x8192x4096"], ops["1024x8192x8192"]
    for first_name, first in (("idle", None), ("slow", slow), ("same", fast)):
        time.sleep(0.3)
        if first is not None:
            curve(first, 300 if first is slow else 1500)
        pts = curve(fast, 2000)
        report["switch"][first_name] = windows(pts, [(0, 2), (2, 5), (5, 10), (10, 20), (20, 50), (50, 100),
                                                      (100, 200)])
    stop.set()
    th.join()
    report["nvml"] = nvml
    with open(args.out, "w") as f:
        json.dump(report, f)
    print("settling: median ms per call in windows of ms since start (after 0.5 s idle)")
    for name, r in report["settle"].items():
        windows_ms = {k: (round(v, 4) if v else v) for k, v in r["windows"].items()}
        print(name, f"host {r['host_ms_per_call']:.4f}", windows_ms)
    print("after sustained then gap g ms: median ms per call in windows")
    for name, r in report["gap"].items():
        for gap, w in r.items():
            print(name, "gap", gap, {k: (round(v, 4) if v else v) for k, v in w.items()})
    print("fast op after idle/slow/same:")
    for k, w in report["switch"].items():
        print(k, {a: (round(v, 4) if v else v) for a, v in w.items()})
    clocks = [r for r in nvml if isinstance(r, tuple)]
    if clocks:
        print("nvml samples", len(clocks), "sm MHz min/max", min(c[1] for c in clocks), max(c[1] for c in clocks),
              "W max", max(c[2] for c in clocks))


if __name__ == "__main__":
    main()
