"""AllGather-GEMM: ``C = all_gather(A) @ B`` with A row-sharded over a process group.

Each rank holds ``A_local`` ``[M_local, K]`` and the same-shaped local ``B`` ``[K, N]`` (in tensor
parallelism usually a column shard of the full weight). The result is ``[world * M_local, N]``, rows
in rank order. Algorithms (the ``algo`` config entry):

* ``"sequential"``: ``all_gather_single`` then one Triton GEMM.
* ``"chunked"``: each rank's rows are cut into ``splits`` chunks, gathered one collective per chunk
  on a side stream while the compute stream first multiplies the local shard (which needs no
  communication) and then each chunk as its event fires. On CPU the same steps run in order.
* ``"p2p"``: like ``"chunked"``, but each rank pushes its chunks straight into its peers'
  symmetric-memory buffers with copy-engine copies (no SMs taken from the GEMM, unlike NCCL's
  kernels), one symmetric-memory barrier per chunk (CUDA + NCCL group + torch symm_mem only).
* ``"torch_fused"``: ``torch.ops.symm_mem.fused_all_gather_matmul`` (CUDA + NCCL only).
* ``"torch"``: ``all_gather_single`` + ``torch.matmul``, the baseline.

``gemm_config`` is a Triton tile string (see :mod:`examples.gemm_kernels`) or ``"torch"`` for
``torch.matmul`` chunks. :func:`ag_gemm` takes every config entry explicitly; ``tuned_ag_gemm``
(built on first access, needs the ``triton_dist_tune`` package) tunes them per shape over the group
given as ``autotune_pg=`` (the default group without it). On a group smaller than the job (a TP group), pass it
twice, as ``TPMLP`` in :mod:`examples.tp_mlp` does: ``tuned_ag_gemm(a, b, group=tp, autotune_pg=tp)``.
``group=`` is where the all-gathers run (the default group without it) and ``autotune_pg=`` the ranks that tune in
lock-step; with ``autotune_pg=tp`` alone each TP group tunes on its own while every all-gather spans the whole job,
and the collectives do not match (on 4 CPU ranks, two TP groups of 2: gloo aborts with "Received data size doesn't
match expected size").

Run: ``bash launch.sh examples/ag_gemm.py`` (one rank per GPU; 2 CPU ranks with gloo and Triton's interpreter,
tiny shapes, where there is no GPU): every rank tunes one shape, rank 0 prints one line per rank with its error
against the torch reference and the config it ran (the same on every rank), then whether the key was tuned or served
from the disk cache: ``ag_gemm keys: 1 tuned, 0 served from the cache``; run again, ``ag_gemm keys: 0 tuned, 1 served
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
    all_gather_rows,
    demo_device,
    demo_report,
    enable_symm_mem,
    group_rank_size,
    make_tuned,
    side_stream,
    split_rows,
    symm_buffer,
    symm_mem_available,
)
from examples.gemm_kernels import TORCH_GEMM, gemm, gemm_config_specs, tile_usable  # noqa: E402

ALGOS = ("chunked", "sequential", "p2p", "torch_fused", "torch")
SPLITS = (1, 2, 4)


def ag_gemm(
    A: torch.Tensor,
    B: torch.Tensor,
    *,
    group: dist.ProcessGroup | None = None,
    algo: str = "chunked",
    splits: int = 1,
    gemm_config: str | Callable[..., torch.Tensor] = TORCH_GEMM,
) -> torch.Tensor:
    """Return ``all_gather(A, group) @ B`` (``[world * M_local, N]``) with the given algorithm.

    Args:
        A: this rank's row shard ``[M_local, K]``; every rank must pass the same shape.
        B: ``[K, N]``, same dtype and device as ``A``.
        group: the process group (None: the default group).
        algo: one of :data:`ALGOS`.
        splits: chunks per rank for ``"chunked"`` / ``"p2p"`` (uneven chunks allowed); 1 otherwise.
        gemm_config: Triton tile string, ``"torch"`` or a GEMM launcher (see :func:`~examples.gemm_kernels.gemm`);
            ignored by the ``torch*`` algorithms.
    """
    if A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"ag_gemm: need A [M_local, K] and B [K, N], got {tuple(A.shape)}, {tuple(B.shape)}")
    if A.dtype != B.dtype or A.device != B.device:
        raise ValueError("ag_gemm: A and B must share dtype and device")
    if algo not in ALGOS:
        raise ValueError(f"ag_gemm: unknown algo {algo!r}; expected one of {ALGOS}")
    if algo not in ("chunked", "p2p") and splits != 1:
        raise ValueError(f"ag_gemm: splits={splits} only applies to algo='chunked' or 'p2p'")
    if A.shape[0] == 0:
        raise ValueError("ag_gemm: A has no rows")
    A = A.contiguous()
    rank, world = group_rank_size(group)
    m_local, k = A.shape
    n = B.shape[1]
    if algo in ("torch_fused", "p2p"):
        if not symm_mem_available(A, group, "fused_all_gather_matmul"):
            raise RuntimeError(f"ag_gemm: algo={algo!r} needs CUDA tensors, an NCCL group, torch symm_mem")
    if algo == "torch_fused":
        _, (out,) = torch.ops.symm_mem.fused_all_gather_matmul(A, [B], 0, enable_symm_mem(group))
        return out
    out = torch.empty(world * m_local, n, dtype=A.dtype, device=A.device)
    if algo == "chunked":
        return _chunked(A, B, out, group, rank, world, splits, gemm_config)
    if algo == "p2p":
        return _p2p(A, B, out, group, rank, world, splits, gemm_config)
    gathered = torch.empty(world * m_local, k, dtype=A.dtype, device=A.device)
    all_gather_rows(gathered, A, group=group)
    return gemm(gathered, B, out, TORCH_GEMM if algo == "torch" else gemm_config)


def _chunked(
    A: torch.Tensor,
    B: torch.Tensor,
    out: torch.Tensor,
    group: dist.ProcessGroup | None,
    rank: int,
    world: int,
    splits: int,
    gemm_config: str | Callable[..., torch.Tensor],
) -> torch.Tensor:
    """Overlap per-chunk all-gathers (side stream) with per-chunk GEMMs (current stream)."""
    m_local, k = A.shape
    out3 = out.view(world, m_local, out.shape[1])
    chunks = split_rows(m_local, splits)
    # Buffers are allocated on the current stream; it waits on every comm event below before the
    # buffers can be freed and reused, so no record_stream is needed.
    bufs = [torch.empty(world, rows, k, dtype=A.dtype, device=A.device) for _, rows in chunks]
    comm = side_stream(A.device) if A.is_cuda else None
    compute = torch.cuda.current_stream(A.device) if A.is_cuda else None

    def gather(i: int) -> None:
        start, rows = chunks[i]
        all_gather_rows(bufs[i].view(world * rows, k), A[start : start + rows], group=group)

    events = []
    if comm is not None:
        comm.wait_stream(compute)  # A (and whatever produced it) is ready
        with torch.cuda.stream(comm):
            for i in range(len(chunks)):
                gather(i)
                events.append(torch.cuda.Event())
                events[-1].record(comm)
    gemm(A, B, out3[rank], gemm_config)  # the local shard needs no communication: overlaps the gathers
    for i, (start, rows) in enumerate(chunks):
        if comm is not None:
            compute.wait_event(events[i])
        else:
            gather(i)  # CPU: the same steps, in order
        # Peers' rows of this chunk: ranks [0, rank) and (rank, world), one batched launch each.
        for lo, hi in ((0, rank), (rank + 1, world)):
            if hi > lo:
                gemm(bufs[i][lo:hi], B, out3[lo:hi, start : start + rows], gemm_config)
    return out


def p2p_push(
    A: torch.Tensor, group: dist.ProcessGroup | None, splits: int
) -> tuple[torch.Tensor, list[tuple[int, int]], list[torch.cuda.Event], Any]:
    """Push this rank's rows into every peer's symmetric buffer, chunk by chunk, with copy-engine copies.

    Returns this rank's receive buffer ``[world, M_local, K]`` (slot ``p`` is filled by rank ``p``;
    this rank's own slot is left untouched), the chunks, one event per chunk that fires once every
    rank's copies of that chunk have landed, and the symmetric-memory handle. The caller must read the
    buffer on the current stream only after the chunk's event, and must then call :func:`p2p_release`
    on the current stream before the next push (it tells the peers that the buffer may be reused).

    Copies run on one side stream and the per-chunk barriers (small kernels) on another, so a barrier
    waiting for a free SM behind a long GEMM never holds back the copies queued after it.
    """
    rank, world = group_rank_size(group)
    m_local, k = A.shape
    buf, handle = symm_buffer(group, world * m_local * k, A.dtype, A.device)
    recv = buf[: world * m_local * k].view(world, m_local, k)
    chunks = split_rows(m_local, splits)
    copy, signal = side_stream(A.device), side_stream(A.device, "signal")
    # A is ready, and the previous call's p2p_release (on this stream) has passed: every peer is done
    # reading its buffer, so it may be overwritten.
    copy.wait_stream(torch.cuda.current_stream(A.device))
    peers = [handle.get_buffer(p, (world, m_local, k), A.dtype, 0) for p in range(world)]
    events = []
    for start, rows in chunks:
        landed = torch.cuda.Event()
        with torch.cuda.stream(copy):
            for step in range(1, world):
                peer = (rank + step) % world
                peers[peer][rank, start : start + rows].copy_(A[start : start + rows])  # copy engine
            landed.record(copy)
        with torch.cuda.stream(signal):
            signal.wait_event(landed)
            handle.barrier(channel=0)  # every rank's copies of this chunk are complete
            events.append(torch.cuda.Event())
            events[-1].record(signal)
    return recv, chunks, events, handle


def p2p_release(handle: Any) -> None:
    """On the current stream, after the last read of the receive buffer: wait until every rank is done."""
    handle.barrier(channel=1)


def _p2p(
    A: torch.Tensor,
    B: torch.Tensor,
    out: torch.Tensor,
    group: dist.ProcessGroup | None,
    rank: int,
    world: int,
    splits: int,
    gemm_config: str | Callable[..., torch.Tensor],
) -> torch.Tensor:
    """Copy-engine pushes into symmetric memory (side streams) overlapped with per-chunk GEMMs."""
    recv, chunks, events, handle = p2p_push(A, group, splits)
    out3 = out.view(world, A.shape[0], out.shape[1])
    compute = torch.cuda.current_stream(A.device)
    gemm(A, B, out3[rank], gemm_config)  # the local shard, while the copies run
    for (start, rows), event in zip(chunks, events, strict=True):
        compute.wait_event(event)
        for lo, hi in ((0, rank), (rank + 1, world)):
            if hi > lo:
                gemm(recv[lo:hi, start : start + rows], B, out3[lo:hi, start : start + rows], gemm_config)
    p2p_release(handle)
    return out


def ag_gemm_config_space(device: str | torch.device | None = None) -> list[dict[str, Any]]:
    """Every (algo, splits, gemm_config) combination; :func:`ag_gemm_prune` drops the invalid ones.

    The first entry (chunked, 1 split, torch.matmul chunks) is valid for every input.
    """
    tiles = [TORCH_GEMM, *gemm_config_specs(device)]
    space = [
        {"algo": algo, "splits": splits, "gemm_config": tile}
        for algo, splits, tile in itertools.product(ALGOS, SPLITS, tiles)
    ]
    return space


def ag_gemm_prune(
    config: dict[str, Any], A: torch.Tensor, B: torch.Tensor, *args: Any, **kwargs: Any
) -> bool:
    """Keep ``config`` for this call? (prune_fn signature of ``triton_dist_tune.autotune``)."""
    algo, splits, tile = config["algo"], config["splits"], config["gemm_config"]
    if algo not in ALGOS:
        return False
    if algo in ("torch", "torch_fused"):
        if splits != 1 or tile != TORCH_GEMM:
            return False  # neither knob matters: keep a single entry
        return algo == "torch" or symm_mem_available(A, kwargs.get("group"), "fused_all_gather_matmul")
    if algo == "p2p" and not symm_mem_available(A, kwargs.get("group"), "fused_all_gather_matmul"):
        return False
    m_local = A.shape[0]
    if algo == "sequential" and (splits != 1 or tile == TORCH_GEMM):
        return False  # sequential with torch.matmul is algo "torch"
    if m_local % splits:
        return False
    world = dist.get_world_size(kwargs.get("group")) if dist.is_initialized() else 1
    rows = m_local * world if algo == "sequential" else m_local // splits
    return tile_usable(tile, A, rows)


_TUNED: dict[str, Callable[..., torch.Tensor]] = {}


def make_tuned_ag_gemm(**autotune_kwargs: Any) -> Callable[..., torch.Tensor]:
    """Wrap :func:`ag_gemm` with ``triton_dist_tune.autotune`` over :func:`ag_gemm_config_space`."""
    return make_tuned(ag_gemm, ag_gemm_config_space(), ag_gemm_prune, **autotune_kwargs)


def __getattr__(name: str) -> Any:
    """Build ``tuned_ag_gemm`` lazily, so that importing this module does not need the tuner."""
    if name == "tuned_ag_gemm":
        if name not in _TUNED:
            _TUNED[name] = make_tuned_ag_gemm()
        return _TUNED[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: ``bash launch.sh`` checks this script's arguments once, with parse_arguments, before it starts the ranks
LAUNCH_CHECKS_ARGUMENTS = True


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's options: none but ``--help`` (another: the usage, its message and exit status 2). ``bash
    launch.sh`` calls it once before it starts the ranks (scripts/check_args.py), so that a mistake is said once."""
    return argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Tune :func:`ag_gemm` at one shape on every rank of the job, check it against ``all_gather`` + ``matmul``, and
    print one line per rank (rank 0): its error and the config it ran, the same on every rank."""
    parse_arguments(argv)
    import triton_dist_tune

    triton_dist_tune.init_distributed()  # NCCL and one GPU per rank with CUDA, else gloo
    device, dtype, tol = demo_device()
    rank, world = dist.get_rank(), dist.get_world_size()
    m_local, k, n = (1024, 4096, 4096) if device.type == "cuda" else (8, 16, 24)
    a_local = torch.randn(m_local, k, generator=torch.Generator().manual_seed(rank)).to(device, dtype)
    b = (torch.randn(k, n, generator=torch.Generator().manual_seed(1234)) / k**0.5).to(device, dtype)  # one B
    quick = {} if device.type == "cuda" else {"n_warmup": 1, "n_repeat": 3}  # the interpreter is slow
    tuned = make_tuned_ag_gemm(**quick)
    c = tuned(a_local, b)
    gathered = torch.empty(world * m_local, k, device=device, dtype=dtype)
    all_gather_rows(gathered, a_local)
    return demo_report("ag_gemm", c, gathered.float() @ b.float(), tol, tuned)


if __name__ == "__main__":
    sys.exit(main())
