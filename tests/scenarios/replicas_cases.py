"""Multi-rank scenarios of replicas tuned as one (``autotune_replicas``) on devices of unequal speed, run by
tests/test_replicas.py.

Usage: python replicas_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines. The calls' times are a model's, spent on the virtual clock: every assertion follows from
the model, whatever the machine's load.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from _cases import case, emit, main, spend, virtual_clock

import triton_dist_tune as tdt

#: configs per replica's share
SHARE = 3
#: a call's work (ms): config 0 is 5% lighter than the others, on every device
WORK_MS, LIGHTER = 1.0, 0.95
#: the last replica's device runs every call this much faster than the others' (a cooler or faster part)
FAST_DEVICE = 0.85


@case
def unequal_devices():
    """Every rank a replica of its own (one-rank groups linked by the world), ``SHARE`` configs each: replica ``j``
    races configs ``j, j + R, ...``; config 0, in replica 0's share, is the best on every device, and the last
    replica's device runs everything :data:`FAST_DEVICE` times faster, so its share's survivors read faster than
    config 0 there. Prints the choice and the configs measured to the end on this replica."""
    from reliability_c_cases import one_rank_replicas

    layout = one_rank_replicas()
    rank, world = dist.get_rank(), dist.get_world_size()
    speed = FAST_DEVICE if rank == world - 1 else 1.0

    @tdt.autotune([{"v": v} for v in range(SHARE * world)], key_fn=lambda x: x.numel(), n_warmup=1,
                  name="unequal_devices", timeout=30)
    def f(x, *, v):
        spend(WORK_MS * (LIGHTER if v == 0 else 1.0) * speed)
        return x

    with virtual_clock("host"):
        f(torch.ones(4), **layout)
    (_, decision), = f.tuner.decisions.items()
    emit(chosen=decision.index, measured=sorted(o.index for o in decision.outcomes if o.state == "measured"))


if __name__ == "__main__":
    main()
