"""``contextual_autotune`` end to end: a tensor-parallel layer with two collectives and two autotuned kernels.

Usage (one rank per GPU; NCCL)::

    torchrun --nproc-per-node 2 benchmarks/bench_contextual.py --out DIR [--m 8192 --k 4096 --n 4096]

CPU smoke test (gloo, Triton interpreter, tiny sizes)::

    TRITON_INTERPRET=1 torchrun --nproc-per-node 2 benchmarks/bench_contextual.py --out DIR --cpu

The layer, per rank: ``all_gather`` the row shard of X (``[M/W, K]`` -> ``[M, K]``), a Triton matmul with the
rank's weight ``[K, N]`` (``triton.autotune``, 9 configs on GPUs, one of which needs more shared memory than an
H100/H200 has, so it fails on every rank and must be left out), a Triton bias+ReLU epilogue (``triton.autotune``,
4 configs), then an ``all_reduce`` of the result. ``contextual_autotune(is_dist=True)`` tunes both kernels in this
context with a fresh cache folder (``DIR/cache``). The script asserts that every rank chose the same configs and
that the result matches a PyTorch reference, then records the tuning time, the runs, each kernel's per-config
group times and choice, and the tuned layer's time to ``DIR/bench_contextual.json`` and ``.md`` (rank 0).

A second layer keeps state across calls, as a KV cache or a running sum does: ``all_gather`` X, then a Triton
kernel that adds it *in place* into the layer's ``state`` argument (``triton.autotune(restore_value=["state"])``,
launched with the caller's own ``BLOCK=`` and ``num_warps=``), then a Triton scale kernel launched with
``**DEFAULT.all_kwargs()`` (a default config passed by the caller), then an ``all_reduce``. The tuning runs the
layer many times, yet ``state`` must end incremented exactly once and the result must match PyTorch; the configs
under test override the caller's meta-parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if "--cpu" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune  # noqa: E402

CPU = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def matmul_configs() -> list[triton.Config]:
    if CPU:
        return [triton.Config({"BM": m, "BN": n, "BK": k, "GROUP_M": 4}) for m, n, k in
                ((16, 16, 16), (32, 32, 16), (16, 32, 32))]
    tiles = [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 32, 4, 4),
             (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 64, 64, 4, 4), (128, 256, 64, 8, 4),
             (256, 256, 64, 8, 4)]  # the last needs 256 KiB of shared memory: fails on H100/H200
    return [triton.Config({"BM": m, "BN": n, "BK": k, "GROUP_M": 8}, num_warps=w, num_stages=s)
            for m, n, k, w, s in tiles]


def epilogue_configs() -> list[triton.Config]:
    blocks = (64, 128) if CPU else (512, 1024, 2048, 4096)
    return [triton.Config({"BLOCK": b}, num_warps=4 if b <= 1024 else 8) for b in blocks]


@triton.jit
def _tile_product(a, b, rm, rn, rk, k0, M, N, K, sam, sak, sbk, sbn):
    a_tile = tl.load(a + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                     mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
    b_tile = tl.load(b + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                     mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
    return tl.dot(a_tile, b_tile)


@triton.autotune(configs=matmul_configs(), key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, INTERPRETED: tl.constexpr, BM: tl.constexpr,
                  BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if INTERPRETED:  # Triton 3.6's interpreter cannot loop over range(runtime int) with numpy 2
        k0 = 0
        while k0 < K:
            acc += _tile_product(a, b, rm, rn, rk, k0, M, N, K, sam, sak, sbk, sbn)
            k0 += BK
    else:
        for k0 in range(0, K, BK):
            acc += _tile_product(a, b, rm, rn, rk, k0, M, N, K, sam, sak, sbk, sbn)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.autotune(configs=epilogue_configs(), key=["numel", "N"])
@triton.jit
def bias_relu_kernel(x, bias, out, numel, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    v = tl.load(x + offs, mask=mask, other=0.0).to(tl.float32) + tl.load(bias + offs % N, mask=mask, other=0.0)
    tl.store(out + offs, tl.maximum(v, 0.0).to(out.dtype.element_ty), mask=mask)


def update_configs() -> list[triton.Config]:
    blocks = (32, 64, 128) if CPU else (256, 512, 1024, 2048)
    return [triton.Config({"BLOCK": b}, num_warps=4 if b <= 512 else 8) for b in blocks]


#: what the caller passes to the scale kernel itself (the configs under test override it while tuning)
DEFAULT_SCALE = triton.Config({"BLOCK": 64 if CPU else 1024}, num_warps=4)


@triton.autotune(configs=update_configs(), key=["numel"], restore_value=["state"])
@triton.jit
def add_in_place_kernel(state, x, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    v = tl.load(state + offs, mask=mask).to(tl.float32) + tl.load(x + offs, mask=mask).to(tl.float32)
    tl.store(state + offs, v.to(state.dtype.element_ty), mask=mask)


@triton.autotune(configs=update_configs(), key=["numel"])
@triton.jit
def scale_kernel(x, out, numel, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    tl.store(out + offs, (tl.load(x + offs, mask=mask).to(tl.float32) * s).to(out.dtype.element_ty), mask=mask)


def stateful_layer(x_shard: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """all_gather -> state += x (in place) -> y = state / 2 -> all_reduce; the kernels get the caller's own
    meta-parameters."""
    world = dist.get_world_size()
    x = torch.empty(x_shard.shape[0] * world, x_shard.shape[1], dtype=x_shard.dtype, device=x_shard.device)
    dist.all_gather_into_tensor(x, x_shard)
    numel = x.numel()

    def grid(meta):
        return (triton.cdiv(numel, meta["BLOCK"]),)

    add_in_place_kernel[grid](state, x, numel, BLOCK=DEFAULT_SCALE.kwargs["BLOCK"], num_warps=4)
    y = torch.empty_like(state)
    scale_kernel[grid](state, y, numel, 0.5, **DEFAULT_SCALE.all_kwargs())
    dist.all_reduce(y)
    return y


def stateful_reference(x_shard: torch.Tensor, state0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    parts = [torch.empty_like(x_shard) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x_shard)
    state = (state0.float() + torch.cat(parts).float()).to(state0.dtype)
    y = (state.float() * 0.5).to(state0.dtype)
    dist.all_reduce(y)
    return state, y


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, dtype=a.dtype, device=a.device)

    def grid(meta):
        return (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)

    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), INTERPRETED=CPU)
    return c


def bias_relu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    bias_relu_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, bias, out, x.numel(), x.shape[1])
    return out


def layer(x_shard: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """all_gather -> matmul -> bias+ReLU -> all_reduce."""
    world = dist.get_world_size()
    x = torch.empty(x_shard.shape[0] * world, x_shard.shape[1], dtype=x_shard.dtype, device=x_shard.device)
    dist.all_gather_into_tensor(x, x_shard)
    y = bias_relu(matmul(x, w), bias)
    dist.all_reduce(y)
    return y


def reference(x_shard: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(x_shard) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x_shard)
    y = torch.relu((torch.cat(parts).float() @ w.float()) + bias.float()).to(x_shard.dtype)
    dist.all_reduce(y)
    return y


def sync() -> None:
    if torch.cuda.is_available() and not CPU:
        torch.cuda.synchronize()


def time_ms(fn: Any, warmup: int, repeat: int, device: torch.device) -> float:
    """The group's time of ``fn``: median over ``repeat`` runs per rank, max over ranks."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        dist.barrier()
        sync()
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e3)
    mine = torch.tensor([statistics.median(samples)], dtype=torch.float64, device=device)  # NCCL: on the GPU
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine.item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--cpu", action="store_true", help="gloo + Triton interpreter at tiny sizes")
    parser.add_argument("--m", type=int, default=None, help="rows of X over all ranks (default 8192; CPU 32)")
    parser.add_argument("--k", type=int, default=None, help="default 4096; CPU 32")
    parser.add_argument("--n", type=int, default=None, help="default 4096; CPU 32")
    parser.add_argument("--n-warmup", type=int, default=None, help="contextual_autotune n_warmup (3; CPU 1)")
    parser.add_argument("--n-repeat", type=int, default=None, help="contextual_autotune n_repeat (5; CPU 1)")
    args = parser.parse_args()
    m, k, n = args.m or (32 if CPU else 8192), args.k or (32 if CPU else 4096), args.n or (32 if CPU else 4096)
    n_warmup = args.n_warmup if args.n_warmup is not None else (1 if CPU else 3)
    n_repeat = args.n_repeat if args.n_repeat is not None else (1 if CPU else 5)

    os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = str(args.out / "cache")  # emptied below: always ours
    os.environ.setdefault("TRITON_DIST_AUTOTUNE_LOG_DIR", str(args.out / "logs"))
    tdt.init_distributed(backend="gloo" if CPU else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    if m % world:
        raise SystemExit(f"--m {m} must be a multiple of the world size {world}")
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"], ignore_errors=True)  # a fresh cache
    dist.barrier()

    device = torch.device("cpu") if CPU else torch.device("cuda", torch.cuda.current_device())
    dtype = torch.float32 if CPU else torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(1234 + rank)
    x_shard = torch.randn(m // world, k, generator=gen, device=device).to(dtype)
    w = (torch.randn(k, n, generator=gen, device=device) / k**0.5).to(dtype)
    bias = torch.randn(n, generator=gen, device=device).to(dtype)

    tuned = contextual_autotune(is_dist=True, n_warmup=n_warmup, n_repeat=n_repeat)(layer)
    dist.barrier()
    sync()
    start = time.perf_counter()
    out = tuned(x_shard, w, bias)
    sync()
    tuning_s = time.perf_counter() - start
    runs = tuned.tuner.last_runs

    ref = reference(x_shard, w, bias)
    rel_err = float(((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-12)).item())
    tolerance = 1e-4 if CPU else 2e-2
    decisions = {f"{kernel.rsplit('.', 1)[-1]} {key}": d for (kernel, key), d in sorted(tuned.tuner.decisions.items())}
    choices = {name: d["index"] for name, d in decisions.items()}
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, choices)
    same = all(c == choices for c in everyone)

    start = time.perf_counter()
    tuned(x_shard, w, bias)  # decided: one run, no communication
    sync()
    hot_call_s = time.perf_counter() - start
    hot_runs = tuned.tuner.last_runs
    reps = {"warmup": 1 if CPU else 5, "repeat": 3 if CPU else 30, "device": device}
    layer_ms = time_ms(lambda: tuned(x_shard, w, bias), **reps)
    reference_ms = time_ms(lambda: reference(x_shard, w, bias), **reps)

    stateful = run_stateful(x_shard, n, n_warmup, n_repeat, tolerance, reps)
    result = {
        "environment": environment(world), "shape": {"M": m, "K": k, "N": n, "dtype": str(dtype)},
        "n_warmup": n_warmup, "n_repeat": n_repeat, "tuning_s": tuning_s, "runs": runs,
        "hot_call_s": hot_call_s, "hot_call_runs": hot_runs, "layer_ms": layer_ms,
        "torch_reference_ms": reference_ms, "rel_err": rel_err, "tolerance": tolerance,
        "same_choices_on_every_rank": same, "choices_by_rank": everyone, "decisions": decisions,
        "stateful": stateful,
    }
    if rank == 0:
        (args.out / "bench_contextual.json").write_text(json.dumps(result, indent=1, default=str))
        (args.out / "bench_contextual.md").write_text(markdown(result))
        print(markdown(result), flush=True)
    failures = []
    if not same:
        failures.append(f"ranks chose differently: {everyone}")
    if not rel_err <= tolerance:
        failures.append(f"wrong result: relative error {rel_err:.3g} > {tolerance}")
    if hot_runs != 1:
        failures.append(f"a decided call ran the function {hot_runs} times, not once")
    if not (stateful["state_rel_err"] <= tolerance and stateful["rel_err"] <= tolerance and stateful["same"]):
        failures.append(f"stateful layer: {stateful}")
    dist.barrier()
    dist.destroy_process_group()
    if failures:
        raise SystemExit(f"rank {rank}: " + "; ".join(failures))


def run_stateful(x_shard: torch.Tensor, n: int, n_warmup: int, n_repeat: int, tolerance: float,
                 reps: dict[str, Any]) -> dict[str, Any]:
    """Tune :func:`stateful_layer` in context and check that its state was updated exactly once."""
    gen = torch.Generator(device=x_shard.device).manual_seed(99)
    state0 = torch.randn(x_shard.shape[0] * dist.get_world_size(), x_shard.shape[1], generator=gen,
                         device=x_shard.device).to(x_shard.dtype)
    state = state0.clone()
    tuned = contextual_autotune(is_dist=True, n_warmup=n_warmup, n_repeat=n_repeat, name="stateful")(stateful_layer)
    dist.barrier()
    sync()
    start = time.perf_counter()
    out = tuned(x_shard, state)
    sync()
    tuning_s = time.perf_counter() - start
    runs = tuned.tuner.last_runs
    want_state, want = stateful_reference(x_shard, state0)

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12)).item())

    decisions = {f"{kernel.rsplit('.', 1)[-1]} {key}": d for (kernel, key), d in sorted(tuned.tuner.decisions.items())}
    choices = {name: d["index"] for name, d in decisions.items()}
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, choices)
    scratch = state.clone()
    layer_ms = time_ms(lambda: tuned(x_shard, scratch), **reps)
    return {"tuning_s": tuning_s, "runs": runs, "state_rel_err": rel(state, want_state),
            "rel_err": rel(out, want), "layer_ms": layer_ms, "same": all(c == choices for c in everyone),
            "decisions": decisions, "tolerance": tolerance}


