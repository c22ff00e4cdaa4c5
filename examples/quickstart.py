"""Quick start: an all-gather followed by a Triton GEMM, tuned across every rank of the job.

Run with ``bash launch.sh examples/quickstart.py`` (one rank per GPU with NCCL; 2 CPU ranks with gloo and Triton's
interpreter where there is no GPU). Rank 0 prints one line per rank: the config it ended on (always the same) and
its result's error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from examples._dist_common import all_gather_rows  # noqa: E402
from examples.gemm_kernels import gemm, gemm_config_space, prune_by_shared_memory  # noqa: E402


def key_fn(a_local: torch.Tensor, b: torch.Tensor, **_: object) -> tuple:
    return tdt.to_hashable(a_local), tdt.to_hashable(b)


def prune_fn(config: dict, a_local: torch.Tensor, b: torch.Tensor, **_: object) -> bool:
    return prune_by_shared_memory(config["gemm_config"], a_local.element_size())


@tdt.autotune(config_space=[{"gemm_config": c} for c in gemm_config_space()], key_fn=key_fn, prune_fn=prune_fn,
              n_warmup=2, n_repeat=5)
def all_gather_gemm(a_local: torch.Tensor, b: torch.Tensor, *, gemm_config) -> torch.Tensor:
    """C = all_gather(A) @ B, with A sharded by rows across the ranks."""
    world = dist.get_world_size()
    a = torch.empty(world * a_local.shape[0], a_local.shape[1], dtype=a_local.dtype, device=a_local.device)
    all_gather_rows(a, a_local)
    return gemm(a, b, config=gemm_config)


#: ``bash launch.sh`` checks this script's arguments once, with parse_arguments, before it starts the ranks
LAUNCH_CHECKS_ARGUMENTS = True


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's options: none but ``--help`` (another: the usage, its message and exit status 2). ``bash
    launch.sh`` calls it once before it starts the ranks (scripts/check_args.py), so that a mistake is said once."""
    return argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    parse_arguments(argv)
    tdt.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    on_gpu = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if on_gpu else ("cpu", torch.float32)
    m_local, k, n = (1024, 4096, 4096) if on_gpu else (24, 32, 40)
    torch.manual_seed(rank)
    a_local = torch.randn(m_local, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    dist.broadcast(b, src=0)

    c = all_gather_gemm(a_local, b, autotune_verbose=True)

    full = [torch.empty_like(a_local) for _ in range(world)]
    dist.all_gather(full, a_local)
    expected = torch.cat(full).float() @ b.float()
    error = ((c.float() - expected).norm() / expected.norm()).item()
    decided = all_gather_gemm.tuner.decided.get(key_fn(a_local, b))
    if decided is None:  # TRITON_DIST_AUTOTUNE_UNDECIDED=first or nearest: a config served, not tuned nor decided
        policy = os.environ.get("TRITON_DIST_AUTOTUNE_UNDECIDED", "")
        ran = f"ran a config served without tuning (the key is not decided: TRITON_DIST_AUTOTUNE_UNDECIDED={policy})"
    else:
        config = decided["gemm_config"]
        ran = f"chose {config.kwargs} num_warps={config.num_warps} num_stages={config.num_stages}"
    lines: list[str | None] = [None] * world
    dist.all_gather_object(lines, f"rank {rank}/{world}: {ran}, relative error {error:.2e}")
    if rank == 0:  # one line per rank, in rank order (ranks printing at once would mix their lines)
        print("\n".join(str(line) for line in lines), flush=True)
    dist.destroy_process_group()
    if error > 2e-2:
        sys.exit(f"rank {rank}: wrong result")


if __name__ == "__main__":
    main()
