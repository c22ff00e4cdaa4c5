"""AG-GEMM and GEMM-RS on GPUs: ours tuned against the chosen algorithm called directly, PyTorch's fused op and
the baselines, measured so that a cell repeats (issue 33, item 4).

Usage (one rank per GPU; the script also forces NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
NVSHMEM_DISABLE_NVLS=1 before the group starts)::

    torchrun --nproc-per-node 4 benchmarks/bench_ag_gemm.py --out DIR [--ops ag,rs]
        [--ag-shapes 8192x8192x8192,16384x8192x8192] [--rs-shapes 8192x8192x8192,32768x8192x3584]
        [--repeats 3] [--rounds 5] [--window-ms 60] [--order shuffled|fixed] [--nccl-debug] [--no-tune] [--sweep]

Shapes are ``M x K x N`` in bf16 (float32 on CPU) with tensor-parallel sharding over the W ranks:

* AG-GEMM: A row-sharded ``[M/W, K]`` per rank, B the rank's column shard ``[K, N/W]``; out ``[M, N/W]``.
* GEMM-RS: A column-sharded ``[M, K/W]``, B the rank's row shard ``[K/W, N]``; out ``[M/W, N]``.

Contenders per (op, shape) cell: ``ours`` (the tuned function, hot path, after tuning with a fresh cache in
``DIR/tune_cache`` unless TRITON_DIST_AUTOTUNE_CACHE_DIR is set), ``direct`` (the example function called with
the config ``ours`` chose, read from ``LAST_CONFIG`` after a hot-path call: same code, same allocations, no
tuner), ``fused`` (``torch.ops.symm_mem.fused_*`` called directly), ``torch`` (collective then ``torch.mm``),
``comm`` and ``gemm`` (each alone, into preallocated buffers), and with ``--sweep`` a hand-picked list of configs.

Method (why: the old version timed each contender in one block, the fused op before the tuning and ours right
after it, with the GPUs at another clock and the allocator in another state; see benchmarks/ag_gemm_notes.md):

1. tune every cell first; then free the allocator's cache and warm every contender of every cell (``--warmup``
   calls each, in data-flow order, which includes first-call setup such as the fused op's symmetric-memory
   workspace and rendezvous), size the back-to-back windows, and run one untimed round of everything;
2. ``--repeats`` times, over the cells in a shuffled order: ``--rounds`` rounds, each timing every contender once
   per regime in an order shuffled per round and shared by all ranks (:mod:`benchmarks._interleave`):
   * latency: barrier + synchronize, one call timed with CUDA events (``--lat-calls`` such samples per round);
   * back-to-back: barrier + synchronize, ``--settle-ms`` of untimed calls, then a window of about
     ``--window-ms`` (at least ``--min-calls`` calls) timed with events, ms per call;
   a repeat's value is the max over ranks of the rank's median over its rounds;
3. per cell and regime: each contender's median over the repeats and its spread (max / min - 1), ours / direct
   and ours / fused (per repeat, then their median and spread), the SM clock (pynvml, if importable; the min
   over ranks of the median) and the host time of a latency call (what the tuner's wrapper adds shows there).

To find the cause of a spread (issue 39, item 5), every sample is also written raw per rank
(``DIR/samples_rank{R}.json``: round, regime, position in the round's order and the contender before it, idle and
busy SM clock, clock-event reasons, host start time) and ``benchmarks/_ag_diagnose.py`` reads them into
``DIR/diagnosis.md``: per cell and contender, the spread over repeats beside the spread within a repeat, time
against SM clock, against position in the order, against the contender before it, and the ranks' arrival skew.
The JSON records every NCCL / symmetric-memory / NVSHMEM variable and the symmetric-memory state;
``--nccl-debug`` writes NCCL's INIT and TUNING log (channels, algorithms, protocols) to ``DIR/nccl_debug.*``;
``--order fixed`` times the contenders in the same order every round; ``--window-ms`` sets the windows' length.

The windows' defaults (60 ms after 100 ms of settling; before: 15 ms after 20 ms) come from the diagnosis on 2 H200s
(``benchmarks/RESULTS.md``, issue 39 item 5): with 15 ms windows the back-to-back cells spread 5.0-8.7% over their
repeats, with 60 ms windows 1.4-2.2% in 3 of 4 cells (the fused op at RS 8192: 14.4%) and ours/direct 0.994-0.999
in every cell. Those figures come from the run that chose the defaults. The latency regime (one call after a
barrier) spread 3.8-21.7% in every regime: a burst figure, reported beside the back-to-back one.

Writes ``DIR/bench_ag_gemm.json``, ``DIR/bench_ag_gemm.md``, ``DIR/samples_rank*.json`` and ``DIR/diagnosis.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
_OVERRIDDEN = {k: os.environ[k] for k, v in NO_MULTICAST.items() if os.environ.get(k, v) != v}
os.environ.update(NO_MULTICAST)  # before torch starts NCCL or symmetric memory: NVLink multicast stays off

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402

from benchmarks._interleave import Clock, Timer, estimate_ms, measure, shared_order, summarize, sync, window_sizes  # noqa: E402,E501
from examples._dist_common import LAST_CONFIG, enable_symm_mem, symm_mem_available  # noqa: E402
from examples.ag_gemm import ag_gemm, ag_gemm_prune, make_tuned_ag_gemm  # noqa: E402
from examples.gemm_kernels import TORCH_GEMM  # noqa: E402
from examples.gemm_rs import gemm_rs, gemm_rs_prune, make_tuned_gemm_rs  # noqa: E402

AG_SHAPES = "8192x8192x8192,16384x8192x8192"
RS_SHAPES = "8192x8192x8192,32768x8192x3584"
SWEEP_TILE = "128x256x64-g8-w8-s4"
SWEEP = [{"algo": a, "splits": s, "gemm_config": t} for a, s, t in (
    ("chunked", 2, TORCH_GEMM), ("p2p", 1, TORCH_GEMM), ("p2p", 4, TORCH_GEMM), ("sequential", 1, SWEEP_TILE))]
REGIMES = ("latency", "steady")


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float32."""
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def config_text(cfg: dict[str, Any] | None) -> str:
    return "-" if not cfg else f"{cfg['algo']}/{cfg['splits']}/{cfg['gemm_config']}"


