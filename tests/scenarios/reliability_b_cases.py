"""Multi-rank scenarios of issue 30 cases 2, 7 and 9, run by tests/test_reliability_b.py.

Usage: python reliability_b_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, or under torchrun).
Each rank prints ``RESULT {json}`` lines.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt
from triton_dist_tune.errors import GroupTimeoutError

#: the key of the slow unit (rank 1's share of the campaign's two keys)
SLOW_KEY = 16


def leave(**fields: object) -> None:
    """Emit and end at once, with no barrier (the other rank is gone or elsewhere)."""
    emit(**fields)
    sys.stdout.flush()
    os._exit(0)


@case
def campaign_slow_unit():
    """Two keys, one per rank, T = 2 s: rank 1's key is slow but healthy (its call takes BUILD_S s to build, its
    configs sleep 0.25 s each run), longer than the old round deadline (exchange_timeout(2) x (2 configs + 4) =
    18 s). Every rank must end the campaign normally."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    builds: Counter = Counter()

    def make(n: int) -> torch.Tensor:
        builds[n] += 1
        if n == SLOW_KEY and builds[n] == 2:  # the tuning's own build (the first one only computes the key)
            time.sleep(float(os.environ["BUILD_S"]))
        return torch.ones(n)

    @tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=12,
                  timing="cold", name="slow_unit")
    def kernel(x, *, v):
        time.sleep(0.25 if x.shape[0] == SLOW_KEY else 0.001)
        return x

    started = time.monotonic()
    try:
        summary = tdt.campaign(kernel, make, [8, SLOW_KEY], local=True, progress=False)
    except GroupTimeoutError as exc:
        leave(rank=rank, ok=False, error=str(exc)[:600], seconds=time.monotonic() - started)
    emit(rank=rank, ok=True, states=[row.state for row in summary.rows], seconds=time.monotonic() - started,
         decided=sorted(kernel.tuner.decided))


@case
def campaign_killed_unit():
    """Two keys, one per rank, T = 2 s, 6 configs (old round deadline: 3 x 10 = 30 s): rank 1 SIGKILLs itself at
    its third call while rank 0 (a fast key) waits at the round. Rank 0 must end within T + grace of the kill."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    calls = [0]

    @tdt.autotune([{"v": v} for v in range(6)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=3,
                  timing="cold", name="killed_unit")
    def kernel(x, *, v):
        if rank == 1:
            calls[0] += 1
            if calls[0] == 3:
                Path(os.environ["KILLED_AT"]).write_text(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.01)
        return x

    started = time.monotonic()
    try:
        tdt.campaign(kernel, lambda n: torch.ones(n), [8, SLOW_KEY], local=True, progress=False)
    except GroupTimeoutError as exc:
        leave(rank=rank, ok=False, error=str(exc)[:600], ended=time.time(), seconds=time.monotonic() - started)
    leave(rank=rank, ok=True, ended=time.time(), seconds=time.monotonic() - started)


if __name__ == "__main__":
    main()
