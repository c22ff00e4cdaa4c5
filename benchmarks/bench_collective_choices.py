"""GPU choices on many ranks (issue 39, item 4): fresh tunings of the examples' AG-GEMM and GEMM-RS, judged against
the group's exhaustive device-time oracle that ``corpus_collective.py`` records (the corpus's file pools several
recordings, each its own process: ``benchmarks/gpu/record_collective.sh``, ``_collective_report.pooled``).

Cases: each op (``ag``, ``rs``) at each shape of ``corpus_collective.SHAPES`` over its space (algo x tile grid,
pruned by the example's own ``*_prune``: 840 configs at the default shapes), in two modes:

- ``function``: the examples' tuned function (``examples._dist_common.make_tuned``: the check against
  ``algo="torch"``, the tuner's defaults) over ``corpus_collective.space()``;
- ``contextual``: the example's function with its GEMM launched through a ``triton.autotune`` wrapper of the
  examples' GEMM kernel over the tiles the example keeps for one algo (``key=["N", "K"]``: one tile for every GEMM
  of a call, as in the oracle's configs), tuned by ``contextual_autotune`` with its defaults.
  ``contextual_autotune`` tunes the inner ``triton.autotune`` kernels only: it **cannot express the algo axis**
  (``algo`` and ``splits`` are arguments of the function, not of a kernel). It runs the algo and splits of the
  oracle's best config of the case (``--contextual-algo best``; ``chunked-x1`` when no oracle is given, or name one,
  e.g. ``sequential-x1``) and is judged against the oracle **restricted to that algo's configs**; its ratio to the
  unrestricted best is reported beside (a case resumed keeps the algo it began with). Its tuned time is the GEMM
  kernel's (the median launch in a call), not the function's.

Each case takes ``--tunings`` fresh tunings (the same on every rank): a new tuned-function name and an empty
decision-cache folder each; for ``contextual`` also a new ``triton.autotune`` wrapper, with the process-wide
choices forgotten. Compiled kernels stay: on a GPU every tile is compiled for the shape first (``warm_tiles``,
threads, at most a third of the case's time), so the tunings time the cost "once compiled". Per tuning: the
chosen config, the seconds of the tuning call (MAX over ranks), the near-tie flag (function: the decision's;
contextual: the function level's rule, ``stats.near_tie``, applied to the decision's table: chosen config
and the fastest other), the tuned group time, the result's error against ``algo="torch"``, and the **ratio** =
the oracle's time of the choice / the oracle's best (its ``ratios``, looked up by the config's corpus name; a choice
the oracle lacks is reported as such). Without ``--oracle`` the ratios are owed: the report lists the choices and
their tuned times and says so.

Time: ``--time-limit`` seconds for the job; each (op, shape, mode) gets an equal share of what is left when it
starts, and a further tuning starts only where the case's share still covers the mean of its tunings so far
(agreed by the ranks). Rank 0 writes ``DIR/choices.json`` and ``DIR/choices.md`` after every case and prints a
progress line per tuning. Run the same command again to go on: cases with all their tunings in ``DIR/choices.json``
are kept, the others get the tunings they lack; the report is rewritten against the ``--oracle`` given then.

Launch (the script sets NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 itself)::

    bash benchmarks/gpu/collective_choices.sh        # 4 GPUs (2 where only 2 are), the oracle it finds
    torchrun --nproc-per-node 4 benchmarks/bench_collective_choices.py --out DIR \\
        --oracle benchmarks/results/corpus/collective_w4.json
    TRITON_INTERPRET=1 torchrun --nproc-per-node 2 benchmarks/bench_collective_choices.py --out DIR --cpu-smoke \\
        [--oracle F.json]   # F.json from corpus_collective.py --cpu-smoke

Measured on 2 H200s (``benchmarks/RESULTS.md``, issue 39); a report is judged again against other recordings with
``python benchmarks/_collective_report.py DIR/choices.json --oracle R1.json R2.json R3.json --out DIR2``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if "--cpu-smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from typing import Any  # noqa: E402

import corpus_collective as cc  # noqa: E402  (turns NVLink multicast off before torch starts NCCL)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
from _collective_report import find_entry, write_report  # noqa: E402

from examples import ag_gemm as ag_mod  # noqa: E402
from examples import gemm_rs as rs_mod  # noqa: E402
from examples._dist_common import make_tuned  # noqa: E402
from examples.gemm_kernels import _as_batched, _gemm_kernel, config_spec, to_triton_config  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune, tracks  # noqa: E402
from triton_dist_tune.stats import near_tie  # noqa: E402

MODES = ("function", "contextual")


@dataclass
class Tuning:
    """One fresh tuning: what it chose and what it cost (the same on every rank but ``rel_err``: the MAX)."""

    name: str
    choice: str | None
    seconds: float
    near_tie: bool | None
    margin: float | None
    tuned_ms: float | None
    search: str
    rel_err: float


def say(message: str) -> None:
    if dist.get_rank() == 0:
        print(f"[collective_choices] {message}", flush=True)


def sync() -> None:
    if cc.GPU:
        torch.cuda.synchronize()


def fresh_cache(out: Path, label: str) -> None:
    """An empty decision-cache folder of this rank for one tuning."""
    (out / "decisions").mkdir(parents=True, exist_ok=True)
    os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"{label}-", dir=out / "decisions")


def timed_call(call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()`` after a barrier; its result and wall seconds, MAX over ranks."""
    sync()
    dist.barrier()
    started = time.perf_counter()
    result = call()
    sync()
    return result, cc.agree_max([time.perf_counter() - started])[0]


