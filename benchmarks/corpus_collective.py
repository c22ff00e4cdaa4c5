"""Record exhaustive group-time landscapes of the collective families (issue 33's corpus): the examples' AG-GEMM
and GEMM-RS on every rank of a job, every kept config timed by the group.

Space: algo in {chunked (splits 1, 2, 4), sequential} x a GEMM tile grid (BLOCK_M 16-256 x BLOCK_N 32-256 x
BLOCK_K 32-128, GROUP_M 8, warps {4, 8}, stages {3, 4}), pruned by the example's own ``*_prune``.

Method (the "group oracle"): for each config, in an order every rank shares, two warm-up calls, then a timed
window of back-to-back calls (device events around the window, at least ``--window-ms``), a barrier between
configs; the config's time is the MAX over ranks of the per-call time (what the group waits for). The configs
within 1.25x of the best (16 to 32 of them) are then refined in ``--rounds`` shuffled rounds (shared seed), each
a 10 ms settling window then the timed window, no barrier inside a round; a finalist's ratio is the median over
rounds of its time over the round's median (drift-free), relative to the best. Output: one JSON per job with
the same fields as ``corpus.py`` (``ratios``, ``screen_ms``, ``best`` ...).

Launch::

    torchrun --nproc-per-node 4 benchmarks/corpus_collective.py --op ag --shapes 4096x4096x3584 --out F.json
    TRITON_INTERPRET=1 torchrun --nproc-per-node 2 benchmarks/corpus_collective.py --op ag --out F.json --cpu-smoke
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples import ag_gemm as ag_mod  # noqa: E402
from examples import gemm_rs as rs_mod  # noqa: E402

GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"


def tiles(smoke: bool) -> list[str]:
    if smoke:
        return ["16x16x16-g2-w1-s1", "32x32x32-g4-w4-s2"]
    axes = ((16, 32, 64, 128, 256), (32, 64, 128, 256), (32, 64, 128), (8,), (4, 8), (3, 4))
    return [f"{bm}x{bn}x{bk}-g{g}-w{w}-s{s}" for bm, bn, bk, g, w, s in itertools.product(*axes)]


def space(op: str, smoke: bool) -> list[dict[str, Any]]:
    algos = [("chunked", 1), ("chunked", 2), ("chunked", 4), ("sequential", 1)]
    return [{"algo": a, "splits": s, "gemm_config": t} for (a, s), t in itertools.product(algos, tiles(smoke))]


def text(config: dict[str, Any]) -> str:
    return f"{config['algo']}-x{config['splits']}-{config['gemm_config']}"


def timed(call: Any, window_ms: float, settle_ms: float = 0.0) -> float:
    """ms per call of ``call`` over a window of back-to-back calls (device events; wall clock on CPU)."""
    if not GPU:
        t0 = time.perf_counter()
        call()
        return (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    once = max(start.elapsed_time(end), 1e-3)
    for _ in range(max(0, math.ceil(settle_ms / once))):
        call()
    n = max(3, math.ceil(window_ms / once))
    start.record()
    for _ in range(n):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def warm_tiles(specs: list[str], a: torch.Tensor, b: torch.Tensor) -> None:
    """Compile the examples' GEMM kernel for ``specs`` at ``a @ b`` in parallel threads (no launch)."""
    from concurrent.futures import ThreadPoolExecutor

    import triton

    from examples.gemm_kernels import _gemm_kernel, to_triton_config

    a3 = a.unsqueeze(0)
    o3 = torch.empty(1, a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)

    def one(spec: str) -> None:
        cfg = to_triton_config(spec)
        kw = cfg.kwargs
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        grid = (triton.cdiv(m, kw["BLOCK_M"]) * triton.cdiv(n, kw["BLOCK_N"]), 1)
        try:
            _gemm_kernel.warmup(a3, b, o3, m, n, k, *a3.stride(), *b.stride(), *o3.stride(),
                                EVEN_K=k % kw["BLOCK_K"] == 0, num_warps=cfg.num_warps,
                                num_stages=cfg.num_stages, grid=grid, **kw)
        except Exception:  # noqa: BLE001 (out of resources: the config fails when screened)
            pass

    with ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 4) // max(1, dist.get_world_size()))) as pool:
        list(pool.map(one, specs))