def environment(world: int) -> dict[str, Any]:
    cuda = torch.cuda.is_available() and not CPU
    return {"gpu": torch.cuda.get_device_name() if cuda else "CPU (Triton interpreter, gloo)", "ranks": world,
            "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else "-"}


def markdown(r: dict[str, Any]) -> str:
    env, shape = r["environment"], r["shape"]
    lines = [
        "## contextual_autotune: all_gather -> matmul -> bias+ReLU -> all_reduce",
        "",
        f"{env['ranks']}x {env['gpu']}, torch {env['torch']}, triton {env['triton']}, NCCL {env['nccl']}; "
        f"M={shape['M']} K={shape['K']} N={shape['N']} {shape['dtype']}; n_warmup={r['n_warmup']} "
        f"n_repeat={r['n_repeat']}",
        "",
        f"- tuning call: {r['tuning_s']:.2f} s, {r['runs']} runs of the layer (fresh cache, compiles included)",
        f"- decided call: {r['hot_call_s'] * 1e3:.2f} ms, {r['hot_call_runs']} run",
        f"- tuned layer: {r['layer_ms']:.3f} ms; PyTorch reference layer: {r['torch_reference_ms']:.3f} ms",
        f"- relative error vs PyTorch: {r['rel_err']:.2e} (tolerance {r['tolerance']:g})",
        f"- same choices on every rank: {r['same_choices_on_every_rank']}",
        "",
    ]
    lines += tables(r["decisions"])
    st = r["stateful"]
    lines += [
        "## contextual_autotune: all_gather -> state += x in place (restore_value, caller's BLOCK/num_warps) -> "
        "scale (caller's **config.all_kwargs()) -> all_reduce",
        "",
        f"- tuning call: {st['tuning_s']:.2f} s, {st['runs']} runs of the layer",
        f"- state after the tuning call vs one update: relative error {st['state_rel_err']:.2e}; result vs "
        f"PyTorch: {st['rel_err']:.2e} (tolerance {st['tolerance']:g})",
        f"- tuned layer: {st['layer_ms']:.3f} ms; same choices on every rank: {st['same']}",
        "",
    ]
    lines += tables(st["decisions"])
    return "\n".join(lines)


def tables(decisions: dict[str, Any]) -> list[str]:
    lines = []
    for name, d in decisions.items():
        lines += [f"### {name}: config {d['index']} ({d['how']})", "",
                  "| # | config | state | group ms | per rank ms |", "|---|---|---|---|---|"]
        for row in d["table"]:
            mark = " **<-**" if row["index"] == d["index"] else ""
            group = "-" if row["time"] is None else f"{row['time']:.4f}"
            per_rank = "-" if not row["per_rank"] else ", ".join(f"{t:.4f}" for t in row["per_rank"])
            state = row["state"] + (f": {row['error'][:120]}" if row["error"] else "")
            lines.append(f"| {row['index']}{mark} | `{row['config']}` | {state} | {group} | {per_rank} |")
        lines.append("")
    return lines


if __name__ == "__main__":
    main()
