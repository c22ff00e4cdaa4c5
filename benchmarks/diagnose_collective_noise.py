"""Why the group times of GEMM-RS (and AG-GEMM) on many ranks do not repeat (issue 39, items 3-5).

On 4 H200s the recorder's landscapes of GEMM-RS did not repeat from one process to the next (each recording's
best read 1.22-1.24x in the others), while AG-GEMM's did (1.000). This script times a few leading configs of each
case in shuffled rounds, each in two ways, on every rank:

- **eager**: what the recorder and the tuners time: 10 ms of settling calls, then a window of back-to-back calls
  (``--window-ms``) timed on the device; the host launches each call as the last one is queued, so a host that
  cannot keep up (on any rank: the collective waits for the slowest) stretches the window;
- **queued**: the device is held by a spin kernel while the host enqueues ``n`` calls, then they run back to back
  at the device's own speed; timed from the end of the first call (which absorbs the ranks' arrival skew) to the
  end of the last. The sample is flagged when the host had not enqueued every call before the hold ended.

Each rank also records, per eager window, its host's time to launch one call (``host_ms``: the wall time of the
launch loop over the calls) and the wall-clock instant its window began (the ranks' arrival skew, on one host).
The group time of a sample is the MAX over ranks, as in the recorder. ``--repeat`` runs (each its own process, by
the shell wrapper) tell whether a method's ranking repeats across processes.

Writes ``--out`` (JSON: every rank's samples) and prints a summary per case and method: the median spread of a
config's samples over rounds (max/min), the share of samples 10% above the config's least, and the host's launch
time per call against the device's time per call.

    torchrun --nproc-per-node 4 benchmarks/diagnose_collective_noise.py --out F.json
    TRITON_INTERPRET=1 torchrun --nproc-per-node 2 benchmarks/diagnose_collective_noise.py --out F.json --cpu-smoke
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import corpus_collective as cc  # noqa: E402  (turns NVLink multicast off before torch starts NCCL)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def sm_clock() -> float:
    """This rank's SM clock in MHz (pynvml), or 0 where it cannot be read."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 (no pynvml, or no GPU)
        return 0.0


def eager(call: Any, calls: int, settle: int) -> dict[str, float]:
    """One eager window of ``calls`` calls after ``settle`` untimed ones: device ms per call, host ms per call."""
    for _ in range(settle):
        call()
    began = time.time()
    if not cc.GPU:
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        ms = (time.perf_counter() - t0) * 1e3 / calls
        return {"ms": ms, "host_ms": ms, "began": began}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        call()
    end.record()
    host_ms = (time.perf_counter() - t0) * 1e3 / calls
    end.synchronize()
    return {"ms": start.elapsed_time(end) / calls, "host_ms": host_ms, "began": began}


def queued(call: Any, calls: int, hold_ms: float) -> dict[str, float]:
    """``calls`` calls enqueued behind a hold of the device; device ms per call from the end of the first call."""
    if not cc.GPU:
        return eager(call, calls, 0) | {"late": 0.0}
    torch.cuda.synchronize()
    start, end, held = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda._sleep(int(hold_ms * 1e3 * cc.HOLD_CYCLES_PER_US))  # checked after: late
    held.record()
    t0 = time.perf_counter()
    call()
    start.record()
    for _ in range(calls - 1):
        call()
    end.record()
    host_ms = (time.perf_counter() - t0) * 1e3
    end.synchronize()
    # late: the host was still enqueueing when the device finished the hold (then the sample is partly host-paced)
    late = 1.0 if host_ms > 0.9 * hold_ms else 0.0
    return {"ms": start.elapsed_time(end) / (calls - 1), "host_ms": host_ms / calls, "late": late}


def per_call_ms(call: Any) -> float:
    """The group's time of one call after a synchronize (the MAX over ranks), to size the windows."""
    call()
    if cc.GPU:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        call()
    if cc.GPU:
        torch.cuda.synchronize()
    return cc.agree_max([(time.perf_counter() - t0) * 1e3 / 3])[0]