def error_of(case: cc.Case, out: torch.Tensor) -> float:
    """The result's relative error against the example's ``algo="torch"``, MAX over ranks (a collective)."""
    want = case.fn(case.a, case.b, algo="torch").float()
    mine = float(((out.float() - want).norm() / want.norm().clamp_min(1e-30)).item())
    return cc.agree_max([mine])[0]


def tune_function(case: cc.Case, label: str, smoke: bool) -> Tuning:
    """A fresh tuning of the example's function over the recorder's space."""
    prune = ag_mod.ag_gemm_prune if case.op == "ag" else rs_mod.gemm_rs_prune
    quick = {"n_warmup": 1, "n_repeat": 3} if smoke else {}  # the interpreter is slow
    tuned = make_tuned(case.fn, cc.space(smoke), prune, name=label, **quick)
    out, seconds = timed_call(lambda: tuned(case.a, case.b))
    decided = {**tuned.tuner.decided, **tuned.tuner.decided_in}
    config = next(iter(decided.values()), None)
    decision = next(iter(tuned.tuner.decisions.values()), None)
    return Tuning(label, None if config is None else cc.text(config), seconds,
                  None if decision is None else decision.near_tie, None if decision is None else decision.margin,
                  None if decision is None else decision.time, "" if decision is None else decision.search,
                  error_of(case, out))


def autotuned_gemm(tiles: list[str]) -> tuple[Any, Callable[..., torch.Tensor]]:
    """A new ``triton.autotune`` wrapper of the examples' GEMM kernel over ``tiles`` (``EVEN_K`` by heuristics, so
    it follows each config's ``BLOCK_K``), and a launcher of it with ``gemm``'s signature ``(a, b, out)``."""
    kernel = triton.autotune(configs=[to_triton_config(t) for t in tiles], key=["N", "K"])(
        triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})(_gemm_kernel))

    def launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        a3, o3 = _as_batched(a), _as_batched(out)
        batch, m, k = a3.shape
        n = b.shape[1]
        kernel[lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]), batch)](
            a3, b, o3, m, n, k, *a3.stride(), *b.stride(), *o3.stride())
        return out

    return kernel, launch


