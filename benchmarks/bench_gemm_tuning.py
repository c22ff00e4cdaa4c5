"""Tuning a Triton GEMM on every rank: stock ``triton.autotune`` against ``triton_dist_tune.autotune``.

Launch: ``torchrun --nproc-per-node 2 benchmarks/bench_gemm_tuning.py --out DIR`` (NCCL on GPUs). Measures, side
by side in one run, on the same config space and keys:

1. agreement: the config each rank chose, per key, for stock and for ours (vector add and GEMM keys);
2. tuning time per key: stock (do_bench, serial compile), ours lock-step compiling serially as it measures, ours
   lock-step with parallel precompile, ours sharded (with parallel precompile);
3. accuracy: every config re-measured carefully (``do_bench``, median over 200 ms) after tuning; each tuner's
   choice as a ratio to the best re-measured time (1.00 = found the best);
4. an all-gather + GEMM function tuned by ``autotune`` with the default group, several rounds with fresh
   tuning: the same config on every rank for every key in every round.

Each tuner gets its own copy of the kernel (its own in-memory compile cache) and its own Triton cache folder, so
neither profits from the other's compilations. Writes DIR/gemm_tuning.json and DIR/gemm_tuning.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from examples.gemm_kernels import _gemm_kernel, gemm_config_space  # noqa: E402

GEMM_KEYS = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 4096, 4096), (256, 8192, 8192),
             (8192, 8192, 1024)]
ADD_KEYS = [2**p for p in range(12, 23, 1)]
CPU_GEMM_KEYS = [(32, 32, 32), (48, 32, 64)]


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


ADD_CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024, 2048, 4096) for w in (4, 8)]


def fresh_kernel(jit_fn):
    """A new JITFunction over the same Python function: an empty in-memory compile cache."""
    return triton.jit(jit_fn.fn)


def use_triton_cache(folder: str) -> None:
    """Point Triton's on-disk compile cache at ``folder`` (a fresh one per tuner)."""
    os.environ["TRITON_CACHE_DIR"] = folder
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        knobs.cache.dir = folder


def gemm_args(a, b, c):
    m, k = a.shape
    n = b.shape[1]
    return (a, b, c, m, n, k, 0, a.stride(0), a.stride(1), b.stride(0), b.stride(1), 0, c.stride(0), c.stride(1))


def launch_gemm(kernel, a, b, c, config: triton.Config) -> None:
    kw = config.kwargs
    m, n = c.shape
    grid = (triton.cdiv(m, kw["BLOCK_M"]) * triton.cdiv(n, kw["BLOCK_N"]), 1)
    kernel[grid](*gemm_args(a, b, c), EVEN_K=a.shape[1] % kw["BLOCK_K"] == 0, num_warps=config.num_warps,
                 num_stages=config.num_stages, **kw)


def gather(obj):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def time_first_call(fn) -> float:
    torch.cuda.synchronize() if torch.cuda.is_available() else None
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize() if torch.cuda.is_available() else None
    return time.perf_counter() - start


def spec(config: triton.Config) -> str:
    kw = config.kwargs
    if "BLOCK_M" in kw:
        tile = f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}-g{kw['GROUP_M']}"
        return f"{tile}-w{config.num_warps}-s{config.num_stages}"
    return f"B{kw['BLOCK']}-w{config.num_warps}"


def stock_gemm(space, keys, device, dtype, results):
    use_triton_cache(tempfile.mkdtemp(prefix="tdt_stock_"))
    kernel = triton.autotune(configs=space, key=["M", "N", "K"])(fresh_kernel(_gemm_kernel))
    for m, n, k in keys:
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        c = torch.empty(m, n, device=device, dtype=dtype)

        def run():
            grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]), 1)  # noqa: E731
            kernel[grid](*gemm_args(a, b, c), EVEN_K=False)

        seconds = time_first_call(run)
        best = kernel.cache[next(key for key in kernel.cache if tuple(key[:3]) == (m, n, k))]
        results.setdefault(str((m, n, k)), {})["stock"] = {"seconds": seconds, "choice": spec(best)}


