"""flash-linear-attention's ``chunk_gla``: fla's own ``@triton.autotune`` (stock) against ``contextual_autotune``.

One process, one GPU, the inputs of ``examples/fla_contextual.py`` (B = 2, T = 1,024, 8 heads, K = V = 128, bf16):

- **the first call of each variant**, which tunes every autotuned kernel ``chunk_gla`` launches. The kernels the
  first variant compiles land in Triton's cache, where the second finds them: run both orders, each in a fresh
  process with a fresh HOME and Triton cache, and read each variant's first call (compiles included) where it went
  first;
- **the steady time per call of each variant's choices.** Each fla autotuner's table of choices
  (``Autotuner.cache``) as each variant left it is swapped in before each timed block, so both run through Triton's
  own launch path and differ only in the configs chosen. Rounds interleaved, the order shuffled per round; each
  block is WARM calls, then CALLS back-to-back calls timed with CUDA events (a layer run back to back, after the
  previous block: no idle GPU between blocks).

Launch (fla-core importable; ``bash benchmarks/gpu/fla_site.sh DIR`` unpacks it for a host with no package index)::

    HOME=$(mktemp -d) python3 benchmarks/bench_fla.py --order stock,contextual --out DIR/stock_first.json
    HOME=$(mktemp -d) python3 benchmarks/bench_fla.py --order contextual,stock --out DIR/contextual_first.json

Without fla-core or a GPU it prints ``skipped: ...`` and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.fla_contextual import SKIPPED, reference_gla, runnable  # noqa: E402

VARIANTS = ("stock", "contextual")


def sm_clock() -> int | None:
    """The GPU's SM clock in MHz (pynvml), or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 (no pynvml, no driver: the clock is left out)
        return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--order", default="stock,contextual", help="which variant's first call goes first")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--warm", type=int, default=10)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    order = args.order.split(",")
    if sorted(order) != sorted(VARIANTS):
        p.error(f"--order must name {' and '.join(VARIANTS)} once each, not {args.order!r}")
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="bench-fla-triton-"))
    if not runnable():
        print(SKIPPED, flush=True)
        return 0
    import torch
    import torch.nn.functional as F
    from fla.ops.gla import chunk_gla
    from triton.runtime.autotuner import Autotuner

    import triton_dist_tune as tdt

    batch, seq, heads, dk, dv = 2, 1024, 8, 128, 128
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=gen, dtype=torch.bfloat16)

    q, k, v = randn(batch, seq, heads, dk), randn(batch, seq, heads, dk), randn(batch, seq, heads, dv)
    g = F.logsigmoid(randn(batch, seq, heads, dk).float()).to(torch.bfloat16)
    scale = dk**-0.5
    reference = reference_gla(q, k, v, g, scale)

    def stock(q, k, v, g):
        return chunk_gla(q=q, k=k, v=v, g=g, scale=scale)[0]

    contextual = tdt.contextual_autotune(n_warmup=2, n_repeat=5)(stock)

    def autotuners() -> list:
        with warnings.catch_warnings():  # isinstance on torch's deprecated module attributes warns
            warnings.simplefilter("ignore", FutureWarning)
            found = [o for o in gc.get_objects() if isinstance(o, Autotuner)]
        return sorted(found, key=lambda a: (getattr(a, "base_fn", a.fn).__name__, id(a)))

    def name(a) -> str:
        return getattr(a, "base_fn", a.fn).__name__

    first: dict[str, float] = {}
    errors: dict[str, float] = {}
    tables: dict[str, dict[int, dict]] = {}
    with torch.no_grad():
        for variant in order:
            for a in autotuners():  # the other variant's choices out of the way: this one tunes
                a.cache.clear()
            torch.cuda.synchronize()
            started = time.perf_counter()
            out = (stock if variant == "stock" else contextual)(q, k, v, g)
            torch.cuda.synchronize()
            first[variant] = time.perf_counter() - started
            errors[variant] = ((out.float() - reference).norm() / reference.norm()).item()
            tables[variant] = {id(a): dict(a.cache) for a in autotuners()}
            print(f"{variant}: first call {first[variant]:.2f} s, relative error {errors[variant]:.2e}", flush=True)

        tuned = [a for a in autotuners() if any(tables[v].get(id(a)) for v in VARIANTS)]
        choices = {f"{name(a)}#{n}": {"configs": len(a.configs),
                                      **{v: sorted(str(c) for c in tables[v].get(id(a), {}).values())
                                         for v in VARIANTS}}
                   for n, a in enumerate(tuned)}

        def block(variant: str) -> float:
            for a in tuned:
                a.cache.clear()
                a.cache.update(tables[variant].get(id(a), {}))
            for _ in range(args.warm):
                stock(q, k, v, g)
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(args.calls):
                stock(q, k, v, g)
            end.record()
            end.synchronize()
            if any(a.cache != tables[variant].get(id(a), {}) for a in tuned):  # a launch tuned again in the block
                retuned.append(variant)
            return begin.elapsed_time(end) / args.calls

        retuned: list[str] = []
        clocks = [sm_clock()]
        rounds: list[dict[str, float]] = []
        for r in range(args.rounds):
            shuffled = list(VARIANTS)
            random.Random(r).shuffle(shuffled)
            rounds.append({variant: block(variant) for variant in shuffled})
        clocks.append(sm_clock())

    median = {v: statistics.median(r[v] for r in rounds) for v in VARIANTS}
    ratios = sorted(r["contextual"] / r["stock"] for r in rounds)
    summary = {"order": order, "first_call_s": first, "relative_error": errors, "median_ms": median,
               "ratio_contextual_over_stock": {"median": statistics.median(ratios), "min": ratios[0],
                                               "max": ratios[-1]},
               "rounds": rounds, "choices": choices, "sm_clock_mhz": clocks, "blocks_that_tuned_again": retuned,
               "calls_per_block": args.calls, "warm_per_block": args.warm,
               "torch": torch.__version__, "device": torch.cuda.get_device_name()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"steady, {args.rounds} interleaved rounds of {args.calls} calls: stock {median['stock']:.3f} ms, "
          f"contextual {median['contextual']:.3f} ms per call; contextual / stock per round: median "
          f"{statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f}); SM clock {clocks} MHz", flush=True)
    differ = [k for k, c in choices.items() if c["stock"] != c["contextual"]]
    print(f"kernels tuned: {len(choices)}; choices differ at {len(differ)}: {', '.join(differ) or '-'}; blocks that "
          f"tuned again: {len(retuned)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
