"""Record exhaustive group-time landscapes of the collective families (issue 39, item 3): the examples' AG-GEMM and
GEMM-RS on every rank of a job, every kept config timed by the group, written in the corpus format of
``corpus.py`` (family ``collective``: the replays hold it out as one family).

Space: algo in {chunked (splits 1, 2, 4), sequential} x a GEMM tile grid (BLOCK_M 16-256 x BLOCK_N 32-256 x
BLOCK_K 32-128, GROUP_M 8, warps {4, 8}, stages {3, 4}; 210 tiles fit Hopper's shared memory), pruned by the
example's own ``*_prune``: 840 configs at the default shapes on 4 or 2 ranks.

Method (the "group oracle"):

1. compile every tile for the shape in threads (Triton's compile-only launch), at most a third of the case's time;
2. **screen** every kept config, in a shuffled order every rank shares (so that a case cut short is a uniform
   sample): one untimed call (compiles what is left, warms up), then a timed window of back-to-back calls (device
   events around the window, at least ``--window-ms``). The number of calls in a window is agreed (the MAX over
   ranks of one call's time sets it), so every rank issues the same collectives. Each rank's time per call is
   gathered: the config's **group time** is the MAX over ranks (what the group waits for); ``screen_per_rank``
   keeps every rank's. ``--passes`` passes (default 3) over every config, each in its own shared order; a config's
   screened time is the median of its passes (``screen_passes_ms`` keeps each). One pass is not enough: on 2 H200s
   a single 3 ms window read a config 1.58x its time (a disturbed window), so the refinement never saw it and
   the oracle judged the tuners' choice of it 1.58x;
3. the configs within 1.25x of the best (16 to 32 of them) are **refined** in ``--rounds`` shuffled rounds (shared
   seed), each a 10 ms settling window then a timed window of twice the length; a finalist's ratio is the median
   over rounds of its time over the round's median (drift-free), relative to the best.

Time: ``--time-limit`` seconds for the whole job; each case (op, shape) gets an equal share of what is left when
it starts, so a slow case cannot take the others' time. Screening stops, on every rank at the same config (the
stop flag travels with the gathered times), where the case's share would not leave time for the refinement; the
case is then recorded with ``"complete": false`` and what it screened. Run the same command again to go on: a
complete case in ``--out`` is skipped, an incomplete one resumes (its screened passes are kept, the rest screened,
the refinement redone). Rank 0 prints a progress line every ``--progress-every`` configs (elapsed, ETA).

Launch (the script sets NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 itself)::

    torchrun --nproc-per-node 4 benchmarks/corpus_collective.py --op ag,rs --out F.json --time-limit 540
    TRITON_INTERPRET=1 torchrun --nproc-per-node 2 benchmarks/corpus_collective.py --op ag,rs --out F.json --cpu-smoke
"""

from __future__ import annotations

import os

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NO_MULTICAST)  # before torch starts NCCL or symmetric memory: NVLink multicast stays off

import argparse  # noqa: E402
import functools  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _collective_report import case_key  # noqa: E402

from examples import ag_gemm as ag_mod  # noqa: E402
from examples import gemm_rs as rs_mod  # noqa: E402

GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
SHAPES = "4096x4096x3584,1024x8192x8192"
#: the one shape of ``--cpu-smoke`` (Triton's interpreter on CPU ranks)
SMOKE_SHAPE = "24x16x8"
#: a gathered time that means "failed on this rank"
FAILED = 1e30
#: spin cycles per microsecond of the device hold (``torch.cuda._sleep``; about an H200's SM clock)
HOLD_CYCLES_PER_US = 1900


def tiles(smoke: bool) -> list[str]:
    if smoke:
        return ["16x16x16-g2-w1-s1", "32x32x32-g4-w4-s2"]
    from examples.gemm_kernels import H100_SHARED_MEMORY_BYTES, prune_by_shared_memory

    axes = ((16, 32, 64, 128, 256), (32, 64, 128, 256), (32, 64, 128), (8,), (4, 8), (3, 4))
    specs = [f"{bm}x{bn}x{bk}-g{g}-w{w}-s{s}" for bm, bn, bk, g, w, s in itertools.product(*axes)]
    return [s for s in specs if prune_by_shared_memory(s, 2, H100_SHARED_MEMORY_BYTES)]


def space(smoke: bool) -> list[dict[str, Any]]:
    algos = [("chunked", 1), ("chunked", 2), ("chunked", 4), ("sequential", 1)]
    return [{"algo": a, "splits": s, "gemm_config": t} for (a, s), t in itertools.product(algos, tiles(smoke))]


def text(config: dict[str, Any]) -> str:
    """The corpus name of a config (``replay_search.load`` parses it back)."""
    return f"{config['algo']}-x{config['splits']}-{config['gemm_config']}"


