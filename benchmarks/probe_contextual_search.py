"""``contextual_autotune`` over an inner ``triton.autotune`` GEMM kernel of 840 configs on one GPU (issue 28).

The examples' Triton GEMM behind ``triton.autotune`` with the 840-config space of ``bench_search.py`` (BM 16-256 x
BN 32-256 x BK 32-128 x GROUP_M {1, 8} x warps {4, 8} x stages 2-5, pruned by shared memory), ``key=["M", "N",
"K"]``, launched by a layer decorated with ``contextual_autotune`` (defaults: the search, compiles split by stage).
For each shape (M x 4096 x 4096, bf16) and tuning: fresh autotuner and decision cache; the layer is called until
the kernel is decided (a call runs the layer up to ``max_runs`` = 1000 times); the runs it took, the seconds (the
first tuning of a shape compiles its stages' configs), and the choice's ratio to the best of an exhaustive
device-time oracle recorded by ``bench_search.py`` on the same GPU model (``--oracle``, default the H100 call of
2026-11-27), keyed by config.

Launch: ``python benchmarks/probe_contextual_search.py --out DIR [--shapes 64,2048] [--tunings 2]``;
``TRITON_INTERPRET=1 python benchmarks/probe_contextual_search.py --out DIR --cpu-smoke`` checks the plumbing on
CPU (a 24-config space of small tiles, the search forced). Writes DIR/contextual_search.json.
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
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="tdt_ctx_search_triton_"))
os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"] = tempfile.mkdtemp(prefix="tdt_ctx_search_logs_")

import torch  # noqa: E402
import triton  # noqa: E402
from bench_gemm_tuning import fresh_kernel, gemm_args, spec  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from examples.gemm_kernels import _gemm_kernel, large_gemm_config_space, to_triton_config  # noqa: E402
from triton_dist_tune.contextual import tracks  # noqa: E402

DEFAULT_ORACLE = ROOT / "benchmarks" / "results" / "search" / "h100_call4" / "oracle.json"
SMOKE_SPECS = [f"{m}x{n}x{k}-g{g}-w4-s2" for m in (16, 32) for n in (16, 32) for k in (16, 32) for g in (1, 2, 4)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--shapes", default="64,2048")
    parser.add_argument("--tunings", type=int, default=2)
    parser.add_argument("--oracle", type=Path, default=DEFAULT_ORACLE)
    parser.add_argument("--cpu-smoke", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    smoke = args.cpu_smoke
    device = "cpu" if smoke else "cuda"
    if smoke:
        os.environ["TRITON_DIST_AUTOTUNE_SEARCH"] = "search"
        space, nk, shapes = [to_triton_config(s) for s in SMOKE_SPECS], 32, [16]
    else:
        space, nk, shapes = large_gemm_config_space(), 4096, [int(m) for m in args.shapes.split(",")]
    oracle = json.loads(args.oracle.read_text()) if args.oracle.exists() and not smoke else {}
    gpu = torch.cuda.get_device_name() if not smoke else "cpu"
    rows = []
    for m in shapes:
        gen = torch.Generator().manual_seed(m)
        a = torch.randn(m, nk, generator=gen).to(device, torch.bfloat16 if not smoke else torch.float32)
        b = torch.randn(nk, nk, generator=gen).to(device, a.dtype)
        c = torch.empty(m, nk, device=device, dtype=a.dtype)
        entry = oracle.get(f"{gpu}|gemm|{m}|{len(space)}", {})
        ratios = dict(entry.get("ratios", {}))
        jit = fresh_kernel(_gemm_kernel)  # compiled by the shape's first tuning
        for t in range(args.tunings):
            os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tdt_ctx_search_decisions_")
            tracks._choices.clear()  # the process keeps every group's choices by (kernel, key): forget them
            kernel = triton.autotune(configs=space, key=["M", "N", "K"])(jit)
            grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(nk, meta["BLOCK_N"]), 1)  # noqa: E731

            @tdt.contextual_autotune(name=f"ctx840_{m}_{t}")
            def layer(kernel=kernel, grid=grid):
                kernel[grid](*gemm_args(a, b, c), EVEN_K=True)

            if not smoke:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            calls = 0
            while calls < 10 and not kernel.cache:
                layer()
                calls += 1
            if not smoke:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            decisions = list(layer.tuner.decisions.values())
            chosen = spec(next(iter(kernel.cache.values()))) if kernel.cache else None
            row = {"M": m, "tuning": t, "calls": calls, "runs": sum(d["runs"] for d in decisions),
                   "seconds": seconds, "chosen": chosen, "how": [d["how"] for d in decisions],
                   "ratio": ratios.get(chosen), "screened": sum(1 for d in decisions for r in d["table"]
                                                                 if r["state"] not in ("skipped",))}
            table = [r for d in decisions for r in d["table"] if r.get("time") is not None]
            row["top"] = [(r["config"], r["time"], r["state"]) for r in sorted(table, key=lambda r: r["time"])[:8]]
            rows.append(row)
            print(f"M={m} tuning {t}: {row['runs']} runs in {calls} call(s), {seconds:.2f} s, {chosen}, "
                  f"{row['screened']} configs measured, ratio to the device oracle's best "
                  f"{row['ratio'] if row['ratio'] is None else round(row['ratio'], 4)}", flush=True)
            for config, ms, state in row["top"]:
                print(f"    {ms:.4f} ms {state:9} {config}", flush=True)
            (args.out / "contextual_search.json").write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
    if smoke:
        ref = a @ b
        assert torch.allclose(c, ref, atol=1e-3, rtol=1e-3), "wrong result"
        print("smoke ok", flush=True)


if __name__ == "__main__":
    main()
