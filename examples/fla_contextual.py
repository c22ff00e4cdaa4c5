"""``contextual_autotune`` around a real library: flash-linear-attention's ``chunk_gla`` (``pip install fla-core``).

``chunk_gla`` (gated linear attention, chunked) launches several ``@triton.autotune`` kernels, each behind
``@triton.heuristics``. Wrapped in ``contextual_autotune``, every one of them is tuned in the real call, between
the others, on the real inputs, every rank of the job in lock-step and on one choice; the library is not changed.

Run, where fla-core is installed and a GPU is present::

    bash launch.sh examples/fla_contextual.py      # one rank per GPU, every rank on the same choices
    python examples/fla_contextual.py              # one GPU, one process

It prints how long the first (tuning) call took, the steady time of a call, and the output's error against a
plain torch recurrence. Without fla-core or a GPU it prints ``skipped: needs fla-core and a GPU`` (rank 0 alone) and
exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SKIPPED = "skipped: needs fla-core and a GPU"


def runnable() -> bool:
    """fla-core importable and a CUDA GPU present (Triton's interpreter does not run fla's kernels)."""
    import torch

    return (importlib.util.find_spec("fla") is not None and torch.cuda.is_available()
            and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"))


def reference_gla(q, k, v, g, scale: float):
    """Gated linear attention as a plain recurrence, in float32 (inputs ``[B, T, H, K]``, ``v`` ``[B, T, H, V]``):
    ``S_t = exp(g_t)[:, None] * S_{t-1} + k_t^T v_t`` and ``o_t = scale * q_t S_t``."""
    import torch

    q, k, v, g = (x.float() for x in (q, k, v, g))
    b, t, h, dk = q.shape
    state = torch.zeros(b, h, dk, v.shape[-1], device=q.device)
    out = torch.empty(b, t, h, v.shape[-1], device=q.device)
    for i in range(t):
        state = state * g[:, i].exp()[..., None] + k[:, i, :, :, None] * v[:, i, :, None, :]
        out[:, i] = scale * torch.einsum("bhk,bhkv->bhv", q[:, i], state)
    return out


#: ``bash launch.sh`` checks this script's arguments once, with parse_arguments, before it starts the ranks
LAUNCH_CHECKS_ARGUMENTS = True


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's options: none but ``--help`` (another: the usage, its message and exit status 2). ``bash
    launch.sh`` calls it once before it starts the ranks (scripts/check_args.py), so that a mistake is said once."""
    return argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    parse_arguments(argv)
    if not runnable():
        # once per job (before, once per rank: 2 CPU ranks said it twice): rank 0, or a process that no launcher
        # gave a rank (torchrun's RANK, mpiexec's OMPI_COMM_WORLD_RANK or PMI_RANK)
        given = next((os.environ[v] for v in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK") if os.environ.get(v)), "0")
        if given.strip() == "0":
            print(SKIPPED, flush=True)
        return 0
    import torch
    import torch.nn.functional as F
    from fla.ops.gla import chunk_gla

    import triton_dist_tune as tdt

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        tdt.init_distributed()  # NCCL, one GPU per rank: the kernels are tuned by every rank together
    rank = int(os.environ.get("RANK", "0"))

    # the default group when torch.distributed is initialized, this process alone otherwise
    @tdt.contextual_autotune(n_warmup=2, n_repeat=5)
    def gla(q, k, v, g):
        return chunk_gla(q=q, k=k, v=v, g=g, scale=q.shape[-1] ** -0.5)[0]

    batch, seq, heads, dk, dv = 2, 1024, 8, 128, 128
    gen = torch.Generator(device="cuda").manual_seed(0)  # the same inputs on every rank

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=gen, dtype=torch.bfloat16)

    q, k, v = randn(batch, seq, heads, dk), randn(batch, seq, heads, dk), randn(batch, seq, heads, dv)
    g = F.logsigmoid(randn(batch, seq, heads, dk).float()).to(torch.bfloat16)  # log decays, <= 0

    with torch.no_grad():
        started = time.perf_counter()
        out = gla(q, k, v, g)  # tunes every autotuned kernel chunk_gla launches, then runs on the best configs
        torch.cuda.synchronize()
        first_s = time.perf_counter() - started
        for _ in range(3):
            gla(q, k, v, g)
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(20):
            gla(q, k, v, g)  # decided: stock launches of the chosen configs
        torch.cuda.synchronize()
        steady_ms = (time.perf_counter() - started) / 20 * 1e3
    ref = reference_gla(q, k, v, g, dk**-0.5)
    error = ((out.float() - ref).norm() / ref.norm()).item()
    print(f"fla chunk_gla rank {rank}: first call (tuning) {first_s:.1f} s, then {steady_ms:.3f} ms per call, "
          f"relative error {error:.2e} against the torch recurrence", flush=True)
    if rank == 0:  # (every rank's decisions are the group's)
        from examples._dist_common import cache_line, contextual_counts

        print(cache_line("fla chunk_gla", {"gla": contextual_counts(gla)}), flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0 if error <= 2e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