def ours_gemm(space, keys, device, dtype, results, label, parallel_compile=True, **options):
    use_triton_cache(tempfile.mkdtemp(prefix=f"tdt_{label}_"))
    kernel = fresh_kernel(_gemm_kernel)

    def precompile(config, a, b, c):
        kw = config["config"].kwargs
        kernel.warmup(*gemm_args(a, b, c), EVEN_K=a.shape[1] % kw["BLOCK_K"] == 0,
                      num_warps=config["config"].num_warps, num_stages=config["config"].num_stages, grid=(1,), **kw)

    def prune(config, a, b, c):
        cfg = config["config"]
        kw = cfg.kwargs
        return cfg.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * a.element_size() <= 227 * 1024

    @tdt.autotune([{"config": c} for c in space], key_fn=lambda a, b, c: (tuple(a.shape), tuple(b.shape)),
                  prune_fn=prune, precompile_fn=precompile if device != "cpu" and parallel_compile else None,
                  name=f"bench_{label}", **options)
    def gemm(a, b, c, *, config):
        launch_gemm(kernel, a, b, c, config)

    for m, n, k in keys:
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        c = torch.empty(m, n, device=device, dtype=dtype)
        seconds = time_first_call(lambda a=a, b=b, c=c: gemm(a, b, c, autotune_pg=dist.group.WORLD))
        choice = next(iter(gemm.tuner.decided_in.values()))
        gemm.tuner.decided_in.clear()
        results.setdefault(str((m, n, k)), {})[label] = {"seconds": seconds, "choice": spec(choice["config"])}


def remeasure(space, keys, device, dtype, results) -> None:
    kernel = fresh_kernel(_gemm_kernel)
    for m, n, k in keys:
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        c = torch.empty(m, n, device=device, dtype=dtype)
        times = {}
        for config in space:
            kw = config.kwargs
            if config.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * a.element_size() > 227 * 1024:
                continue
            try:
                times[spec(config)] = triton.testing.do_bench(lambda cfg=config: launch_gemm(kernel, a, b, c, cfg),
                                                              warmup=50, rep=200, return_mode="median")
            except Exception as exc:  # out of resources: not a candidate
                print(f"remeasure {spec(config)} failed: {exc}", file=sys.stderr)
        best = min(times.values())
        entry = results[str((m, n, k))]
        entry["best_remeasured_ms"] = best
        entry["best_config"] = min(times, key=times.get)
        for found in list(entry.values()):
            if isinstance(found, dict) and "choice" in found:
                found["ratio_to_best"] = times.get(found["choice"], float("nan")) / best


def stock_add_agreement(device) -> list[str]:
    kernel = triton.autotune(configs=ADD_CONFIGS, key=["n"])(fresh_kernel(_add_kernel))
    chosen = []
    for n in ADD_KEYS:
        x, y = torch.randn(n, device=device), torch.randn(n, device=device)
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
        chosen.append(spec(kernel.cache[next(key for key in kernel.cache if key[0] == n)]))
    return chosen


def ours_add_agreement(device) -> list[str]:
    kernel = fresh_kernel(_add_kernel)

    @tdt.autotune([{"config": c} for c in ADD_CONFIGS], key_fn=lambda x, y, out: x.numel(), n_warmup=5,
                  n_repeat=50, name="bench_add")
    def add(x, y, out, *, config):
        n = x.numel()
        kernel[(triton.cdiv(n, config.kwargs["BLOCK"]),)](x, y, out, n, num_warps=config.num_warps, **config.kwargs)

    chosen = []
    for n in ADD_KEYS:
        x, y = torch.randn(n, device=device), torch.randn(n, device=device)
        add(x, y, torch.empty_like(x))
        chosen.append(spec(add.tuner.decided[n]["config"]))
    return chosen