class Cell:
    """One operation (AG-GEMM or GEMM-RS) at one shape: its tensors, its tuning and its contenders."""

    def __init__(self, op: str, shape: str, args: argparse.Namespace) -> None:
        m, k, n = (int(v) for v in shape.split("x"))
        world, cuda = dist.get_world_size(), torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self.op, self.shape, self.args = op, shape, args
        self.label = f"{op} {shape}"
        gen = torch.Generator(device=device).manual_seed(7 + dist.get_rank())
        opts = {"dtype": torch.bfloat16 if cuda else torch.float32, "device": device}  # CPU: smoke test
        if op == "ag":
            self.A = torch.randn(m // world, k, generator=gen, **opts)
            self.B = torch.randn(k, n // world, generator=gen, **opts) / k**0.5
            self.fn, self.prune, self.make_tuned = ag_gemm, ag_gemm_prune, make_tuned_ag_gemm
            self.fused_op = "fused_all_gather_matmul"
            self.gemm_in, self.gemm_out = torch.empty(m, k, **opts), torch.empty(m, n // world, **opts)
            self.comm_in, self.comm_out = self.A, self.gemm_in  # the collective fills the GEMM's input
        else:
            self.A = torch.randn(m, k // world, generator=gen, **opts)
            self.B = torch.randn(k // world, n, generator=gen, **opts) / k**0.5
            self.fn, self.prune, self.make_tuned = gemm_rs, gemm_rs_prune, make_tuned_gemm_rs
            self.fused_op = "fused_matmul_reduce_scatter"
            self.gemm_in, self.gemm_out = self.A, torch.empty(m, n, **opts)
            self.comm_in, self.comm_out = self.gemm_out, torch.empty(m // world, n, **opts)  # GEMM feeds it
        self.has_fused = symm_mem_available(self.A, None, self.fused_op)
        self.group_name = enable_symm_mem(None) if self.has_fused else ""
        self.tuned: Callable[..., Any] | None = None
        self.config: dict[str, Any] | None = None
        self.row: dict[str, Any] = {"op": op, "shape": shape, "M": m, "K": k, "N": n, "world": world}

    def ref(self) -> torch.Tensor:
        return self.fn(self.A, self.B, algo="torch")

    def tune(self) -> None:
        """Tune (timed, compiles included), then read the chosen config off a hot-path call."""
        row, tuned = self.row, self.make_tuned()
        dist.barrier()
        sync()
        start = time.perf_counter()
        tuned(self.A, self.B, autotune_verbose=self.args.verbose)  # tunes over the default group
        sync()
        row["tuning_s"] = time.perf_counter() - start
        out = tuned(self.A, self.B)  # the hot path: decided key, no tuner keyword
        self.tuned, self.config = tuned, dict(LAST_CONFIG[self.fn.__name__])
        configs: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(configs, self.config)
        row["config"], row["configs_agree"] = self.config, all(c == self.config for c in configs)
        ref = self.ref()
        row["ours_err"] = rel_err(out, ref)
        row["direct_err"] = rel_err(self.fn(self.A, self.B, **self.config), ref)

    def fused(self) -> torch.Tensor:
        if self.op == "ag":
            return torch.ops.symm_mem.fused_all_gather_matmul(self.A, [self.B], 0, self.group_name)[1][0]
        return torch.ops.symm_mem.fused_matmul_reduce_scatter(self.A, self.B, "sum", 0, self.group_name)

    def collective(self) -> None:
        if self.op == "ag":
            dist.all_gather_into_tensor(self.comm_out, self.comm_in)
        else:
            dist.reduce_scatter_tensor(self.comm_out, self.comm_in)

    def contenders(self) -> dict[str, Callable[[], Any]]:
        """Name -> zero-argument call, in data-flow order (the first warm-up fills the baselines' buffers)."""
        A, B, fn = self.A, self.B, self.fn
        base: dict[str, Callable[[], Any]] = {
            "comm": self.collective,
            "gemm": lambda: torch.mm(self.gemm_in, B, out=self.gemm_out),  # cuBLAS
        }
        if self.op == "rs":
            base = dict(reversed(base.items()))
        c: dict[str, Callable[[], Any]] = {}
        if self.tuned is not None and self.config is not None:
            tuned, config = self.tuned, self.config
            c["ours"] = lambda: tuned(A, B)
            c["direct"] = lambda: fn(A, B, **config)
        if self.has_fused:
            c["fused"] = self.fused
        c["torch"] = lambda: fn(A, B, algo="torch")
        c.update(base)
        if self.args.sweep:
            for cfg in SWEEP:
                if self.prune(cfg, A, B):
                    c[f"sweep:{config_text(cfg)}"] = lambda cfg=cfg: fn(A, B, **cfg)
        return c

    def check(self) -> None:
        """Errors of the fused op and the sweep against the ``torch`` algorithm."""
        ref = self.ref()
        if self.has_fused:
            self.row["fused_err"] = rel_err(self.fused(), ref)
        if self.args.sweep:
            self.row["sweep_err"] = {config_text(c): rel_err(self.fn(self.A, self.B, **c), ref) for c in SWEEP
                                     if self.prune(c, self.A, self.B)}


def warm(cells: list[Cell], calls: int) -> dict[str, dict[str, tuple[int, int]]]:
    """Every contender of every cell ``calls`` times (first-call setup included), then the window sizes."""
    sizes = {}
    for cell in cells:
        cell.check()
        for fn in cell.contenders().values():
            for _ in range(calls):
                fn()
            sync()
        dist.barrier()
        est = estimate_ms(cell.contenders())
        a = cell.args
        sizes[cell.label] = {n: window_sizes(ms, a.settle_ms, a.window_ms, a.min_calls) for n, ms in est.items()}
        cell.row["est_ms"] = est
        cell.row["window"] = {n: {"settle": s, "calls": k} for n, (s, k) in sizes[cell.label].items()}
    return sizes


def ratio_summary(per_repeat: list[dict[str, dict[str, Any]]], regime: str, a: str, b: str) -> dict[str, Any] | None:
    """``a / b`` in ``regime``, per repeat (paired: same rounds), with its median and spread."""
    if a not in per_repeat[0] or b not in per_repeat[0]:
        return None
    key = f"{regime}_ms"
    return summarize([r[a][key] / r[b][key] for r in per_repeat])


def summarize_cell(cell: Cell, per_repeat: list[dict[str, dict[str, Any]]]) -> None:
    """Medians and spreads over the repeats into ``cell.row``."""
    row = cell.row
    row["repeats"] = per_repeat
    row["contenders"] = {
        name: {key: summarize([r[name][key] for r in per_repeat])
               if all(r[name][key] is not None for r in per_repeat) else None
               for key in ("latency_ms", "steady_ms", "host_us", "latency_mhz", "steady_mhz")}
        for name in per_repeat[0]
    }
    for regime in REGIMES:
        row[f"{regime}_ratios"] = {
            "ours/direct": ratio_summary(per_repeat, regime, "ours", "direct"),
            "ours/fused": ratio_summary(per_repeat, regime, "ours", "fused"),
            "direct/fused": ratio_summary(per_repeat, regime, "direct", "fused"),
        }
        limits = [max(r["comm"][f"{regime}_ms"], r["gemm"][f"{regime}_ms"]) for r in per_repeat]
        row[f"{regime}_limit_ms"] = summarize(limits)


def settle_threads(limit_s: float = 20.0) -> dict[str, Any]:
    """The threads alive once tuning is over; waits (at most ``limit_s``) for the tuner's compile threads, which
    finish a compile already started when the decision came, so that none runs (holding the GIL at times) while
    a host-bound contender is timed. The old benchmark timed ours right after its tuning."""
    start = time.perf_counter()
    alive = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
    while time.perf_counter() - start < limit_s:
        busy = [t for t in threading.enumerate() if t.name.startswith("tdt-compile") and t.is_alive()]
        if not busy:
            break
        busy[0].join(timeout=0.5)
    left = sorted(t.name for t in threading.enumerate() if t.name.startswith("tdt-compile"))
    return {"threads": alive, "waited_s": time.perf_counter() - start, "compile_threads_left": left}


#: the environment variables that can change how the collectives run, recorded whole
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL", "TORCH_SYMM_MEM", "NVSHMEM_", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_VISIBLE",
                "TORCH_DIST")


def symm_mem_state(cells: list[Cell]) -> dict[str, Any]:
    """What symmetric memory the fused ops use: its backend (where torch says) and each cell's group name."""
    state: dict[str, Any] = {"cells": {c.label: {"has_fused": c.has_fused, "group": c.group_name} for c in cells}}
    try:
        from torch.distributed import _symmetric_memory as symm

        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
        if device is not None and hasattr(symm, "get_backend"):
            state["backend"] = symm.get_backend(device)
    except Exception as exc:  # noqa: BLE001 (a record only)
        state["backend_error"] = f"{type(exc).__name__}: {exc}"
    return state


def environment() -> dict[str, Any]:
    """GPU, versions and world size, for the JSON."""
    cuda = torch.cuda.is_available()
    return {
        "all_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "gpu": torch.cuda.get_device_name() if cuda else "CPU (smoke test, Triton interpreter)",
        "gpus": dist.get_world_size(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(str(v) for v in torch.cuda.nccl.version()) if cuda else "-",
        "env": {k: os.environ.get(k) for k in NO_MULTICAST},
        "env_overridden": _OVERRIDDEN,
        "sm_clock_read": Clock().handle is not None,
    }


def main() -> int:
    """Parse the arguments, tune, warm, measure every cell --repeats times, write JSON and markdown on rank 0."""
    parser = argparse.ArgumentParser(description="AG-GEMM / GEMM-RS benchmark (interleaved, repeated)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--ops", default="ag,rs")
    parser.add_argument("--ag-shapes", default=AG_SHAPES)
    parser.add_argument("--rs-shapes", default=RS_SHAPES)
    parser.add_argument("--repeats", type=int, default=3, help="whole measurements in this process")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per cell and repeat")
    parser.add_argument("--lat-calls", type=int, default=3, help="latency samples per contender and round")
    parser.add_argument("--settle-ms", type=float, default=100.0, help="untimed back-to-back calls before a window")
    parser.add_argument("--window-ms", type=float, default=60.0, help="timed back-to-back window (about)")
    parser.add_argument("--min-calls", type=int, default=5, help="calls per back-to-back window, at least")
    parser.add_argument("--warmup", type=int, default=5, help="calls per contender before any timing")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shared shuffles")
    parser.add_argument("--no-tune", action="store_true", help="skip the tuner (baselines and --sweep only)")
    parser.add_argument("--sweep", action="store_true", help="also time a hand-picked list of our configs")
    parser.add_argument("--verbose", action="store_true", help="print the tuner's tables")
    parser.add_argument("--order", choices=("shuffled", "fixed"), default="shuffled",
                        help="contenders' order in a round: shuffled per round (shared), or the same every round")
    parser.add_argument("--nccl-debug", action="store_true", help="NCCL's INIT,TUNING log into DIR/nccl_debug.*")
    args = parser.parse_args()
    import triton_dist_tune

    if args.nccl_debug:  # before the group starts NCCL
        args.out.mkdir(parents=True, exist_ok=True)
        os.environ.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING",
                           "NCCL_DEBUG_FILE": str(args.out.resolve() / "nccl_debug.%h.%p.log")})

    if not args.no_tune and "TRITON_DIST_AUTOTUNE_CACHE_DIR" not in os.environ:
        cache = args.out / "tune_cache"
        os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = str(cache)
        if int(os.environ.get("RANK", "0")) == 0 and cache.exists():
            shutil.rmtree(cache)  # a fresh cache: every shape is tuned
    triton_dist_tune.init_distributed()
    dist.barrier()
    rank, t0 = dist.get_rank(), time.perf_counter()
    say = (lambda *a: print(f"[{time.perf_counter() - t0:7.1f} s]", *a, flush=True)) if rank == 0 else (lambda *a: None)
    env = environment()
    shapes = {"ag": args.ag_shapes, "rs": args.rs_shapes}
    cells = [Cell(op, s, args) for op in args.ops.split(",") for s in shapes[op].split(",") if s]
    phases: dict[str, float] = {}
    if not args.no_tune:
        for cell in cells:
            cell.tune()
            say(f"tuned {cell.label}: {config_text(cell.config)} in {cell.row['tuning_s']:.1f} s")
    phases["tune_s"] = time.perf_counter() - t0
    env["after_tuning"] = settle_threads()
    env["symm_mem"] = symm_mem_state(cells)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the tuner's leftovers; the warm-up below allocates what the contenders need
    sizes = warm(cells, args.warmup)
    timer = Timer(Clock())
    for cell in cells:  # one untimed round of everything (windows included), discarded
        measure(cell.contenders(), sizes[cell.label], 1, 1, timer, args.seed, "burn-in", cell.label)
    phases["warm_s"] = time.perf_counter() - t0 - phases["tune_s"]
    say("warm; measuring")
    results: dict[str, list[dict[str, Any]]] = {c.label: [] for c in cells}
    by_label = {c.label: c for c in cells}
    raw: list[dict[str, Any]] = []
    cell_orders: list[list[str]] = []
    for rep in range(args.repeats):
        cell_orders.append(shared_order(list(by_label), args.seed, rep, "cells"))
        for label in cell_orders[-1]:
            cell = by_label[label]
            results[label].append(measure(cell.contenders(), sizes[label], args.rounds, args.lat_calls, timer,
                                          args.seed, rep, label, log=raw, fixed_order=args.order == "fixed"))
        say(f"repeat {rep + 1}/{args.repeats} done")
        if rank == 0:  # what a run cut short still leaves behind
            args.out.mkdir(parents=True, exist_ok=True)
            partial = {"environment": env, "rows": [c.row for c in cells], "repeats": results}
            (args.out / "bench_ag_gemm.partial.json").write_text(json.dumps(partial, indent=1, default=str))
    phases["measure_s"] = time.perf_counter() - t0 - phases["tune_s"] - phases["warm_s"]
    for cell in cells:
        summarize_cell(cell, results[cell.label])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"samples_rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "host": platform.node(), "cell_orders": cell_orders, "samples": raw}))
    dist.barrier()  # every rank's samples are on disk before rank 0 reads them
    if rank == 0:
        from benchmarks._ag_diagnose import diagnose
        from benchmarks._ag_report import markdown

        (args.out / "diagnosis.md").write_text(diagnose(args.out))

        args.out.mkdir(parents=True, exist_ok=True)
        rows = [c.row for c in cells]
        payload = {"environment": env, "args": vars(args) | {"out": str(args.out)}, "phases_s": phases,
                   "method": __doc__.split("Method", 1)[1], "rows": rows}
        (args.out / "bench_ag_gemm.json").write_text(json.dumps(payload, indent=1, default=str))
        text = markdown(rows, env, args, phases)
        (args.out / "bench_ag_gemm.md").write_text(text)
        print(text, flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
