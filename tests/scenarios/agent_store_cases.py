"""A tuning under torchrun whose agent (the host of the job's key-value store) is killed mid-tuning, run by
tests/test_agent_store.py.

Usage: ``python agent_store_cases.py tune`` under torchrun. Every call of the tuned function (no collective
inside: the ranks meet at the tuner's exchanges, which use the store) sleeps ``SLEEP_S``; the first one writes
``ready.rank<r>`` (this process's pid) into ``AGENT_DIR``, so that the test kills the agent while the ranks tune.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt


@case
def tune() -> None:
    tdt.init_distributed()
    rank, folder = dist.get_rank(), Path(os.environ["AGENT_DIR"])

    @tdt.autotune([{"v": v} for v in range(4)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=50)
    def work(x: torch.Tensor, *, v: int) -> torch.Tensor:
        ready = folder / f"ready.rank{rank}"
        if not ready.exists():
            ready.write_text(str(os.getpid()))
        time.sleep(float(os.environ.get("SLEEP_S", "0.2")))
        return x + v

    work(torch.ones(8))
    emit(rank=rank, finished=True)  # not reached: the store goes with the agent first


if __name__ == "__main__":
    main()
