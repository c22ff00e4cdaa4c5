"""Per-call cost of a decided ``contextual_autotune`` call on a 2-rank gloo group (CPU, no kernel work).

Usage: torchrun --nproc-per-node 2 benchmarks/bench_contextual_hot.py [--out DIR] (with PYTHONPATH pointing at
another checkout, the same script measures that version; one without ``sync_every`` gets one row).

The tuned function launches one ``triton.autotune`` kernel whose compiled function is a no-op, so the figure is
the tuner's own cost per call (the interception, the key, the decided-config lookup) plus, every ``sync_every``
calls, the group's one exchange on its control channel. Each figure is the median of 7 rounds of N calls; the
``plain`` row is the same function called without the decorator (Triton's own ``Autotuner.run`` with a cached
key). Rank 0 prints a table and writes contextual_hot.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TRITON_DIST_AUTOTUNE_CACHE_DIR", tempfile.mkdtemp())
os.environ.setdefault("TRITON_DIST_AUTOTUNE_LOG_DIR", tempfile.mkdtemp())

import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402


class NoKernel:
    """Stands in for a jitted kernel: ``run`` does nothing (the tuner's cost is what is measured)."""

    def __init__(self) -> None:
        self.fn = lambda x, n, BLOCK: None  # noqa: N803 - Triton's base_fn lookup walks .fn to a function
        self.arg_names = ["x", "n", "BLOCK"]

    def run(self, *args, **kwargs):
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    parser.add_argument("--calls", type=int, default=2000)
    opts = parser.parse_args()
    tdt.init_distributed(backend="gloo")
    kernel = Autotuner(NoKernel(), ["x", "n", "BLOCK"], [triton.Config({"BLOCK": b}) for b in (16, 32)], ["n"],
                       None, None)

    def body():
        kernel.run(None, 64, grid=(1,), warmup=False)

    try:
        tuned = {f"sync_every={every}": tdt.contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1,
                                                                sync_every=every)(body) for every in (1, 16, 64, 256)}
    except TypeError:  # a version without sync_every (the code before it), for comparison
        tuned = {"contextual (no sync_every)": tdt.contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1)(body)}
    for fn in tuned.values():
        fn()  # tune (first call), then every call is decided
    fns = {"plain": body, **tuned}
    rounds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(7):
        for name, fn in fns.items():
            dist.barrier()
            start = time.perf_counter()
            for _ in range(opts.calls):
                fn()
            rounds[name].append((time.perf_counter() - start) / opts.calls * 1e6)
    result = {name: statistics.median(t) for name, t in rounds.items()}
    if dist.get_rank() == 0:
        print("| call | us per call | over plain |\n|---|---|---|")
        for name, us in result.items():
            print(f"| {name} | {us:.2f} | {us - result['plain']:.2f} |")
        out = Path(opts.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "contextual_hot.json").write_text(json.dumps({"us_per_call": result, "calls": opts.calls,
                                                             "triton": triton.__version__}, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
