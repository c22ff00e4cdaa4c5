"""What a steady sample should time: per-call time against batch length, with and without an untimed lead-in.

Launch (one rank per GPU)::

    torchrun --nproc-per-node 2 benchmarks/bench_steady_start.py --out DIR [--shape 4096x4096x4096]
        [--configs p2p/1/torch,torch/1/torch]

For AG-GEMM configs at one shape: after a barrier and a device synchronize, ``n`` back-to-back calls timed with
events from the first call (``from_start``) or from the end of one untimed lead-in call (``after_lead_in``), for
n in 1, 5, 20, 100; and the host's enqueue time per call (``host``: wall time of 20 calls without synchronizing,
divided by 20). Each figure is the median over 7 repeats of the max over ranks. A config whose ``from_start``
time falls with n while ``after_lead_in`` stays flat pays a one-off cost after each alignment; one whose host
time exceeds its device time is host-bound. Writes ``DIR/steady_start.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from examples.ag_gemm import ag_gemm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_choice  # noqa: E402


def max_over_ranks(value: float) -> float:
    return bench_choice.max_over_ranks([value])[0]


def per_call_ms(call, n: int, lead_in: bool) -> float:
    bench_choice.sync_barrier()
    if lead_in:
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def host_ms(call, n: int = 20) -> float:
    bench_choice.sync_barrier()
    begin = time.perf_counter()
    for _ in range(n):
        call()
    spent = (time.perf_counter() - begin) * 1e3 / n
    torch.cuda.synchronize()
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shape", default="4096x4096x4096")
    parser.add_argument("--configs", default="p2p/1/torch,p2p/2/torch,torch/1/torch,sequential/1/128x256x64-g8-w8-s3")
    args = parser.parse_args()
    tdt.init_distributed()
    m, k, n = (int(v) for v in args.shape.split("x"))
    world = dist.get_world_size()
    gen = torch.Generator(device="cuda").manual_seed(7 + dist.get_rank())
    a = torch.randn(m // world, k, generator=gen, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n // world, generator=gen, dtype=torch.bfloat16, device="cuda") / k**0.5
    rows = []
    for text in args.configs.split(","):
        algo, splits, tile = text.split("/")
        call = functools.partial(ag_gemm, a, b, algo=algo, splits=int(splits), gemm_config=tile)
        for _ in range(3):
            call()
        row = {"config": text, "host": statistics.median(max_over_ranks(host_ms(call)) for _ in range(7))}
        for lead_in in (False, True):
            for count in (1, 5, 20, 100):
                label = f"{'after_lead_in' if lead_in else 'from_start'}_{count}"
                row[label] = statistics.median(max_over_ranks(per_call_ms(call, count, lead_in)) for _ in range(7))
        rows.append(row)
        if dist.get_rank() == 0:
            print(json.dumps(row), flush=True)
    if dist.get_rank() == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "steady_start.json").write_text(json.dumps({"shape": args.shape, "rows": rows}, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
