"""A job restarted by torchrun on two nodes, run by tests/test_init_distributed.py.

Usage: under ``python -m torch.distributed.run --nnodes 2 ... restart_cases.py CASE`` (two agents), or as ranks with
torchrun's variables set as two agents would set them. Each rank prints ``RESULT {json}`` lines naming the restart
count its agent gave it (and its node, ``GROUP_RANK``, under torchrun).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt


def _tune_all_reducing(name: str) -> dict:
    """Tune a function named ``name`` whose every call all-reduces, on every rank; its choice and the configs'
    states, for a RESULT line."""

    @tdt.autotune([{"v": v} for v in range(3)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, name=name)
    def f(x, *, v):
        y = x * (v + 1)
        dist.all_reduce(y)
        return y

    f(torch.ones(4))
    (_, decision), = f.tuner.decisions.items()
    return {"chosen": decision.index, "states": [o.state for o in decision.outcomes]}


@case
def node_0_fails_first():
    """Every rank starts torch.distributed with ``init_distributed``. In the first attempt (``FAULT_DIR`` keeps a
    marker per node) node 0's rank exits 3 right after: its agent restarts its workers and counts a restart, while
    node 1's agent restarts its own for the membership change and does not (its rank sleeps, healthy, until then).
    In the next attempt both ranks tune a function whose every call all-reduces, with the tuner's exchanges, and
    print the choice."""
    restart, node = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["GROUP_RANK"]
    marker = Path(os.environ["FAULT_DIR"]) / f"node{node}.started"  # (node 1's count says no restart)
    first = not marker.exists()
    marker.touch()
    tdt.init_distributed(backend="gloo", timeout_s=float(os.environ["INIT_TIMEOUT_S"]))
    dist.barrier()
    emit(node=node, restart=restart, started=True)
    if first and node == "0":
        sys.stdout.flush()
        os._exit(3)
    if first:  # node 1's first attempt, healthy (in no collective) until its agent stops it
        time.sleep(120)

    emit(node=node, restart=restart, **_tune_all_reducing("restarted_on_two_nodes"))


@case
def own_init_on_nodes_that_count_restarts_apart():
    """Every rank starts torch.distributed itself (``init_process_group``, not ``init_distributed``) as torchrun's
    workers on two nodes after node 0's restart: ``GROUP_WORLD_SIZE`` 2, ``TORCHELASTIC_RESTART_COUNT`` 1 on rank 0
    and 0 on rank 1 (what two agents gave their workers: ``node_0_fails_first``). Both ranks tune a function whose
    every call all-reduces and print the choice."""
    dist.init_process_group("gloo")
    emit(restart=os.environ["TORCHELASTIC_RESTART_COUNT"], **_tune_all_reducing("counted_apart"))


if __name__ == "__main__":
    main()
