"""Real tunings whose cache entries and logs tests/test_cli.py reads back with the command line.

Usage: python cli_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt

# ms slept per config: config 1 is the fastest on every rank (by 4x: load on the machine cannot close that gap);
# config 3 raises on rank 1; config 4 is pruned for the larger key
SLEEP_MS = [24, 4, 48, 2, 16]


def make_tuned():
    def prune(config, x, **_):
        return not (config["variant"] == 4 and x.numel() > 4)

    @tdt.autotune(config_space=[{"variant": v} for v in range(5)], key_fn=lambda x, **_: tuple(x.shape),
                  prune_fn=prune, n_warmup=1, n_repeat=3)
    def cli_sleepy(x, *, variant):
        time.sleep(SLEEP_MS[variant] / 1e3)
        y = x * (variant + 1)
        dist.all_reduce(y)
        if variant == 3 and dist.get_rank() == 1:  # after the collective, so that rank 0 is not left inside it
            raise RuntimeError("boom: config 3 does not fit on rank 1")
        return y

    return cli_sleepy


@case
def tune():
    """Two keys, tuned verbosely on the default group (the second job finds both in the cache)."""
    tdt.init_distributed()
    tuned = make_tuned()
    for n in (4, 8):
        tuned(torch.ones(n), autotune_verbose=True)
        emit(key=n, chosen=tuned.tuner.decided[(n,)]["variant"])


if __name__ == "__main__":
    main()
