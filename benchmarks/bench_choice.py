"""Choice quality: does the tuner choose the config that is fastest where the function runs?

Launch (one rank per GPU)::

    torchrun --nproc-per-node 2 benchmarks/bench_choice.py --out DIR [--ops ag,rs,gemm] [--shapes ...]
        [--tunings 3] [--modes steady,cold] [--old PATH]

Per operation and shape (global ``M x K x N``, bf16, tensor-parallel over the W ranks), side by side in one run:

1. every config of the pruned space is run once (compiles, symmetric-memory set-up), so that no tuning below
   pays for compiling;
2. ``--tunings`` fresh tunings per timing mode (``steady``, ``cold``) with the library's defaults, each with its
   own empty cache folder; with ``--old PATH``, as many tunings by the tuner of the previous release (a copy of
   its package renamed ``triton_dist_tune_old`` under PATH; options as the examples set them then:
   ``n_warmup=3, n_repeat=20, refine_top=3``). Tuning time is the wall time of the tuning call, max over ranks;
3. every config re-measured carefully, interleaved: ``--rounds`` rounds in a shuffled order. **Steady**: by
   default (``--steady-oracle sustained``) ``bench_fidelity.py``'s sustained oracle on every rank together, over
   every chosen config, ``torch_fused`` and the 6 best of a 20 ms + 20 ms screening round (each candidate ~100 ms
   of its own calls, then a ~250 ms window timed with events, no synchronize or barrier between configs, one per
   round; a config's score is drift-free: the median over rounds of its sample relative to the round's median
   config); ``--steady-oracle batch``: the earlier re-measurement, a batch of ``--batch``
   back-to-back calls after one barrier and device synchronize (a burst figure after the idle gap). **Cold**: one
   call after an L2 flush, a synchronize and a barrier. A sample's time is the max over ranks; a config's, the
   median over rounds;
4. for AG-GEMM and GEMM-RS: the collective alone and the local cuBLAS GEMM alone in steady state, the limit
   ``max(collective, GEMM)``, and PyTorch's fused op (it is the ``torch_fused`` config of the space).

Each choice is reported as its re-measured time divided by the best re-measured time (steady choices against the
steady re-measurement, cold against cold). Writes ``DIR/choice.json`` (after every key) and ``DIR/choice.md``.
Operations: ``ag`` (the examples' AG-GEMM space), ``rs`` (GEMM-RS), ``gemm`` (an all-gather, then a Triton
GEMM over Hopper tiles x warps {4, 8} x stages {3, 4}).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from _oracle import scores  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from examples._dist_common import recording_config, tuning_key  # noqa: E402
from examples.ag_gemm import ag_gemm, ag_gemm_config_space, ag_gemm_prune  # noqa: E402
from examples.gemm_kernels import _HOPPER_SPECS, gemm, tile_usable  # noqa: E402
from examples.gemm_rs import gemm_rs, gemm_rs_config_space, gemm_rs_prune  # noqa: E402

AG_RS_SHAPES = {"ag": "8192x8192x8192,16384x8192x8192,32768x8192x3584,4096x4096x4096",
                "rs": "8192x8192x8192,16384x8192x8192,32768x3584x8192,4096x4096x4096"}
GEMM_SHAPES = "1024x8192x8192,4096x4096x4096,8192x8192x8192,16384x4096x4096,8192x8192x1024,2048x8192x28672"


def gemm_specs() -> list[str]:
    """The Hopper tiles with warps {4, 8} x stages {3, 4}."""
    tiles = sorted({spec.split("-w")[0] for spec in _HOPPER_SPECS})
    return [f"{tile}-w{w}-s{s}" for tile in tiles for w in (4, 8) for s in (3, 4)]


def ag_then_gemm(a_local: torch.Tensor, b: torch.Tensor, *, tile: str, group: Any = None) -> torch.Tensor:
    """All-gather the row shards of A, then a Triton GEMM with ``tile``."""
    world = dist.get_world_size(group)
    a = torch.empty(a_local.shape[0] * world, a_local.shape[1], dtype=a_local.dtype, device=a_local.device)
    dist.all_gather_into_tensor(a, a_local, group=group)
    return gemm(a, b, None, tile)


def ag_then_gemm_prune(config: dict[str, Any], a_local: torch.Tensor, b: torch.Tensor, **kwargs: Any) -> bool:
    return tile_usable(config["tile"], a_local, a_local.shape[0] * dist.get_world_size())


class Key:
    """One operation at one shape: inputs, the function, its space and its pruning."""

    def __init__(self, op: str, shape: str) -> None:
        m, k, n = (int(v) for v in shape.split("x"))
        world = dist.get_world_size()
        device = torch.device("cuda", torch.cuda.current_device())
        gen = torch.Generator(device=device).manual_seed(7 + dist.get_rank())
        bf16: dict[str, Any] = {"dtype": torch.bfloat16, "device": device}
        self.op, self.shape = op, shape
        if op in ("ag", "gemm"):
            self.A = torch.randn(m // world, k, generator=gen, **bf16)
            self.B = torch.randn(k, n // world, generator=gen, **bf16) / k**0.5
        else:
            self.A = torch.randn(m, k // world, generator=gen, **bf16)
            self.B = torch.randn(k // world, n, generator=gen, **bf16) / k**0.5
        if op == "ag":
            self.fn, self.space, self.prune = ag_gemm, ag_gemm_config_space(), ag_gemm_prune
            gathered, out = torch.empty(m, k, **bf16), torch.empty(m, n // world, **bf16)
            self.collective = lambda: dist.all_gather_into_tensor(gathered, self.A)
            self.local_gemm = lambda: torch.mm(gathered, self.B, out=out)
        elif op == "rs":
            self.fn, self.space, self.prune = gemm_rs, gemm_rs_config_space(), gemm_rs_prune
            partial, out = torch.empty(m, n, **bf16), torch.empty(m // world, n, **bf16)
            self.collective = lambda: dist.reduce_scatter_tensor(out, partial)
            self.local_gemm = lambda: torch.mm(self.A, self.B, out=partial)
        else:
            self.fn, self.space, self.prune = ag_then_gemm, [{"tile": s} for s in gemm_specs()], ag_then_gemm_prune
            self.collective = self.local_gemm = None
        mine = torch.tensor([bool(self.prune(c, self.A, self.B)) for c in self.space], dtype=torch.int32,
                            device=device)
        dist.all_reduce(mine, op=dist.ReduceOp.MIN)
        self.kept = [i for i, keep in enumerate(mine.tolist()) if keep]

    def call(self, index: int) -> Callable[[], Any]:
        return functools.partial(self.fn, self.A, self.B, **self.space[index])

    def options(self) -> dict[str, Any]:
        """The examples' correctness check (AG-GEMM and GEMM-RS), and nothing else: the library's defaults."""
        if self.op == "gemm":
            return {}
        return {"ref_prog": functools.partial(self.fn, algo="torch"), "rtol": 2e-2, "atol": 2e-2}


def max_over_ranks(values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def sync_barrier() -> None:
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()


def remeasure(key: Key, rounds: int, batch: int, cold: bool, seed: int) -> dict[int, float]:
    """Every kept config, interleaved over ``rounds`` shuffled rounds; the median over rounds of max-over-ranks
    samples (ms per call)."""
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda") if cold else None
    samples: dict[int, list[float]] = {i: [] for i in key.kept}
    for r in range(rounds):
        order = list(key.kept)
        random.Random(seed * 1000 + r).shuffle(order)
        local = []
        for i in order:
            call = key.call(i)
            if flush is not None:
                flush.zero_()
            sync_barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(1 if cold else batch):
                call()
            end.record()
            end.synchronize()
            local.append(start.elapsed_time(end) / (1 if cold else batch))
        for i, ms in zip(order, max_over_ranks(local), strict=True):
            samples[i].append(ms)
    return {i: statistics.median(s) for i, s in samples.items()}


def remeasure_sustained(key: Key, rounds: int, seed: int, chosen: set[int], settle_ms: float = 100.0,
                        window_ms: float = 250.0, screened: int = 6) -> dict[int, float]:
    """The sustained oracle of ``bench_fidelity.py`` on every rank together: in each of ``rounds`` shuffled rounds
    (the same order on every rank) every kept config runs ~``settle_ms`` of its own calls, then a ~``window_ms``
    window timed with events, with no synchronize or barrier between configs (the function's collectives keep the
    ranks in step; the call counts are the group's, from the slowest rank's probe); one synchronize per round; a
    sample is the max over ranks. Returns each config's drift-free score (the median over rounds of its sample
    relative to the round's median config) times the median sample, in ms. Candidates: ``chosen`` and the
    ``screened`` best of one such round of 20 ms + 20 ms per config."""
    if settle_ms >= 100.0:  # the screening that picks the candidates
        first = remeasure_sustained(key, 1, seed + 1, set(), 20.0, 20.0, screened=len(key.kept))
        kept = sorted(set(sorted(first, key=first.get)[:screened]) | chosen)
    else:
        kept = list(key.kept)
    probes = []
    for i in kept:
        sync_barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            key.call(i)()
        end.record()
        end.synchronize()
        probes.append(start.elapsed_time(end) / 5)
    per = dict(zip(kept, max_over_ranks(probes), strict=True))
    samples: dict[int, list[float]] = {i: [] for i in kept}
    for r in range(rounds):
        order = list(kept)
        random.Random(seed * 1000 + r).shuffle(order)
        sync_barrier()
        marks = []
        for i in order:
            call = key.call(i)
            for _ in range(max(1, int(settle_ms / per[i]))):
                call()
            n = max(1, int(window_ms / per[i]))
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                call()
            end.record()
            marks.append((start, end, n))
        torch.cuda.synchronize()
        local = [start.elapsed_time(end) / n for start, end, n in marks]
        for i, ms in zip(order, max_over_ranks(local), strict=True):
            samples[i].append(ms)
    names = list(kept)
    score = scores(samples, names, list(range(rounds)))
    scale = statistics.median(ms for i in names for ms in samples[i])
    return {i: score[i] * scale for i in names}


def steady_ms(fn: Callable[[], Any], rounds: int, batch: int) -> float:
    """One function in steady state: median over rounds of max-over-ranks batch times."""
    local = []
    for _ in range(rounds):
        sync_barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        local.append(start.elapsed_time(end) / batch)
    return statistics.median(max_over_ranks(local))


def tune_once(key: Key, package: Any, label: str, **options: Any) -> tuple[int, float, dict[str, Any]]:
    """A fresh tuning in an empty cache folder: (chosen index, wall seconds max over ranks, decision info)."""
    folder = tempfile.mkdtemp(prefix=f"tdt-{label}-")
    os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = folder
    tuned = package.autotune(config_space=key.space, key_fn=tuning_key, prune_fn=key.prune, name=label,
                             **key.options(), **options)(recording_config(key.fn))
    sync_barrier()
    start = time.perf_counter()
    tuned(key.A, key.B)
    torch.cuda.synchronize()
    seconds = max_over_ranks([time.perf_counter() - start])[0]
    ((_, config),) = tuned.tuner.decided.items()
    index = key.space.index(config)
    info: dict[str, Any] = {}
    decisions = getattr(tuned.tuner, "decisions", None)
    if decisions:
        ((_, decision),) = decisions.items()
        info = {"margin": decision.margin, "near_tie": decision.near_tie, "rounds": decision.rounds,
                "samples": sum(o.samples for o in decision.outcomes)}
        if dist.get_rank() == 0:
            entry = next(Path(folder, label).glob("*.json"), None)
            info["cache_file"] = str(entry) if entry else None
    return index, seconds, info


def describe_config(config: dict[str, Any]) -> str:
    return "/".join(str(v) for v in config.values())


def run_key(key: Key, args: argparse.Namespace, old: Any) -> dict[str, Any]:
    for i in key.kept:  # compile and set up every config once, outside any timing
        key.call(i)()
    sync_barrier()
    row: dict[str, Any] = {"op": key.op, "shape": key.shape, "configs": len(key.kept), "tunings": {}}
    label = f"{key.op}_{key.shape}"
    for mode in args.modes.split(","):
        row["tunings"][mode] = [dict(zip(("index", "seconds", "info"),
                                         tune_once(key, tdt, f"{label}_{mode}_{t}", timing=mode), strict=True))
                                for t in range(args.tunings)]
    if old is not None:
        row["tunings"]["old"] = [dict(zip(("index", "seconds", "info"),
                                          tune_once(key, old, f"{label}_old_{t}", n_warmup=3, n_repeat=20,
                                                    refine_top=3), strict=True))
                                 for t in range(args.tunings)]
    if args.steady_oracle == "sustained":
        chosen = {t["index"] for tunings in row["tunings"].values() for t in tunings}
        chosen |= {i for i in key.kept if describe_config(key.space[i]).startswith("torch_fused")}
        row["steady"] = remeasure_sustained(key, args.rounds, seed=1, chosen=chosen)
    else:
        row["steady"] = remeasure(key, args.rounds, args.batch, cold=False, seed=1)
    row["steady_oracle"] = args.steady_oracle
    row["cold"] = remeasure(key, args.rounds, args.batch, cold=True, seed=2)
    if key.collective is not None:
        row["collective_ms"] = steady_ms(key.collective, args.rounds, args.batch)
        row["gemm_ms"] = steady_ms(key.local_gemm, args.rounds, args.batch)
    row["names"] = {i: describe_config(key.space[i]) for i in key.kept}
    return row


def summarize(row: dict[str, Any]) -> dict[str, Any]:
    """Ratios of every choice to the best re-measured time, in the matching timing."""
    out: dict[str, Any] = {}
    for mode, tunings in row["tunings"].items():
        against = row["cold"] if mode in ("cold", "old") else row["steady"]
        best = min(against.values())
        out[mode] = {"ratios": [against[t["index"]] / best for t in tunings],
                     "steady_ratios": [row["steady"][t["index"]] / min(row["steady"].values()) for t in tunings],
                     "seconds": [t["seconds"] for t in tunings],
                     "chosen": [row["names"][t["index"]] for t in tunings]}
        choices = [row["steady"][t["index"]] for t in tunings]
        out[mode]["steady_spread"] = max(choices) / min(choices) - 1
    best = min(row["steady"], key=row["steady"].get)
    out["best_steady"] = {"config": row["names"][best], "ms": row["steady"][best]}
    fused = [i for i, name in row["names"].items() if name.startswith("torch_fused")]
    if fused:
        out["fused_ms"] = row["steady"][fused[0]]
    if "collective_ms" in row:
        out["limit_ms"] = max(row["collective_ms"], row["gemm_ms"])
    return out


def write(rows: list[dict[str, Any]], out: Path) -> None:
    """``choice.json`` (all figures) and ``choice.md`` (the tables); also accepts rows read back from JSON."""
    (out / "choice.json").write_text(json.dumps(rows, indent=1, default=str))
    rows = [{**row, **{k: {int(i): v for i, v in row[k].items()} for k in ("steady", "cold", "names")}}
            for row in rows]
    lines = ["| op | shape | configs | mode | chosen / best (each tuning) | 3 choices apart (steady) | tuning s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        s = row["summary"]
        for mode in row["tunings"]:
            m = s[mode]
            lines.append(f"| {row['op']} | {row['shape']} | {row['configs']} | {mode} | "
                         + ", ".join(f"{r:.3f}" for r in m["ratios"]) + f" | {100 * m['steady_spread']:.1f}% | "
                         + ", ".join(f"{x:.2f}" for x in m["seconds"]) + " |")
    lines += ["", "| op | shape | best steady config | best ms | tuned (steady, 1st) ms | torch_fused ms | "
              "max(collective, GEMM) ms |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        s = row["summary"]
        first = row["steady"][row["tunings"]["steady"][0]["index"]] if "steady" in row["tunings"] else None
        fused, limit = s.get("fused_ms"), s.get("limit_ms")
        lines.append(f"| {row['op']} | {row['shape']} | {s['best_steady']['config']} | {s['best_steady']['ms']:.3f}"
                     f" | {'-' if first is None else f'{first:.3f}'} | {'-' if fused is None else f'{fused:.3f}'}"
                     f" | {'-' if limit is None else f'{limit:.3f}'} |")
    (out / "choice.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ops", default="ag,rs,gemm")
    parser.add_argument("--shapes", default=None, help="comma-separated MxKxN (default: per operation)")
    parser.add_argument("--tunings", type=int, default=3)
    parser.add_argument("--modes", default="steady,cold")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--old", type=Path, default=None)
    parser.add_argument("--steady-oracle", choices=("sustained", "batch"), default="sustained",
                        help="sustained: bench_fidelity's oracle (the device never idle); batch: the earlier "
                             "re-measurement (a batch of calls after a barrier and a synchronize)")
    args = parser.parse_args()
    tdt.init_distributed()
    os.environ["TRITON_DIST_AUTOTUNE_ALWAYS_TUNE"] = "1"
    old = None
    if args.old is not None:
        sys.path.insert(0, str(args.old))
        old = importlib.import_module("triton_dist_tune_old")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for op in args.ops.split(","):
        for shape in (args.shapes or AG_RS_SHAPES.get(op, GEMM_SHAPES)).split(","):
            started = time.perf_counter()
            row = run_key(Key(op, shape), args, old)
            row["summary"] = summarize(row)
            row["bench_seconds"] = time.perf_counter() - started
            rows.append(row)
            if dist.get_rank() == 0:
                print(json.dumps({"op": op, "shape": shape, **row["summary"]}, default=str), flush=True)
                write(rows, args.out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
