"""The process hosting the job's key-value store frozen (SIGSTOP) in the middle of a tuning, run as real ranks by
tests/test_frozen_host.py (found by ``benchmarks/chaos.py``: seeds 2107977240 and 824312892).

Ranks are started without torchrun (``tests/harness.run_ranks``): global rank 0's process hosts the store. Rank 0
stops itself (``SIGSTOP``) at its ``AT_CALL``-th call of config 1 (1: its warm-up; 2: its first sample), before the
function's all_reduce (``COLLECTIVE=1``: the other ranks wait for it inside that all_reduce) or in a function without
one (the other ranks finish the config's run and wait for rank 0 at the exchange after it). Each other rank prints
``RESULT`` with its error and when it ended (``ended``, the same clock as ``$FAULT_DIR/frozen``, written by rank 0
just before it stops).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt


@case
def frozen_host():
    tdt.init_distributed()
    me, collective, at = dist.get_rank(), os.environ.get("COLLECTIVE") == "1", int(os.environ.get("AT_CALL", "1"))
    calls = [0]

    @tdt.autotune(config_space=[{"v": v} for v in range(3)], key_fn=lambda x: tuple(x.shape), n_warmup=1,
                  n_repeat=2, timing="cold", name="frozen")
    def work(x: torch.Tensor, *, v: int) -> torch.Tensor:
        calls[0] += v == 1
        if me == 0 and v == 1 and calls[0] == at:
            Path(os.environ["FAULT_DIR"], "frozen").write_text(repr(time.time()))
            os.kill(os.getpid(), signal.SIGSTOP)
        y = x * (v + 1)
        if collective:
            dist.all_reduce(y)
        return y

    try:
        work(torch.ones(4))
        emit(rank=me, error=None, ended=time.time())
    except tdt.AutotuneError as exc:
        emit(rank=me, error=type(exc).__name__, message=str(exc), ended=time.time())
        os._exit(3)  # no barrier: rank 0 never comes


@case
def frozen_host_in_a_campaign():
    """A campaign of 4 keys on 2 ranks, each a unit of one rank (``local=True``: no failure board, the rounds
    watched by a progress watch): rank 0 (the store's host) stops itself inside its second key's tuning, 2 s after
    it began that key's config 1 (so that rank 1 is past the exchange after the first round), and rank 1, its own
    second key tuned, waits for it at the round."""
    tdt.init_distributed()
    me, keys = dist.get_rank(), []

    @tdt.autotune(config_space=[{"v": v} for v in range(3)], key_fn=lambda x: tuple(x.shape), n_warmup=1,
                  n_repeat=2, timing="cold", name="frozen_campaign")
    def work(x: torch.Tensor, *, v: int) -> torch.Tensor:
        if me == 0 and v == 1 and tuple(x.shape) not in keys:
            keys.append(tuple(x.shape))
            if len(keys) == 2:
                time.sleep(2.0)
                Path(os.environ["FAULT_DIR"], "frozen").write_text(repr(time.time()))
                os.kill(os.getpid(), signal.SIGSTOP)
        return x * (v + 1)

    try:
        tdt.campaign(work, lambda n: (torch.ones(n),), keys=[4, 8, 12, 16], local=True, progress=False)
        emit(rank=me, error=None, ended=time.time())
    except tdt.AutotuneError as exc:
        emit(rank=me, error=type(exc).__name__, message=str(exc), ended=time.time())
        os._exit(3)  # no barrier: rank 0 never comes

if __name__ == "__main__":
    main()