def table_tie(table: list[dict[str, Any]], index: int) -> tuple[float | None, bool | None]:
    """(margin, near tie) of a contextual decision from its table: the chosen config against the fastest other
    config with a time, judged by the function level's rule."""
    timed = [r for r in table if r["time"] is not None and r["state"] != "failed"]
    chosen = next((r for r in timed if r["index"] == index), None)
    others = [r for r in timed if r["index"] != index]
    if chosen is None or not others:
        return None, None
    runner_up = min(others, key=lambda r: r["time"])
    margin = runner_up["time"] / chosen["time"] - 1
    return margin, near_tie(margin, [chosen["spread"], runner_up["spread"]])


def tune_contextual(case: cc.Case, algo: str, splits: int, label: str, smoke: bool) -> Tuning:
    """A fresh ``contextual_autotune`` tuning of the GEMM tile of the example's function at ``algo``/``splits``."""
    tiles = [c["gemm_config"] for c in case.kept if (c["algo"], c["splits"]) == (algo, splits)]
    tracks._choices.clear()  # the process keeps every group's choices by (kernel, key): forget them
    kernel, launch = autotuned_gemm(tiles)

    def layer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return case.fn(a, b, algo=algo, splits=splits, gemm_config=launch)

    quick = {"n_warmup": 1, "n_repeat": 1} if smoke else {}
    tuned = contextual_autotune(is_dist=True, name=label, **quick)(layer)

    def until_decided() -> torch.Tensor:  # a call runs the function at most max_runs times
        for _ in range(10):
            out = tuned(case.a, case.b)
            if kernel.cache:  # the group's choice: the loop ends on the same call on every rank
                break
        return out

    out, seconds = timed_call(until_decided)
    if not kernel.cache:
        return Tuning(label, None, seconds, None, None, None, "undecided after 10 calls", error_of(case, out))
    tile = config_spec(next(iter(kernel.cache.values())))
    decision = next(iter(tuned.tuner.decisions.values()))
    margin, tie = table_tie(decision["table"], decision["index"])
    return Tuning(label, cc.text({"algo": algo, "splits": splits, "gemm_config": tile}), seconds, tie, margin,
                  decision["time_ms"], f"{decision['how']}, {decision['runs']} runs, {len(tiles)} tiles",
                  error_of(case, out))


def contextual_algo(wanted: str, entry: dict[str, Any] | None) -> tuple[str, int]:
    """The (algo, splits) the contextual mode runs: ``best`` takes the oracle best's (chunked x1 without one)."""
    name = (entry["best"] if entry else "chunked-x1") if wanted == "best" else wanted
    algo, splits = name.split("-")[:2]
    return algo, int(splits[1:])