def device_name() -> str:
    """The GPU's name as the corpus keys carry it (``cpu-smoke`` in the interpreter)."""
    return torch.cuda.get_device_name() if GPU else "cpu-smoke"


def agree_max(values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device="cuda" if GPU else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.tolist()]


def gathered(values: list[float]) -> list[list[float]]:
    """Every rank's ``values`` (one collective), in rank order."""
    t = torch.tensor(values, dtype=torch.float64, device="cuda" if GPU else "cpu")
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return [[float(v) for v in o.tolist()] for o in out]


def timed(call: Any, window_ms: float, settle_ms: float = 0.0, queued: bool = True) -> float:
    """ms per call of ``call`` over a window of back-to-back calls (device events; wall clock on CPU). The call
    counts come from the MAX over ranks of one call's time, so every rank issues the same collectives.

    ``queued`` (the default since the eighth session): the window's calls are enqueued while a spin kernel holds
    the device (for 1.5x the host's launch time of the window, the MAX over ranks), and timed from the end of the
    first (which absorbs the ranks' arrival skew): the group's device time. Else (``--timing eager``) the host
    launches each call as the device takes them, and a host-bound function's window reads the slowest rank's host:
    on 4 H200s GEMM-RS spread 1.36-1.76 over rounds that way, 1.005 queued
    (``benchmarks/diagnose_collective_noise.py``)."""
    if not GPU:
        t0 = time.perf_counter()
        call()
        return (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    (once,) = agree_max([max(start.elapsed_time(end), 1e-3)])
    settle = max(1 if queued else 0, math.ceil(settle_ms / once))
    t0 = time.perf_counter()
    for _ in range(settle):
        call()
    host_ms = (time.perf_counter() - t0) * 1e3 / max(1, settle)
    n = max(3, math.ceil(window_ms / once))
    if queued:
        (host_ms,) = agree_max([host_ms])
        torch.cuda._sleep(int(min(50.0, 1.0 + 1.5 * n * host_ms) * 1e3 * HOLD_CYCLES_PER_US))
        call()
        n -= 1
    start.record()
    for _ in range(n):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def warm_tiles(specs: list[str], a: torch.Tensor, b: torch.Tensor, deadline: float) -> int:
    """Compile the examples' GEMM kernel for ``specs`` at ``a @ b`` in parallel threads (no launch), none begun
    after ``deadline`` (this rank's clock: nothing here is collective); how many were begun."""
    from concurrent.futures import ThreadPoolExecutor

    import triton

    from examples.gemm_kernels import _gemm_kernel, to_triton_config

    a3 = a.unsqueeze(0)
    o3 = torch.empty(1, a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)

    def one(spec: str) -> int:
        if time.perf_counter() > deadline:
            return 0
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
        return 1

    with ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 4) // max(1, dist.get_world_size()))) as pool:
        return sum(pool.map(one, specs))


@dataclass
class Case:
    """One (op, shape) of the job, with its inputs on this rank."""

    op: str
    shape: str
    a: torch.Tensor
    b: torch.Tensor
    kept: list[dict[str, Any]]

    @property
    def fn(self) -> Any:
        return ag_mod.ag_gemm if self.op == "ag" else rs_mod.gemm_rs

    def call(self, config: dict[str, Any]) -> Any:
        return functools.partial(self.fn, self.a, self.b, algo=config["algo"], splits=config["splits"],
                                 gemm_config=config["gemm_config"])


