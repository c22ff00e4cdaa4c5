"""Replicas of one rank each (``autotune_replicas``) on a real GPU, run as real ranks by tests/test_replicas_cuda.py
(skipped without CUDA): two gloo ranks share one GPU.

- ``replicas_of_unequal_shares``: two configs, one a replica's share each (config 0: one 1024 x 1024 product, about
  0.02 ms; config 1: forty of them, about 1.5 ms, over the 1 ms under which a tuning times on the device). Each rank
  reports its decision and the lines of its rank log that say how its samples were timed.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt


@case
def replicas_of_unequal_shares() -> None:
    tdt.init_distributed(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = [dist.new_group([r]) for r in range(world)][rank]  # every rank creates every group
    replicas = dist.new_group(list(range(world)))
    torch.cuda.set_device(0)
    a = torch.full((1024, 1024), 1e-3, device="cuda")

    @tdt.autotune([{"products": 1}, {"products": 40}], key_fn=lambda x: x.shape[0], n_warmup=2, n_repeat=5,
                  name="replica_kinds")
    def f(x, *, products):
        y = x
        for _ in range(products):
            y = y @ a
        return y

    f(a, autotune_pg=tp, autotune_replicas=replicas)
    torch.cuda.synchronize()
    log = os.path.join(os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"], f"rank-{rank}.log")
    with open(log, errors="replace") as lines:
        timing = [line.split("] ", 1)[-1][:120] for line in lines
                  if "timing on the device" in line or "timed on the device" in line or "timed eagerly" in line]
    emit(rank=rank, decided=f.tuner.decided_in[next(iter(f.tuner.decided_in))], timing=timing)


if __name__ == "__main__":
    main()
