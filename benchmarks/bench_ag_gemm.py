"""AG-GEMM and GEMM-RS on GPUs: baselines, PyTorch's fused ops, and ours (tuned, or a hand-picked sweep).

Usage (one rank per GPU)::

    bash launch.sh benchmarks/bench_ag_gemm.py --out DIR [--shapes 8192x8192x8192,...] [--ops ag,rs]
        [--no-tune] [--sweep] [--warmup 5] [--repeat 30]

Shapes are ``M x K x N`` in bf16 with tensor-parallel sharding over the W ranks:

* AG-GEMM: A row-sharded ``[M/W, K]`` per rank, B the rank's column shard ``[K, N/W]``; out ``[M, N/W]``.
* GEMM-RS: A column-sharded ``[M, K/W]``, B the rank's row shard ``[K/W, N]``; out ``[M/W, N]``.

Per shape: the collective alone, the local GEMM alone (torch.matmul / cuBLAS), collective then GEMM
(algo "torch"), the PyTorch fused op (algo "torch_fused"), ours tuned with ``triton_dist_tune`` (fresh
cache in ``DIR/tune_cache`` unless TRITON_DIST_AUTOTUNE_CACHE_DIR is set; with its chosen config and
the wall time of the tuning call, compiles included), and the limit ``max(collective, GEMM)``.
``--sweep`` also times a hand-picked list of our configs (and our Triton GEMM alone per tile).
Two regimes, each in a table of its own:

* **latency** (as before): the max over ranks of the median of ``--repeat`` runs after ``--warmup`` runs,
  timed with CUDA events, with a barrier and a device synchronize before each run (one call on an idle,
  aligned group);
* **back-to-back** (steady, throughput; the regime the tuner's steady timing tunes for): ``--steady-calls``
  calls queued back to back with no barrier or synchronize between them, timed with CUDA events from before
  the first to after the last, per call = window / calls; the max over ranks of the median of
  ``--steady-windows`` windows (a barrier and a synchronize before each window only). Keys ``*_steady_ms``.

Writes ``DIR/bench_ag_gemm.json`` and ``DIR/bench_ag_gemm.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402

from examples._dist_common import LAST_CONFIG, symm_mem_available, time_group_ms  # noqa: E402
from examples.ag_gemm import ag_gemm, ag_gemm_prune, make_tuned_ag_gemm, p2p_push, p2p_release  # noqa: E402
from examples.gemm_kernels import TORCH_GEMM, gemm, tile_usable  # noqa: E402
from examples.gemm_rs import gemm_rs, gemm_rs_prune, make_tuned_gemm_rs  # noqa: E402

DEFAULT_SHAPES = "8192x8192x8192,16384x8192x8192,32768x8192x3584,4096x4096x4096,128x8192x8192"
GOAL_SHAPES = ("8192x8192x8192", "32768x8192x3584")
SWEEP_TILES = ("128x256x64-g8-w8-s4", "64x128x128-g8-w4-s3")
SWEEP = [
    {"algo": algo, "splits": s, "gemm_config": tile}
    for algo, s, tile in (
        ("torch", 1, TORCH_GEMM),
        ("chunked", 1, TORCH_GEMM),
        ("chunked", 2, TORCH_GEMM),
        ("p2p", 1, TORCH_GEMM),
        ("p2p", 2, TORCH_GEMM),
        ("p2p", 4, TORCH_GEMM),
        ("p2p", 2, SWEEP_TILES[0]),
        ("p2p", 4, SWEEP_TILES[0]),
        ("chunked", 1, SWEEP_TILES[0]),
        ("sequential", 1, SWEEP_TILES[0]),
        ("sequential", 1, SWEEP_TILES[1]),
        ("p2p", 1, SWEEP_TILES[1]),
    )
]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float32."""
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