def make_case(op: str, shape: str, smoke: bool, device: str, dtype: torch.dtype) -> Case:
    rank, world = dist.get_rank(), dist.get_world_size()
    m, k, n = (int(v) for v in shape.split("x"))
    gen = torch.Generator().manual_seed(rank * 1000 + m)
    if op == "ag":
        a = torch.randn(m // world, k, generator=gen).to(device, dtype)
        b = torch.randn(k, n, generator=gen).to(device, dtype) / k**0.5
    else:  # RS: K is split over the ranks
        a = torch.randn(m, k // world, generator=gen).to(device, dtype)
        b = torch.randn(k // world, n, generator=gen).to(device, dtype) / k**0.5
    prune = ag_mod.ag_gemm_prune if op == "ag" else rs_mod.gemm_rs_prune
    return Case(op, shape, a, b, [c for c in space(smoke) if prune(c, a, b, group=None)])


class Progress:
    """Rank 0's progress lines: every ``every`` configs, with the elapsed time and an ETA."""

    def __init__(self, label: str, total: int, every: int) -> None:
        self.label, self.total, self.every = label, total, max(1, every)
        self.started = self.stage_started = time.perf_counter()
        self.loud = dist.get_rank() == 0

    def say(self, message: str) -> None:
        if self.loud:
            print(f"[corpus_collective] {self.label}: {message}", flush=True)

    def step(self, done: int, todo: int, left_s: float, stage: str = "") -> None:
        """After ``done`` of ``todo`` configs of ``stage`` (the ETA is that stage's)."""
        if done == 1:
            self.stage_started = time.perf_counter()
        if done % self.every and done != todo:
            return
        now = time.perf_counter()
        eta = (now - self.stage_started) / max(1, done) * (todo - done)
        self.say(f"{stage + ': ' if stage else ''}screened {done}/{todo} ({self.total} kept) in "
                 f"{now - self.started:.1f} s, ETA {eta:.0f} s, case time left {left_s:.0f} s")


def screen(case: Case, known: dict[str, list[float]], args: argparse.Namespace, stop_at: float,
           progress: Progress) -> tuple[dict[str, list[float]], dict[str, list[list[float]]], dict[str, str], bool]:
    """``args.passes`` group times of every kept config, each pass in its own shuffled order every rank shares, the
    configs ``known`` has enough passes of skipped; (group times per pass, every rank's per pass, failures,
    complete?)."""
    passes, per_rank, failed = {k: list(v) for k, v in known.items()}, {}, {}
    for p in range(args.passes):
        order = list(range(len(case.kept)))
        random.Random(f"{case.op}/{case.shape}/{p}").shuffle(order)
        todo = [i for i in order if len(passes.get(text(case.kept[i]), [])) <= p]
        todo = [i for i in todo if text(case.kept[i]) not in failed]
        for done, i in enumerate(todo, 1):
            name = text(case.kept[i])
            try:
                call = case.call(case.kept[i])
                call()
                mine = timed(call, args.window_ms, queued=args.timing == "queued")
            except Exception as exc:  # noqa: BLE001 (a config that cannot run: failed on every rank)
                failed[name], mine = f"{type(exc).__name__}: {str(exc)[:200]}", FAILED
            ranks = gathered([mine, float(time.perf_counter() > stop_at)])
            times = [r[0] for r in ranks]
            if max(times) < FAILED:
                passes.setdefault(name, []).append(max(times))
                per_rank.setdefault(name, []).append(times)
            else:
                failed.setdefault(name, "failed on another rank")
                passes.pop(name, None)
            progress.step(done, len(todo), stop_at - time.perf_counter(), f"pass {p + 1}/{args.passes}")
            if max(r[1] for r in ranks) > 0 and (done < len(todo) or p + 1 < args.passes):
                progress.say(f"out of time in pass {p + 1}: {done} of {len(todo)} screened this run")
                return passes, per_rank, failed, False
    return passes, per_rank, failed, True


def refine(case: Case, screened: dict[str, float], args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The leaders in shuffled rounds: each one's ratio to the best (median over rounds of time / round median)."""
    by_time = sorted(screened, key=screened.get)
    finalists = [x for x in by_time if screened[x] <= 1.25 * screened[by_time[0]]][:32]
    finalists = finalists if len(finalists) >= 16 else by_time[:16]
    configs = {text(c): c for c in case.kept}
    samples: dict[str, list[float]] = {x: [] for x in finalists}
    rng = random.Random(seed)
    for _ in range(args.rounds):
        order = list(finalists)
        rng.shuffle(order)
        for x in order:
            window = timed(case.call(configs[x]), 2 * args.window_ms, settle_ms=10.0, queued=args.timing == "queued")
            samples[x].append(agree_max([window])[0])
    rel = {x: statistics.median(samples[x][r] / statistics.median(samples[y][r] for y in finalists)
                                for r in range(args.rounds)) for x in finalists}
    best = min(rel, key=rel.get)
    final_ms = {x: statistics.median(samples[x]) for x in finalists}
    ratios = {x: screened[x] / final_ms[best] for x in screened}
    ratios.update({x: rel[x] / rel[best] for x in finalists})
    return {"finalists": finalists, "final_ms": final_ms, "final_samples_ms": samples, "ratios": ratios, "best": best,
            "best_ms": final_ms[best]}


def record(case: Case, key: str, earlier: dict[str, Any], args: argparse.Namespace, deadline: float) -> dict[str, Any]:
    """Screen and refine one case within ``deadline`` (this rank's clock); its corpus entry."""
    started = time.perf_counter()
    world = dist.get_world_size()
    progress = Progress(f"{case.op} {case.shape} on {world} ranks", len(case.kept), args.progress_every)
    progress.say(f"{len(case.kept)} configs kept, {deadline - started:.0f} s for this case"
                 + (f", resuming {len(earlier.get('screen_ms', {}))} screened" if earlier else ""))
    if GPU:  # compile every tile in threads first, as a tuner's precompile does; at most a third of the time
        a = case.a if case.op == "rs" else case.a.repeat(world, 1)
        begun = warm_tiles(sorted({c["gemm_config"] for c in case.kept}), a, case.b,
                           started + (deadline - started) / 3)
        progress.say(f"compiled {begun} tiles in {time.perf_counter() - started:.1f} s")
    dist.barrier()
    compile_s = time.perf_counter() - started
    # the refinement: finalists x rounds windows of 10 ms + 2 windows + a call, with room for the host
    reserve = 32 * args.rounds * (0.01 + 3 * args.window_ms / 1e3 + 0.05) + 10.0
    failed = dict(earlier.get("failed", {}))
    known = {k: v for k, v in earlier.get("screen_passes_ms", {}).items() if k not in failed}
    passes, per_rank, new_failed, complete = screen(case, known, args, deadline - reserve, progress)
    failed.update(new_failed)
    per_rank = {k: earlier.get("screen_per_rank", {}).get(k, []) + per_rank.get(k, []) for k in passes}
    screened = {k: statistics.median(v) for k, v in passes.items()}  # one slow window does not exclude a config
    found = refine(case, screened, args, seed=int(case.shape.split("x")[0]))
    seconds = time.perf_counter() - started
    progress.say(f"{len(screened)} screened, {len(failed)} failed, best {found['best']} {found['best_ms']:.3f} ms, "
                 f"{'complete' if complete else 'INCOMPLETE'}, {seconds:.1f} s")
    return {"space": key.split("|")[1], "family": "collective", "op": case.op, "m": case.shape,
            "kept": len(case.kept), "complete": complete, "resumed": len(earlier.get("screen_ms", {})),
            "compile_s": compile_s, "failed": failed, "screen_ms": screened, "screen_passes_ms": passes,
            "screen_per_rank": per_rank, **found, "rounds": args.rounds, "passes": args.passes, "world": world,
            "window_ms": args.window_ms,
            "timing": args.timing,
            "method": f"{args.timing} windows on every rank (agreed call counts), MAX over ranks; the median of the "
                      "screening passes; leaders in shuffled rounds",
            "env": {k: os.environ.get(k) for k in sorted(os.environ) if k.startswith(("NCCL_", "TORCH_SYMM",
                                                                                      "NVSHMEM_"))},
            "seconds": seconds + earlier.get("seconds", 0.0)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="ag,rs", help="comma-separated: ag, rs")
    p.add_argument("--shapes", default=SHAPES, help="MxKxN: the full problem (M rows after the gather for AG, "
                                                    "before the scatter for RS)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--window-ms", type=float, default=3.0)
    p.add_argument("--timing", choices=("queued", "eager"), default="queued",
                   help="queued: the group's device time (calls queued behind a hold); eager: as the host launches "
                        "them (the recordings before the eighth session)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of the leaders' refinement")
    p.add_argument("--passes", type=int, default=3,
                   help="screening passes over every config (each its own order); a config's screened time is the "
                        "median of its passes, so one disturbed window cannot keep it from the refinement")
    p.add_argument("--time-limit", type=float, default=540.0, help="seconds for the whole job (shared by cases)")
    p.add_argument("--progress-every", type=int, default=50)
    p.add_argument("--cpu-smoke", action="store_true")
    args = p.parse_args()
    if GPU:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if GPU else "gloo")
    dist.barrier()
    started = time.perf_counter()
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0 and world not in (2, 4):
        print(f"[corpus_collective] note: {world} ranks (issue 39 asks for 4, or 2 where only 2 GPUs are)")
    device, dtype = ("cuda", torch.bfloat16) if GPU else ("cpu", torch.float32)
    shared = [json.loads(args.out.read_text()) if args.out.exists() and rank == 0 else {}]
    dist.broadcast_object_list(shared, src=0)  # every rank skips and resumes the same cases
    corpus: dict[str, Any] = shared[0]
    gpu = device_name()
    shapes = [SMOKE_SHAPE] if args.cpu_smoke else args.shapes.split(",")
    pending = []
    for op, shape in ((op, s) for op in args.op.split(",") for s in shapes):
        case = make_case(op, shape, args.cpu_smoke, device, dtype)
        key = case_key(gpu, op, world, shape, len(case.kept))
        if corpus.get(key, {}).get("complete", False):
            if rank == 0:
                print(f"[corpus_collective] {op} {shape}: recorded already, skipped", flush=True)
            continue
        pending.append((case, key))
    for index, (case, key) in enumerate(pending):
        left = args.time_limit - (time.perf_counter() - started)
        entry = record(case, key, corpus.get(key, {}), args, time.perf_counter() + left / (len(pending) - index))
        corpus[key] = entry
        if rank == 0:  # saved as soon as measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(corpus, indent=1))
    if rank == 0:
        done = sum(e.get("complete", False) for e in corpus.values())
        print(f"[corpus_collective] {done} of {len(corpus)} cases in {args.out} complete", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
