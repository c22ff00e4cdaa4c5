"""A ``contextual_autotune`` hot call that meets a key its group has not decided, settled in the job's key-value store
(``contextual/newkeys.py``), after the store's host ended. Usage: python newkey_store_gone_cases.py CASE."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main, outcome

import triton_dist_tune as tdt


@case
def host_ended_before_a_hot_call_settles():
    """Rank 0 (the store's host) ends its process after the group's first call; rank 1's next call, a second later,
    runs hot and meets key 128, which no rank decided: it settles it in the store, which is gone."""
    from _kernels import copying_layer

    tdt.init_distributed(backend="gloo")
    me = dist.get_rank()

    layer = copying_layer(is_dist=True, n_warmup=1, n_repeat=1)

    emit(rank=me, what=0, **outcome(lambda: float(layer(torch.ones(64)).sum())))
    if me == 0:
        os._exit(0)
    time.sleep(1.0)
    emit(rank=me, what=1, **outcome(lambda: float(layer(torch.ones(128)).sum())))
    os._exit(0)  # (no barrier: rank 0 is gone)


if __name__ == "__main__":
    main()
