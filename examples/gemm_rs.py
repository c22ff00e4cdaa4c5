"""GEMM-ReduceScatter: ``out = reduce_scatter(A @ B)`` by rows, with A column-sharded over a group.

Each rank holds ``A`` ``[M, K_local]`` and ``B`` ``[K_local, N]`` (a row shard of the full weight), so
``A @ B`` is a partial sum of the full product. Rank ``r`` gets rows ``[r * M / world, (r + 1) * M /
world)`` of the sum, ``[M / world, N]``; ``M`` must be divisible by the group size. Algorithms:

* ``"sequential"``: one Triton GEMM, then ``reduce_scatter_single``.
* ``"chunked"``: each rank's block of output rows is cut into ``splits`` chunks; the GEMM of chunk
  ``c`` (all ranks' rows of it, one batched launch) runs on the compute stream while the
  reduce-scatter of chunk ``c - 1`` runs on a side stream. On CPU the same steps run in order.
* ``"torch_fused"``: ``torch.ops.symm_mem.fused_matmul_reduce_scatter`` (CUDA + NCCL only).
* ``"torch"``: ``torch.matmul`` + ``reduce_scatter_single``, the baseline.

``tuned_gemm_rs`` (built on first access, needs ``triton_dist_tune``) tunes the config per shape, over the group
given as ``autotune_pg=`` (the default group without it). On a group smaller than the job (a TP group), pass it
twice, as ``TPMLP`` in :mod:`examples.tp_mlp` does: ``tuned_gemm_rs(a, b, group=tp, autotune_pg=tp)``:
``group=`` is where the reduce-scatters run and ``autotune_pg=`` the ranks that tune in lock-step;
with ``autotune_pg=tp`` alone the reduce-scatters span the whole job while each TP group tunes on its own, and the
collectives do not match (as in :mod:`examples.ag_gemm`).

Run: ``bash launch.sh examples/gemm_rs.py`` (one rank per GPU; 2 CPU ranks with gloo and Triton's interpreter,
tiny shapes, where there is no GPU): every rank tunes one shape, rank 0 prints one line per rank with its error
against the torch reference and the config it ran (the same on every rank), then whether the key was tuned or served
from the disk cache: ``gemm_rs keys: 1 tuned, 0 served from the cache``; run again, ``gemm_rs keys: 0 tuned, 1 served
from the cache (...)``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples._dist_common import (  # noqa: E402
    demo_device,
    demo_report,
    enable_symm_mem,
    group_rank_size,
    make_tuned,
    reduce_scatter_rows,
    side_stream,
    split_rows,
    symm_mem_available,
)
from examples.gemm_kernels import TORCH_GEMM, gemm, gemm_config_specs, tile_usable  # noqa: E402

ALGOS = ("chunked", "sequential", "torch_fused", "torch")
SPLITS = (1, 2, 4)


def gemm_rs(
    A: torch.Tensor,
    B: torch.Tensor,
    *,
    group: dist.ProcessGroup | None = None,
    algo: str = "chunked",
    splits: int = 1,
    gemm_config: str | Callable[..., torch.Tensor] = TORCH_GEMM,
) -> torch.Tensor:
    """Return this rank's ``[M / world, N]`` row block of ``sum over ranks of A @ B``.

    Args:
        A: ``[M, K_local]``, ``M`` divisible by the group size; the same shape on every rank.
        B: ``[K_local, N]``, same dtype and device as ``A``.
        group: the process group (None: the default group).
        algo: one of :data:`ALGOS`.
        splits: chunks of this rank's output rows for ``"chunked"`` (uneven chunks allowed); 1 otherwise.
        gemm_config: Triton tile string, ``"torch"`` or a GEMM launcher (see :func:`~examples.gemm_kernels.gemm`);
            ignored by the ``torch*`` algorithms.
    """
    if A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(
            f"gemm_rs: need A [M, K_local] and B [K_local, N], got {tuple(A.shape)}, {tuple(B.shape)}"
        )
    if A.dtype != B.dtype or A.device != B.device:
        raise ValueError("gemm_rs: A and B must share dtype and device")
    if algo not in ("chunked", "sequential", "torch_fused", "torch"):
        raise ValueError(f"gemm_rs: unknown algo {algo!r}; expected one of {ALGOS}")
    if algo != "chunked" and splits != 1:
        raise ValueError(f"gemm_rs: splits={splits} only applies to algo='chunked'")
    _, world = group_rank_size(group)
    m, _ = A.shape
    if m == 0 or m % world:
        raise ValueError(
            f"gemm_rs: the rows of A (M={m}) must be a positive multiple of the group size ({world})"
        )
    A = A.contiguous()
    if algo == "torch_fused":
        if not symm_mem_available(A, group, "fused_matmul_reduce_scatter"):
            raise RuntimeError(
                "gemm_rs: algo='torch_fused' needs CUDA tensors, an NCCL group and torch symm_mem"
            )
        return torch.ops.symm_mem.fused_matmul_reduce_scatter(A, B, "sum", 0, enable_symm_mem(group))
    out = torch.empty(m // world, B.shape[1], dtype=A.dtype, device=A.device)
    if algo == "chunked":
        return _chunked(A, B, out, group, world, splits, gemm_config)
    partial = gemm(A, B, None, TORCH_GEMM if algo == "torch" else gemm_config)
    reduce_scatter_rows(out, partial, group=group)
    return out


def _chunked(
    A: torch.Tensor,
    B: torch.Tensor,
    out: torch.Tensor,
    group: dist.ProcessGroup | None,
    world: int,
    splits: int,
    gemm_config: str | Callable[..., torch.Tensor],
) -> torch.Tensor:
    """Overlap per-chunk GEMMs (current stream) with per-chunk reduce-scatters (side stream)."""
    m_out, n = out.shape
    a3 = A.view(world, m_out, A.shape[1])
    chunks = split_rows(m_out, splits)
    comm = side_stream(A.device) if A.is_cuda else None
    compute = torch.cuda.current_stream(A.device) if A.is_cuda else None
    # Allocated on the compute stream, which waits for the side stream before returning, so the
    # buffers are not reused while a reduce-scatter still reads them.
    bufs = [torch.empty(world, rows, n, dtype=A.dtype, device=A.device) for _, rows in chunks]
    for (start, rows), buf in zip(chunks, bufs, strict=True):
        gemm(a3[:, start : start + rows], B, buf, gemm_config)  # every rank's rows of this chunk
        if comm is None:
            reduce_scatter_rows(out[start : start + rows], buf.view(world * rows, n), group=group)
            continue
        comm.wait_stream(compute)
        with torch.cuda.stream(comm):
            reduce_scatter_rows(out[start : start + rows], buf.view(world * rows, n), group=group)
    if comm is not None:
        compute.wait_stream(comm)
    return out


def gemm_rs_config_space(device: str | torch.device | None = None) -> list[dict[str, Any]]:
    """Every (algo, splits, gemm_config) combination; :func:`gemm_rs_prune` drops the invalid ones.

    The first entry (chunked, 1 split, torch.matmul) is valid for every input.
    """
    tiles = [TORCH_GEMM, *gemm_config_specs(device)]
    return [
        {"algo": algo, "splits": splits, "gemm_config": tile}
        for algo, splits, tile in itertools.product(ALGOS, SPLITS, tiles)
    ]


def gemm_rs_prune(
    config: dict[str, Any], A: torch.Tensor, B: torch.Tensor, *args: Any, **kwargs: Any
) -> bool:
    """Keep ``config`` for this call? (prune_fn signature of ``triton_dist_tune.autotune``)."""
    algo, splits, tile = config["algo"], config["splits"], config["gemm_config"]
    if algo not in ALGOS:
        return False
    if algo in ("torch", "torch_fused"):
        if splits != 1 or tile != TORCH_GEMM:
            return False  # neither knob matters: keep a single entry
        return algo == "torch" or symm_mem_available(A, kwargs.get("group"), "fused_matmul_reduce_scatter")
    if algo == "sequential" and (splits != 1 or tile == TORCH_GEMM):
        return False  # sequential with torch.matmul is algo "torch"
    world = dist.get_world_size(kwargs.get("group")) if dist.is_initialized() else 1
    m_out = A.shape[0] // world
    if m_out == 0 or A.shape[0] % world:
        return algo == "chunked" and splits == 1 and tile == TORCH_GEMM  # keep one: the call raises the error
    if m_out % splits:
        return False
    rows = A.shape[0] if algo == "sequential" else m_out // splits
    return tile_usable(tile, A, rows)


_TUNED: dict[str, Callable[..., torch.Tensor]] = {}


def make_tuned_gemm_rs(**autotune_kwargs: Any) -> Callable[..., torch.Tensor]:
    """Wrap :func:`gemm_rs` with ``triton_dist_tune.autotune`` over :func:`gemm_rs_config_space`."""
    return make_tuned(gemm_rs, gemm_rs_config_space(), gemm_rs_prune, **autotune_kwargs)


def __getattr__(name: str) -> Any:
    """Build ``tuned_gemm_rs`` lazily, so that importing this module does not need the tuner."""
    if name == "tuned_gemm_rs":
        if name not in _TUNED:
            _TUNED[name] = make_tuned_gemm_rs()
        return _TUNED[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: ``bash launch.sh`` checks this script's arguments once, with parse_arguments, before it starts the ranks
LAUNCH_CHECKS_ARGUMENTS = True


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's options: none but ``--help`` (another: the usage, its message and exit status 2). ``bash
    launch.sh`` calls it once before it starts the ranks (scripts/check_args.py), so that a mistake is said once."""
    return argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Tune :func:`gemm_rs` at one shape on every rank of the job, check it against ``matmul`` + an all-reduce of
    the partial sums, and print one line per rank (rank 0): its error and the config it ran, the same everywhere."""
    parse_arguments(argv)
    import triton_dist_tune

    triton_dist_tune.init_distributed()  # NCCL and one GPU per rank with CUDA, else gloo
    device, dtype, tol = demo_device()
    rank, world = dist.get_rank(), dist.get_world_size()
    # M = world * rows, as each rank gets M / world rows: on GPUs about 4,096, each rank's rows a multiple of 128
    # (M = 4,096 on 1, 2, 4 or 8 GPUs; 4,224 on 3)
    rows, k_local, n = (128 * -(-4096 // (world * 128)), 2048, 4096) if device.type == "cuda" else (8, 16, 24)
    m = world * rows
    a = torch.randn(m, k_local, generator=torch.Generator().manual_seed(rank)).to(device, dtype)
    b = (torch.randn(k_local, n, generator=torch.Generator().manual_seed(100 + rank)) / k_local**0.5).to(device, dtype)
    quick = {} if device.type == "cuda" else {"n_warmup": 1, "n_repeat": 3}  # the interpreter is slow
    tuned = make_tuned_gemm_rs(**quick)
    out = tuned(a, b)
    full = a.float() @ b.float()
    dist.all_reduce(full)  # the sum over ranks of every rank's partial product
    return demo_report("gemm_rs", out, full[rank * rows : (rank + 1) * rows], tol, tuned)


if __name__ == "__main__":
    sys.exit(main())
