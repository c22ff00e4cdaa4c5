"""A real GPU fault during tuning: config 0 makes an illegal memory access on rank 1 only.

Launch: ``torchrun --standalone --nproc-per-node 2 --max-restarts 1 benchmarks/gpu_fault_check.py --out DIR``
with ``TRITON_DIST_AUTOTUNE_CACHE_DIR`` fresh. Expected: attempt 0 ends (every rank raises DevicePoisonedError,
or the NCCL watchdog / the tuner's watchdog ends it), attempt 1 resumes from the journal without config 0 and
chooses among the healthy configs; both ranks write their choice to DIR/gpu_fault_rank{r}.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402


@triton.jit
def _scale(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs + shift, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    tdt.init_distributed()
    rank = dist.get_rank()
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")

    @tdt.autotune([{"BLOCK": b} for b in (256, 512, 1024)], key_fn=lambda x: x.numel(), n_warmup=2, n_repeat=5,
                  timeout=30, name="gpu_fault")
    def scale(x, *, BLOCK):
        out = torch.empty_like(x)
        shift = (1 << 40) if (BLOCK == 256 and rank == 1) else 0  # an address far outside any allocation
        _scale[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), shift, BLOCK=BLOCK)
        dist.all_reduce(out)
        return out

    torch.manual_seed(0)  # the same x on every rank, so that the all_reduce's result is x * 2 * world
    x = torch.randn(1 << 20, device="cuda")
    y = scale(x)
    ok = torch.allclose(y, x * 2 * dist.get_world_size())
    rows = next(iter(scale.tuner.tables.values()))
    result = {"rank": rank, "attempt": attempt, "chosen": scale.tuner.decided[x.numel()]["BLOCK"], "ok": ok,
              "rows": [{k: r.get(k) for k in ("index", "state", "time", "error", "resumed")} for r in rows]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"gpu_fault_rank{rank}.json").write_text(json.dumps(result, indent=1))
    print("RESULT", json.dumps(result), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