def shared(value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    box = [value if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def run_case(case: cc.Case, mode: str, row: dict[str, Any], args: argparse.Namespace, deadline: float) -> None:
    """Add to ``row`` the tunings it lacks, while the case's time lasts."""
    spent: list[float] = []
    for t in range(len(row["tunings"]), args.tunings):
        mean = statistics.mean(spent) if spent else 0.0
        if cc.agree_max([float(time.perf_counter() + mean > deadline)])[0] > 0:
            say(f"{case.op} {case.shape} {mode}: out of time after {len(row['tunings'])} of {args.tunings} tunings")
            break
        label = f"cc_{case.op}_{case.shape}_{mode}_{t}_{args.salt}"
        fresh_cache(args.out, label)
        if mode == "function":
            got = tune_function(case, label, args.cpu_smoke)
        else:
            got = tune_contextual(case, row["algo"], row["splits"], label, args.cpu_smoke)
        spent.append(got.seconds)
        row["tunings"].append(asdict(got))
        tuned = "-" if got.tuned_ms is None else f"{got.tuned_ms:.4f}"
        say(f"{case.op} {case.shape} {mode} tuning {t + 1}/{args.tunings}: {got.choice} in {got.seconds:.1f} s, "
            f"tuned {tuned} ms, near tie {got.near_tie}, error {got.rel_err:.1e}; "
            f"{got.search or 'every kept config raced'}; case time left {deadline - time.perf_counter():.0f} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--oracle", type=Path, default=None, help="corpus_collective.py's file (the group oracle)")
    p.add_argument("--op", default="ag,rs")
    p.add_argument("--shapes", default=cc.SHAPES, help="MxKxN, as corpus_collective.py's --shapes")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--tunings", type=int, default=3)
    p.add_argument("--contextual-algo", default="best", help="best (the oracle best's), or e.g. chunked-x2")
    p.add_argument("--time-limit", type=float, default=540.0, help="seconds for the whole job (shared by cases)")
    p.add_argument("--cpu-smoke", action="store_true", help="gloo, Triton's interpreter, the recorder's tiny case")
    args = p.parse_args()
    if cc.GPU:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cc.GPU else "gloo")
    started = time.perf_counter()
    rank, world = dist.get_rank(), dist.get_world_size()
    args.salt = shared(os.getpid())  # tuned-function names no earlier run of this folder used
    os.environ.setdefault("TRITON_DIST_AUTOTUNE_LOG_DIR", str(args.out / "logs"))
    device, dtype = ("cuda", torch.bfloat16) if cc.GPU else ("cpu", torch.float32)
    gpu = cc.device_name()
    oracle = shared(json.loads(args.oracle.read_text()) if args.oracle and rank == 0 else {})
    path = args.out / "choices.json"
    report = shared(json.loads(path.read_text()) if path.exists() and rank == 0 else {})
    rows = {(r["op"], r["shape"], r["mode"]): r for r in report.get("rows", [])}
    shapes = [cc.SMOKE_SHAPE] if args.cpu_smoke else args.shapes.split(",")
    todo = [(op, s, m) for op in args.op.split(",") for s in shapes for m in args.modes.split(",")]
    say(f"{world} ranks, {gpu}; {len(todo)} cases x {args.tunings} tunings; oracle "
        f"{args.oracle if args.oracle else 'none: the ratios are owed'}")
    warmed: set[tuple[str, str]] = set()
    for index, (op, shape, mode) in enumerate(todo):
        deadline = time.perf_counter() + (args.time_limit - (time.perf_counter() - started)) / (len(todo) - index)
        case = cc.make_case(op, shape, args.cpu_smoke, device, dtype)
        key, entry = find_entry(oracle, gpu, op, world, shape, len(case.kept))
        row = rows.setdefault((op, shape, mode), {"op": op, "shape": shape, "mode": mode, "world": world,
                                                  "configs": len(case.kept), "tunings": []})
        if mode == "contextual" and "algo" not in row:
            row["algo"], row["splits"] = contextual_algo(args.contextual_algo, entry)
        if len(row["tunings"]) >= args.tunings:
            say(f"{op} {shape} {mode}: {len(row['tunings'])} tunings recorded already, kept")
            continue
        if cc.GPU and (op, shape) not in warmed:  # every tile compiled for the shape; the tunings reuse them
            a = case.a if op == "rs" else case.a.repeat(world, 1)
            begun = cc.warm_tiles(sorted({c["gemm_config"] for c in case.kept}), a, case.b,
                                  time.perf_counter() + (deadline - time.perf_counter()) / 3)
            warmed.add((op, shape))
            dist.barrier()
            say(f"{op} {shape}: compiled {begun} tiles")
        say(f"{op} {shape} {mode}: {len(case.kept)} configs kept, oracle {key or 'none'}, "
            f"{deadline - time.perf_counter():.0f} s for this case")
        run_case(case, mode, row, args, deadline)
        if rank == 0:  # saved as soon as measured
            write(args, gpu, world, list(rows.values()), oracle)
    if rank == 0:
        print(write(args, gpu, world, list(rows.values()), oracle), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def write(args: argparse.Namespace, gpu: str, world: int, rows: list[dict[str, Any]],
          oracle: dict[str, Any]) -> str:
    """``choices.json`` (rows with their judgement) and ``choices.md``; returns the markdown."""
    meta = {"gpu": gpu, "world": world, "oracle": str(args.oracle) if args.oracle else None,
            "torch": torch.__version__, "triton": triton.__version__, "cpus": os.cpu_count()}
    return write_report(args.out, meta, rows, oracle)

if __name__ == "__main__":
    sys.exit(main())