class Bench:
    """Times one operation (AG-GEMM or GEMM-RS) at one shape; collects the figures in ``row``."""

    def __init__(self, op: str, shape: str, args: argparse.Namespace) -> None:
        m, k, n = (int(v) for v in shape.split("x"))
        world, cuda = dist.get_world_size(), torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self.op, self.args, self.world = op, args, world
        gen = torch.Generator(device=device).manual_seed(7 + dist.get_rank())
        bf16 = {"dtype": torch.bfloat16 if cuda else torch.float32, "device": device}  # CPU: smoke test
        if op == "ag":
            self.A = torch.randn(m // world, k, generator=gen, **bf16)
            self.B = torch.randn(k, n // world, generator=gen, **bf16) / k**0.5
            self.fn, self.prune, self.make_tuned = ag_gemm, ag_gemm_prune, make_tuned_ag_gemm
            self.fused_op = "fused_all_gather_matmul"
            self.gemm_in = torch.empty(m, k, **bf16)  # the gathered A
            self.gemm_out = torch.empty(m, n // world, **bf16)
            self.comm_in, self.comm_out = self.A, self.gemm_in
        else:
            self.A = torch.randn(m, k // world, generator=gen, **bf16)
            self.B = torch.randn(k // world, n, generator=gen, **bf16) / k**0.5
            self.fn, self.prune, self.make_tuned = gemm_rs, gemm_rs_prune, make_tuned_gemm_rs
            self.fused_op = "fused_matmul_reduce_scatter"
            self.gemm_in, self.gemm_out = self.A, torch.empty(m, n, **bf16)
            self.comm_in, self.comm_out = self.gemm_out, torch.empty(m // world, n, **bf16)
        self.row: dict[str, Any] = {"op": op, "shape": shape, "M": m, "K": k, "N": n, "world": world}

    def time(self, fn: Callable[[], Any]) -> float:
        return time_group_ms(fn, warmup=self.args.warmup, repeat=self.args.repeat)

    def time_both(self, key: str, fn: Callable[[], Any]) -> None:
        """``row[key]`` in the latency regime and ``row[key_steady_ms]`` back to back."""
        self.row[key] = self.time(fn)
        self.row[steady_key(key)] = time_steady_ms(fn, self.args.warmup, self.args.steady_windows,
                                                   self.args.steady_calls)

    def p2p_push_only(self, splits: int) -> None:
        _, _, events, handle = p2p_push(self.A, None, splits)
        torch.cuda.current_stream().wait_event(events[-1])
        p2p_release(handle)

    def collective(self) -> None:
        if self.op == "ag":
            dist.all_gather_into_tensor(self.comm_out, self.comm_in)
        else:
            dist.reduce_scatter_tensor(self.comm_out, self.comm_in)

    def run(self) -> dict[str, Any]:
        row = self.row
        # In data-flow order, so that each timed step reads real data (the gathered A, the partial sums).
        steps = [
            ("comm_ms", self.collective),
            ("gemm_ms", lambda: torch.mm(self.gemm_in, self.B, out=self.gemm_out)),  # cuBLAS
        ]
        for name, step in steps if self.op == "ag" else steps[::-1]:
            self.time_both(name, step)
        row["limit_ms"] = max(row["comm_ms"], row["gemm_ms"])
        row["limit_steady_ms"] = max(row["comm_steady_ms"], row["gemm_steady_ms"])
        ref = self.fn(self.A, self.B, algo="torch")
        self.time_both("torch_ms", lambda: self.fn(self.A, self.B, algo="torch"))
        if self.op == "ag" and symm_mem_available(self.A, None, self.fused_op):
            for splits in (1, 4):  # our copy-engine all-gather alone (p2p algo without its GEMMs)
                row[f"p2p_push{splits}_ms"] = self.time(lambda splits=splits: self.p2p_push_only(splits))
        if symm_mem_available(self.A, None, self.fused_op):
            row["fused_err"] = rel_err(self.fn(self.A, self.B, algo="torch_fused"), ref)
            self.time_both("fused_ms", lambda: self.fn(self.A, self.B, algo="torch_fused"))
        if self.args.sweep:
            self.sweep(ref)
        if not self.args.no_tune:
            self.tuned(ref)
        return row

    def sweep(self, ref: torch.Tensor) -> None:
        row = self.row
        row["triton_gemm_ms"] = {
            tile: self.time(lambda tile=tile: gemm(self.gemm_in, self.B, self.gemm_out, tile))
            for tile in SWEEP_TILES
            if tile_usable(tile, self.A, self.gemm_in.shape[0])
        }
        row["sweep"] = []
        for cfg in SWEEP:
            if not self.prune(cfg, self.A, self.B):
                continue
            err = rel_err(self.fn(self.A, self.B, **cfg), ref)
            ms = self.time(lambda cfg=cfg: self.fn(self.A, self.B, **cfg))
            row["sweep"].append({"config": cfg, "ms": ms, "err": err})
        best = min(row["sweep"], key=lambda r: r["ms"])
        row["sweep_best_ms"], row["sweep_best_config"] = best["ms"], best["config"]

    def tuned(self, ref: torch.Tensor) -> None:
        row = self.row
        tuned = self.make_tuned()
        dist.barrier()
        sync()
        start = time.perf_counter()
        out = tuned(self.A, self.B, autotune_verbose=self.args.verbose)  # tunes over the default group
        sync()
        row["tuning_s"] = time.perf_counter() - start
        row["tuned_config"] = LAST_CONFIG.get(self.fn.__name__)
        row["tuned_err"] = rel_err(out, ref)
        self.time_both("tuned_ms", lambda: tuned(self.A, self.B))


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def steady_key(key: str) -> str:
    """``"tuned_ms"`` -> ``"tuned_steady_ms"``."""
    return key[: -len("_ms")] + "_steady_ms"


def time_steady_ms(fn: Callable[[], Any], warmup: int = 5, windows: int = 5, calls: int = 10) -> float:
    """The back-to-back regime: ``calls`` calls of ``fn`` queued with no barrier or synchronize between them,
    timed with CUDA events around the whole window (the host clock without CUDA); ms per call, the median of
    ``windows`` windows (each after a barrier and a synchronize), the max over ranks."""
    cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(windows):
        dist.barrier()
        sync()
        if not cuda:
            start_s = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - start_s) * 1e3 / calls)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls)
    samples.sort()
    median = torch.tensor([samples[len(samples) // 2]], device="cuda" if cuda else "cpu")
    dist.all_reduce(median, op=dist.ReduceOp.MAX)
    return float(median.item())


def environment() -> dict[str, Any]:
    """GPU, versions and world size, for the JSON."""
    cuda = torch.cuda.is_available()
    return {
        "gpu": torch.cuda.get_device_name() if cuda else "CPU (smoke test, Triton interpreter)",
        "gpus": dist.get_world_size(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(str(v) for v in torch.cuda.nccl.version()) if cuda else "-",
        "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")},
    }


def fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else ("-" if value is None else str(value))


def config_text(cfg: dict[str, Any] | None) -> str:
    return "-" if not cfg else f"{cfg['algo']}/{cfg['splits']}/{cfg['gemm_config']}"


def markdown(rows: list[dict[str, Any]], env: dict[str, Any]) -> str:
    """The results as markdown tables (times in ms), one per operation, plus the goal verdicts."""
    lines = [
        f"{env['gpus']}x {env['gpu']}, torch {env['torch']}, triton {env['triton']}, NCCL {env['nccl']}",
        "",
    ]
    for op, comm in (("ag", "AG"), ("rs", "RS")):
        mine = [r for r in rows if r["op"] == op]
        if not mine:
            continue
        gemm_name = "AG-GEMM" if op == "ag" else "GEMM-RS"
        lines += [
            f"### {gemm_name} (M x K x N, bf16, {env['gpus']} ranks), latency regime (barrier + synchronize "
            "before each call; ms)",
            "",
            f"| shape | {comm} | GEMM | {comm}+GEMM | torch fused | ours tuned | tuned config | tuning s "
            "| best of sweep | sweep config | limit max | ours/limit | ours/fused |",
            "|---" * 13 + "|",
        ]
        for r in mine:
            times = ("comm_ms", "gemm_ms", "torch_ms", "fused_ms", "tuned_ms")
            cells = [r["shape"], *(fmt(r.get(k)) for k in times)]
            cells += [config_text(r.get("tuned_config")), fmt(r.get("tuning_s")), fmt(r.get("sweep_best_ms"))]
            cells += [config_text(r.get("sweep_best_config")), fmt(r["limit_ms"])]
            cells += [ratio(r, "limit_ms"), ratio(r, "fused_ms")]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines += [
            f"### {gemm_name}, back-to-back regime (steady, throughput: {comm}, GEMM, ... each timed over "
            "--steady-calls calls queued back to back; ms per call)",
            "",
            f"| shape | {comm} | GEMM | {comm}+GEMM | torch fused | ours tuned | limit max | ours/limit | ours/fused "
            "| ours/torch |",
            "|---" * 10 + "|",
        ]
        for r in mine:
            keys = ("comm_steady_ms", "gemm_steady_ms", "torch_steady_ms", "fused_steady_ms", "tuned_steady_ms",
                    "limit_steady_ms")
            cells = [r["shape"], *(fmt(r.get(k)) for k in keys)]
            cells += [steady_ratio(r, b) for b in ("limit_steady_ms", "fused_steady_ms", "torch_steady_ms")]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += goal_lines(rows)
    return "\n".join(lines) + "\n"


def ours_ms(row: dict[str, Any]) -> float | None:
    """Our time at a row: tuned when measured, else the best of the sweep."""
    return row.get("tuned_ms", row.get("sweep_best_ms"))


def ratio(row: dict[str, Any], baseline: str) -> str:
    ours = ours_ms(row)
    return f"{ours / row[baseline]:.3f}" if ours and row.get(baseline) else "-"


def steady_ratio(row: dict[str, Any], baseline: str) -> str:
    ours, base = row.get("tuned_steady_ms"), row.get(baseline)
    return f"{ours / base:.3f}" if ours and base else "-"


def goal_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Verdicts on the AG-GEMM goals: ours <= torch fused everywhere; <= 1.1 x limit at the goal shapes (latency
    regime); ours <= torch fused back to back."""
    out = []
    for r in (r for r in rows if r["op"] == "ag"):
        ours = ours_ms(r)
        label = "tuned" if "tuned_ms" in r else "best of sweep"
        if ours is None:
            continue
        if r.get("fused_ms"):
            ok = ours <= r["fused_ms"] * 1.01
            verdict = "MET" if ok else "MISSED"
            out.append(
                f"- {r['shape']}: ours ({label}) {ours:.3f} vs torch fused {r['fused_ms']:.3f}: {verdict}"
            )
        if r["shape"] in GOAL_SHAPES:
            verdict = "MET" if ours <= 1.10 * r["limit_ms"] else "MISSED"
            out.append(
                f"- {r['shape']}: ours ({label}) / max(AG, GEMM) = {ours / r['limit_ms']:.3f}: {verdict}"
            )
        steady, fused = r.get("tuned_steady_ms"), r.get("fused_steady_ms")
        if steady and fused:
            verdict = "MET" if steady <= fused * 1.01 else "MISSED"
            out.append(f"- {r['shape']}, back-to-back: ours (tuned) {steady:.3f} vs torch fused {fused:.3f}: {verdict}")
    return out


def main() -> int:
    """Parse the arguments, run every (op, shape), write JSON and markdown on rank 0."""
    parser = argparse.ArgumentParser(description="AG-GEMM / GEMM-RS benchmark")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    parser.add_argument("--ops", default="ag,rs")
    parser.add_argument("--no-tune", action="store_true", help="skip the tuner (baselines and --sweep only)")
    parser.add_argument("--sweep", action="store_true", help="also time a hand-picked list of our configs")
    parser.add_argument("--verbose", action="store_true", help="print the tuner's tables")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--steady-calls", type=int, default=10, help="back-to-back calls per timed window")
    parser.add_argument("--steady-windows", type=int, default=5, help="back-to-back windows (median)")
    args = parser.parse_args()
    import triton_dist_tune

    if not args.no_tune and "TRITON_DIST_AUTOTUNE_CACHE_DIR" not in os.environ:
        cache = args.out / "tune_cache"
        os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = str(cache)
        if int(os.environ.get("RANK", "0")) == 0 and cache.exists():
            shutil.rmtree(cache)  # a fresh cache: every shape is tuned
    triton_dist_tune.init_distributed()
    dist.barrier()
    rank = dist.get_rank()
    env = environment()
    rows = []
    for op in args.ops.split(","):
        for shape in args.shapes.split(","):
            row = Bench(op, shape, args).run()
            rows.append(row)
            if rank == 0:
                print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        method = (
            "max over ranks of the median of --repeat CUDA-event timings after --warmup runs; "
            "barrier + synchronize before each run"
        )
        payload = {
            "environment": env,
            "method": method,
            "args": vars(args) | {"out": str(args.out)},
            "rows": rows,
        }
        (args.out / "bench_ag_gemm.json").write_text(json.dumps(payload, indent=1))
        (args.out / "bench_ag_gemm.md").write_text(markdown(rows, env))
        print(markdown(rows, env))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