def leaders(corpus: dict[str, Any], key: str, count: int, extra: list[str]) -> list[str]:
    """The ``count`` best configs of the recorded case, and ``extra`` ones that it holds."""
    ratios = corpus.get(key, {}).get("ratios", {})
    best = sorted(ratios, key=ratios.get)[:count]
    return best + [x for x in extra if x in ratios and x not in best]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cases", default="rs:1024x8192x8192,rs:4096x4096x3584,ag:4096x4096x3584")
    p.add_argument("--corpus", type=Path, default=Path(__file__).parent / "results/corpus/collective_w4.json")
    p.add_argument("--configs", type=int, default=8, help="the recorded case's best configs to time")
    p.add_argument("--extra", default="", help="comma-separated config names to time beside them")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--window-ms", type=float, default=3.0)
    p.add_argument("--queued-ms", type=float, default=3.0, help="device time of the queued calls")
    p.add_argument("--cpu-smoke", action="store_true")
    args = p.parse_args()
    if cc.GPU:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cc.GPU else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device, dtype = ("cuda", torch.bfloat16) if cc.GPU else ("cpu", torch.float32)
    corpus = json.loads(args.corpus.read_text()) if args.corpus.exists() else {}
    gpu = cc.device_name()
    report: dict[str, Any] = {"gpu": gpu, "world": world, "torch": torch.__version__, "rounds": args.rounds,
                              "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
                              "cases": {}}
    for op, shape in (c.split(":") for c in args.cases.split(",")):
        shape = cc.SMOKE_SHAPE if args.cpu_smoke else shape
        case = cc.make_case(op, shape, args.cpu_smoke, device, dtype)
        key = cc.case_key(gpu, op, world, shape, len(case.kept))
        by_name = {cc.text(c): c for c in case.kept}
        names = leaders(corpus, key, args.configs, args.extra.split(",")) or sorted(by_name)[:args.configs]
        names = [n for n in names if n in by_name]
        sizes = {n: per_call_ms(case.call(by_name[n])) for n in names}
        samples: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        rng = random.Random(f"{shape}/{op}")
        for r in range(args.rounds):
            order = list(names)
            rng.shuffle(order)
            for n in order:
                call, once = case.call(by_name[n]), max(sizes[n], 1e-3)
                calls = max(3, math.ceil(args.window_ms / once))
                e = eager(call, calls, settle=max(1, math.ceil(10.0 / once)))
                q_calls = max(3, math.ceil(args.queued_ms / once))
                q = queued(call, q_calls, hold_ms=min(50.0, 2.0 + 0.15 * q_calls))
                row = [e["ms"], e["host_ms"], e["began"], q["ms"], q["host_ms"], q["late"], sm_clock()]
                ranks = cc.gathered(row)
                samples[n].append({"round": r, "eager_ms": [x[0] for x in ranks],
                                   "eager_host_ms": [x[1] for x in ranks],
                                   "began": [x[2] for x in ranks], "queued_ms": [x[3] for x in ranks],
                                   "queued_host_ms": [x[4] for x in ranks], "late": [x[5] for x in ranks],
                                   "sm_mhz": [x[6] for x in ranks]})
        report["cases"][key] = {"op": op, "shape": shape, "configs": names, "samples": samples}
        if rank == 0:
            print(summary(key, samples), flush=True)
    if rank == 0:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def summary(key: str, samples: dict[str, list[dict[str, Any]]]) -> str:
    """Per method: the median over configs of each config's spread (max/min of its group samples), the share of
    samples over 1.1x their config's least, and the ranking's best; the host's launch time against the device's."""
    lines = [f"== {key}"]
    for method in ("eager", "queued"):
        group = {n: [max(s[f"{method}_ms"]) for s in rows] for n, rows in samples.items()}
        spread = statistics.median(max(v) / min(v) for v in group.values())
        slow = sum(t > 1.1 * min(v) for v in group.values() for t in v) / sum(len(v) for v in group.values())
        med = {n: statistics.median(v) for n, v in group.items()}
        least = {n: min(v) for n, v in group.items()}
        host = statistics.median(max(s[f"{method}_host_ms"]) for rows in samples.values() for s in rows)
        device = statistics.median(med.values())
        lines.append(f"  {method:6s}: spread {spread:.3f}, {100 * slow:.0f}% of samples >1.1x their least; best by "
                     f"median {min(med, key=med.get)} {min(med.values()):.4f} ms, by least "
                     f"{min(least, key=least.get)} {min(least.values()):.4f} ms; host {host:.4f} ms/call against "
                     f"device {device:.4f}")
    for n, rows in samples.items():
        e = [max(s["eager_ms"]) for s in rows]
        q = [max(s["queued_ms"]) for s in rows]
        skew = statistics.median(1e3 * (max(s["began"]) - min(s["began"])) for s in rows)
        lines.append(f"    {n:36s} eager {' '.join(f'{x:.4f}' for x in e)} | queued {' '.join(f'{x:.4f}' for x in q)}"
                     f" | skew {skew:.2f} ms, late {sum(max(s['late']) for s in rows):.0f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