def group_max(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64, device="cuda" if GPU else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", choices=("ag", "rs"), required=True)
    p.add_argument("--shapes", default="4096x4096x3584", help="MxKxN: the full problem (M rows after the gather "
                                                               "for AG, before the scatter for RS)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--window-ms", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cpu-smoke", action="store_true")
    args = p.parse_args()
    dist.init_process_group("nccl" if GPU else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = "cpu"
    if GPU:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        device = "cuda"
    dtype = torch.bfloat16 if GPU else torch.float32
    fn = ag_mod.ag_gemm if args.op == "ag" else rs_mod.gemm_rs
    corpus = json.loads(args.out.read_text()) if args.out.exists() and rank == 0 else {}
    gpu = torch.cuda.get_device_name() if GPU else "cpu-smoke"
    for shape in ([("24x16x8")] if args.cpu_smoke else args.shapes.split(",")):
        m, k, n = (int(v) for v in shape.split("x"))
        gen = torch.Generator().manual_seed(rank * 1000 + m)
        if args.op == "ag":
            a = torch.randn(m // world, k, generator=gen).to(device, dtype)
            b = torch.randn(k, n, generator=gen).to(device, dtype)
        else:  # RS: K is split over the ranks
            a = torch.randn(m, k // world, generator=gen).to(device, dtype)
            b = torch.randn(k // world, n, generator=gen).to(device, dtype)
        prune = ag_mod.ag_gemm_prune if args.op == "ag" else rs_mod.gemm_rs_prune
        kept = [c for c in space(args.op, args.cpu_smoke) if prune(c, a, b, group=None)]
        started = time.perf_counter()
        if GPU:  # compile every tile in threads first (Triton's compile-only launch), as a tuner's precompile does
            warm_tiles(sorted({c["gemm_config"] for c in kept}), a if args.op == "rs" else a.repeat(world, 1), b)
        # compile: every rank calls every config once, together (the calls hold collectives)
        for c in kept:
            try:
                fn(a, b, algo=c["algo"], splits=c["splits"], gemm_config=c["gemm_config"])
            except Exception:  # noqa: BLE001 (a config that cannot run: screened as failed below)
                pass
        if GPU:
            torch.cuda.synchronize()
        dist.barrier()
        compile_s = time.perf_counter() - started
        screened: dict[str, float] = {}
        failed: dict[str, str] = {}
        for c in kept:
            name = text(c)
            try:
                call = functools.partial(fn, a, b, algo=c["algo"], splits=c["splits"], gemm_config=c["gemm_config"])
                call()
                mine = timed(call, args.window_ms)
                ok = 1.0
            except Exception as exc:  # noqa: BLE001
                failed[name], mine, ok = f"{type(exc).__name__}: {str(exc)[:200]}", math.inf, 0.0
            t = group_max(mine if ok else 1e30)
            dist.barrier()
            if t < 1e29:
                screened[name] = t
            else:
                failed.setdefault(name, "failed on another rank")
        by_time = sorted(screened, key=screened.get)
        finalists = [x for x in by_time if screened[x] <= 1.25 * screened[by_time[0]]][:32]
        finalists = finalists if len(finalists) >= 16 else by_time[:16]
        configs = {text(c): c for c in kept}
        samples: dict[str, list[float]] = {x: [] for x in finalists}
        rng = random.Random(m)
        for _ in range(args.rounds):
            order = list(finalists)
            rng.shuffle(order)
            for x in order:
                c = configs[x]
                call = functools.partial(fn, a, b, algo=c["algo"], splits=c["splits"], gemm_config=c["gemm_config"])
                samples[x].append(group_max(timed(call, 2 * args.window_ms, settle_ms=10.0)))
        rel = {x: statistics.median(samples[x][r] / statistics.median(samples[y][r] for y in finalists)
                                    for r in range(args.rounds)) for x in finalists}
        best = min(rel, key=rel.get)
        final_ms = {x: statistics.median(samples[x]) for x in finalists}
        ratios = {x: screened[x] / final_ms[best] for x in screened}
        ratios.update({x: rel[x] / rel[best] for x in finalists})
        if rank == 0:
            key = f"{gpu}|{args.op}_gemm_w{world}|{shape}|{len(kept)}"
            corpus[key] = {"space": f"{args.op}_gemm_w{world}", "family": f"{args.op}_gemm", "m": shape,
                           "kept": len(kept), "compile_s": compile_s, "failed": failed, "screen_ms": screened,
                           "finalists": finalists, "final_ms": final_ms, "ratios": ratios, "best": best,
                           "best_ms": final_ms[best], "rounds": args.rounds, "world": world,
                           "method": "eager windows on every rank, MAX over ranks; leaders in shuffled rounds",
                           "seconds": time.perf_counter() - started}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(corpus, indent=1))
            print(f"[corpus_collective] {args.op} {shape}: {len(kept)} kept, {len(failed)} failed, best {best} "
                  f"{final_ms[best]:.3f} ms, {time.perf_counter() - started:.1f} s", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