def ag_gemm_rounds(space, keys, device, dtype, rounds: int) -> list[list[str]]:
    """An all-gather then a Triton GEMM, tuned afresh each round with the default group."""
    os.environ["TRITON_DIST_AUTOTUNE_ALWAYS_TUNE"] = "1"
    kernel = fresh_kernel(_gemm_kernel)
    world = dist.get_world_size()
    per_round = []
    for r in range(rounds):
        @tdt.autotune([{"config": c} for c in space], key_fn=lambda a, b: (tdt.to_hashable(a), tdt.to_hashable(b)),
                      n_warmup=3, n_repeat=15, name=f"bench_ag_gemm_round{r}")
        def ag_gemm(a_local, b, *, config):
            full = torch.empty(world * a_local.shape[0], a_local.shape[1], device=a_local.device, dtype=a_local.dtype)
            dist.all_gather_into_tensor(full, a_local)
            c = torch.empty(full.shape[0], b.shape[1], device=full.device, dtype=full.dtype)
            launch_gemm(kernel, full, b, c, config)
            return c

        chosen = []
        for m, n, k in keys:
            a = torch.randn(m // world, k, device=device, dtype=dtype)
            b = torch.randn(k, n, device=device, dtype=dtype)
            ag_gemm(a, b)
            chosen.append(spec(ag_gemm.tuner.decided[(tdt.to_hashable(a), tdt.to_hashable(b))]["config"]))
        per_round.append(chosen)
    os.environ.pop("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE")
    return per_round


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("TRITON_DIST_AUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="tdt_cache_"))
    tdt.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    on_gpu = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if on_gpu else ("cpu", torch.float32)
    space = gemm_config_space(device)
    gemm_keys, report = (GEMM_KEYS if on_gpu else CPU_GEMM_KEYS), {"world": world, "device": device}
    if on_gpu:
        report["gpu"] = torch.cuda.get_device_name()
        report["versions"] = {"torch": torch.__version__, "triton": triton.__version__}

    results: dict = {}
    options = {"n_warmup": 5, "n_repeat": 30}
    if on_gpu:
        stock_gemm(space, gemm_keys, device, dtype, results)
    ours_gemm(space, gemm_keys, device, dtype, results, "ours_serial_compile", parallel_compile=False, **options)
    ours_gemm(space, gemm_keys, device, dtype, results, "ours_lockstep", **options)
    ours_gemm(space, gemm_keys, device, dtype, results, "ours_sharded", sharded=True, **options)
    if on_gpu:
        remeasure(space, gemm_keys, device, dtype, results)
        report["stock_add_choices"] = gather(stock_add_agreement(device))
    report["ours_add_choices"] = gather(ours_add_agreement(device)) if on_gpu else None
    report["gemm"] = gather(results)
    report["ag_gemm_rounds"] = gather(ag_gemm_rounds(space, gemm_keys[:4], device, dtype, args.rounds))

    if rank == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gemm_tuning.json").write_text(json.dumps(report, indent=1))
        text = summarize(report, gemm_keys)
        (out / "gemm_tuning.md").write_text(text)
        print(text)
    dist.barrier()
    dist.destroy_process_group()


def disagreements(per_rank: list[list[str]]) -> int:
    return sum(len(set(choices)) > 1 for choices in zip(*per_rank, strict=True))


def summarize(report: dict, keys) -> str:
    lines = [f"# GEMM tuning, {report['world']} ranks on {report.get('gpu', report['device'])}", ""]
    if report.get("stock_add_choices"):
        stock, ours = disagreements(report["stock_add_choices"]), disagreements(report["ours_add_choices"])
        lines.append(f"- vector add, {len(ADD_KEYS)} keys: ranks disagree on {stock} keys with stock "
                     f"triton.autotune, {ours} with ours")
    tuners = [t for t in ("stock", "ours_serial_compile", "ours_lockstep", "ours_sharded")
              if t in report["gemm"][0][str(keys[0])]]
    for tuner in tuners:
        per_rank = [[r[str(k)][tuner]["choice"] for k in keys] for r in report["gemm"]]
        total = max(sum(r[str(k)][tuner]["seconds"] for k in keys) for r in report["gemm"])
        lines.append(f"- GEMM {tuner}: {len(keys)} keys, tuning {total:.1f} s (slowest rank), "
                     f"ranks disagree on {disagreements(per_rank)} keys")
    rounds = report["ag_gemm_rounds"]
    split = sum(disagreements([r[i] for r in rounds]) for i in range(len(rounds[0])))
    lines += [f"- all-gather + GEMM tuned by autotune, {len(rounds[0])} rounds x {len(rounds[0][0])} keys: "
              f"{split} (round, key) pairs where ranks disagree", "",
              "| M x N x K | tuner | rank | seconds | choice | time / best re-measured |", "|---|---|---|---|---|---|"]
    for k in keys:
        for tuner in tuners:
            for rank, r in enumerate(report["gemm"]):
                e = r[str(k)][tuner]
                ratio = f"{e['ratio_to_best']:.3f}" if "ratio_to_best" in e else "-"
                shape = f"{k[0]}x{k[1]}x{k[2]}"
                lines.append(f"| {shape} | {tuner} | {rank} | {e['seconds']:.2f} | {e['choice']} | {ratio} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
