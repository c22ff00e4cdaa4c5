"""Does a config's compile time say anything about its speed? A kernel of the corpus compiled for an H200 (sm_90) on
this CPU (Triton's compiler and ptxas need no GPU), a sample of its configs, each compile timed in a fresh cache;
then each config's compile time beside its screened device time in the corpus (``results/corpus/``: ``moe``, the
MoE example's kernel, ``gpu3.json``; ``gemm``, the examples' GEMM at K = N = 4096, ``gpu0.json``), per shape: the
rank correlation, and how the configs whose compile took over ``--ratio`` times the sample's median rank in the
landscape (the question behind issue 41's largest wait: a stage waiting seconds for a 256 x 256 tile of 4 warps
that then ran 5.7-17 times the best).

Launch (CPU; a few minutes): ``python benchmarks/compile_time_study.py --family moe --out FILE.json --sample 96``.
Prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def config_name(c: dict[str, int]) -> str:
    """The corpus's name of a config (``M64-N128-K64-G16-w8-s5``)."""
    return (f"M{c['BLOCK_SIZE_M']}-N{c['BLOCK_SIZE_N']}-K{c['BLOCK_SIZE_K']}-G{c['GROUP_SIZE_M']}"
            f"-w{c['num_warps']}-s{c['num_stages']}")


def gemm_config(spec: str) -> dict[str, int]:
    """``"64x128x64-g8-w4-s3"`` as a config."""
    tile, g, w, st = spec.split("-")
    bm, bn, bk = map(int, tile.split("x"))
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": int(g[1:]), "num_warps": int(w[1:]),
            "num_stages": int(st[1:])}


#: per family: the pointer arguments' types, the integer arguments that are 1 (Triton specialises them as
#: constants), and the constexprs every config shares
FAMILIES = {
    "moe": ({"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "sorted_token_ids_ptr": "*i32",
             "expert_ids_ptr": "*i32", "num_tokens_post_padded_ptr": "*i32"},
            {"stride_ak", "stride_bk", "stride_cn"}, {"top_k": 2}),
    "gemm": ({"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16"}, {"stride_ak", "stride_bn", "stride_cn"},
             {"EVEN_K": True}),
}


def compile_seconds(family: str, kernel, config: dict[str, int], target) -> float:
    """Seconds to compile ``kernel`` for ``config`` (a fresh cache folder, so nothing is reused)."""
    import triton
    from triton.compiler import ASTSource

    pointers, ones, shared = FAMILIES[family]
    meta = {k: v for k, v in config.items() if k.startswith(("BLOCK", "GROUP"))} | shared
    signature, constexprs = {}, {}
    for name in kernel.arg_names:
        if name in pointers:
            signature[name] = pointers[name]
        elif name in meta:
            signature[name], constexprs[name] = "constexpr", meta[name]
        elif name in ones:
            signature[name], constexprs[name] = "constexpr", 1
        else:
            signature[name] = "i32"
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tdt-compile-study-")
    started = time.perf_counter()
    triton.compile(ASTSource(kernel, signature, constexprs, {}), target=target,
                   options={"num_warps": config["num_warps"], "num_stages": config["num_stages"]})
    return time.perf_counter() - started


def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    for r, i in enumerate(order):
        out[i] = float(r)
    return out


def spearman(x: list[float], y: list[float]) -> float:
    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else 0.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=sorted(FAMILIES), default="moe")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sample", type=int, default=96)
    p.add_argument("--ratio", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    sys.path.insert(0, str(ROOT / "examples"))
    from gemm_kernels import _gemm_kernel
    from moe_kernels import fused_moe_kernel, moe_config_space
    from triton.backends.compiler import GPUTarget

    if args.family == "moe":
        corpus, space_name, kernel = "gpu3.json", "moe", fused_moe_kernel
        named = {config_name(c): c for c in moe_config_space() if c["GROUP_SIZE_M"] == 1}  # G: no code size
    else:
        corpus, space_name, kernel = "gpu0.json", "gemm_k4096_n4096", _gemm_kernel
        named = {}
    data = json.loads((ROOT / "benchmarks/results/corpus" / corpus).read_text())
    landscapes = {v["m"]: v["screen_ms"] for v in data.values() if v.get("space") == space_name}
    screened = set().union(*(set(t) for t in landscapes.values()))
    if args.family == "gemm":
        named = {spec: gemm_config(spec) for spec in sorted(screened) if "-g1-" in spec}
    pool = sorted(name for name in named if name in screened)
    sample = random.Random(args.seed).sample(pool, min(args.sample, len(pool)))
    target = GPUTarget("cuda", 90, 32)
    timed: dict[str, float] = {}
    for n, name in enumerate(sample):
        timed[name] = compile_seconds(args.family, kernel, named[name], target)
        print(f"{n + 1}/{len(sample)} {name} {timed[name]:.2f} s", flush=True)
    median = statistics.median(timed.values())
    slow = {name for name, s in timed.items() if s > args.ratio * median}
    rows = []
    for m in sorted(landscapes):
        land = landscapes[m]
        best = min(land.values())
        both = [name for name in timed if name in land]
        rho = spearman([timed[x] for x in both], [land[x] for x in both])
        slow_here = [land[x] / best for x in both if x in slow]
        top = sorted(land, key=land.get)[:10]
        rows.append({"m": m, "configs": len(both), "spearman": rho, "slow_compiles": len(slow_here),
                     "slow_ratio_min": min(slow_here, default=None),
                     "slow_ratio_median": statistics.median(slow_here) if slow_here else None,
                     "top10_compile_over_median": [round(timed[x] / median, 2) for x in top if x in timed]})
    thresholds = {}
    for k in (2, 3, 4, 5):  # the configs compiled over k times the median, and their best place in each landscape
        over = [name for name, sec in timed.items() if sec > k * median]
        thresholds[k] = {"configs": len(over), "least_ratio_by_m": {
            m: min((land[x] / min(land.values()) for x in over if x in land), default=None)
            for m, land in sorted(landscapes.items())}}
    result = {"family": args.family, "median_s": median, "ratio": args.ratio, "slow": sorted(slow),
              "compile_s": timed, "by_m": rows, "thresholds": thresholds}
    args.out.write_text(json.dumps(result, indent=1))
    print(f"median compile {median:.2f} s; {len(slow)} of {len(timed)} over {args.ratio}x the median")
    print("| M | configs | Spearman(compile s, device ms) | slow compiles | their time / best: least, median | "
          "top-10 configs' compile / median (those sampled) |")
    for r in rows:
        least = f"{r['slow_ratio_min']:.2f}" if r["slow_ratio_min"] else "-"
        med = f"{r['slow_ratio_median']:.2f}" if r["slow_ratio_median"] else "-"
        print(f"| {r['m']} | {r['configs']} | {r['spearman']:.2f} | {r['slow_compiles']} | {least}, {med} | "
              f"{r['top10_compile_over_median']} |")
    for k, row in thresholds.items():
        places = "; ".join(f"M{m}: {r:.2f}" if r else f"M{m}: -" for m, r in row["least_ratio_by_m"].items())
        print(f"over {k}x the median: {row['configs']} configs; the fastest of them / the best: {places}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
