"""Ranks started by hand (no torchrun agent: global rank 0 hosts the store) that start torch.distributed again in
the same processes with other rank numbers, run by tests/test_rank_claims.py.

Usage: as ranks with ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set; ``python claims_cases.py
CASE``. Each rank prints ``RESULT {json}`` lines: per start, its rank and the all-reduced sum of the ranks, or the
error.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main, waited_for

import triton_dist_tune as tdt


def _start(step: int) -> bool:
    """``init_distributed``, then an all-reduce of this rank's number; prints it (or the error). Whether it ran."""
    t0 = time.monotonic()
    try:
        tdt.init_distributed(backend="gloo", timeout_s=60)
    except Exception as exc:
        emit(step=step, error=type(exc).__name__, message=str(exc), seconds=time.monotonic() - t0)
        return False
    x = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(x)
    emit(step=step, rank=dist.get_rank(), sum=x.item(), seconds=time.monotonic() - t0)
    dist.destroy_process_group()
    return True


@case
def swapped_after_destroy():
    """Start, all-reduce, ``destroy_process_group``; then ranks 1 and 2 swap their numbers (``RANK``) and every rank
    starts again in the same process (rank 0 keeps its store) and all-reduces."""
    if not _start(1):
        return
    rank = int(os.environ["RANK"])
    os.environ["RANK"] = str({1: 2, 2: 1}.get(rank, rank))
    _start(2)


@case
def shrunk_after_destroy():
    """Start 3 ranks, all-reduce, ``destroy_process_group``; then the job goes on with 2: rank 1 leaves (its process
    lives on for ``LINGER_S`` seconds, then ends) and rank 2 starts again as rank 1 (``WORLD_SIZE=2``); rank 0
    ``ZERO_LATE_S`` seconds later (the new rank 1 then reads the first start's world size in rank 0's store)."""
    if not _start(1):
        return
    rank = int(os.environ["RANK"])
    if rank == 1:
        time.sleep(float(os.environ.get("LINGER_S", "0")))
        emit(step=2, left=True)
        return
    if rank == 0:
        time.sleep(float(os.environ.get("ZERO_LATE_S", "0")))
    os.environ["WORLD_SIZE"], os.environ["RANK"] = "2", str({2: 1}.get(rank, rank))
    _start(2)


@case
def replaced_while_it_lingers():
    """``WORLD_SIZE=2``: ranks 0 and 1 start and all-reduce; rank 1's process then lingers, out of the job, until
    rank 0's second start is over. A new process (``ROLE=new``, ``RANK=1``) comes as rank 1 once the first start is
    over; rank 0 starts again ``GAP_S`` seconds after its first start, with the new process as rank 1."""
    folder = os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]
    os.makedirs(folder, exist_ok=True)
    first, second = os.path.join(folder, "first.done"), os.path.join(folder, "second.done")
    if os.environ.get("ROLE") == "new":
        waited_for([first], 60)
        _start(2)
        return
    if not _start(1):
        return
    if int(os.environ["RANK"]) == 0:
        open(first, "w").close()
        time.sleep(float(os.environ["GAP_S"]))
        _start(2)
        open(second, "w").close()
        return
    waited_for([second], 90)  # (lingers: alive, out of the job, its claim of rank 1 in the first start standing)
    emit(step=2, left=True)


if __name__ == "__main__":
    main()
