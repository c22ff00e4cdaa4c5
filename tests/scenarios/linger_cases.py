"""Multi-rank scenarios of the store host's wait at exit (``group/exits.py``), run by tests/test_linger.py.

Usage: python linger_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set: no torchrun agent, so global
rank 0's process hosts the store). Each rank prints ``RESULT {json}`` lines; rank 0 logs the ``triton_dist_tune``
logger at DEBUG on stderr, where its wait at exit says how it ended. Every case ends its ranks by themselves (no
barrier of ``_cases.main``: a peer is gone); rank 0 ends with a normal exit, through its exit hooks.

- ``watchdog_ends_a_peer``: a tuning whose config 1 hangs on rank 1 (``TRITON_DIST_AUTOTUNE_TIMEOUT`` small): rank
  1's watchdog ends its process (exit status 86); rank 0 catches its tuning's error and exits normally.
- ``peer_killed``: after a gloo barrier rank 1 SIGKILLs itself (0.3 s later); rank 0 exits normally at once.
- ``peer_killed_mid_tuning``: lock-step, 8 configs; rank 1 SIGKILLs itself at its last sample of the first steady
  round (the round's one exchange waits T for each of its 8 samples, the beat's window is T + max(1, T/10)); rank 0
  gives up on it at that exchange once its failure board's beat has stood still for the window (GroupTimeoutError),
  catches that error and exits normally. The test runs rank 1 in a
  pid namespace of its own, where rank 0 cannot read its process in ``/proc`` (as on another host).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from _cases import case, emit, in_steady_round, main

import triton_dist_tune as tdt


def start() -> int:
    """init_distributed on gloo, rank 0 logging the tuner's DEBUG records on stderr; returns the rank."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    if rank == 0:
        logging.basicConfig(stream=sys.stderr, format="%(message)s")
        logging.getLogger("triton_dist_tune").setLevel(logging.DEBUG)
    return rank


def tuned(kernel) -> dict:
    """What a call of the tuned ``kernel`` did: its result, or its error's type and message."""
    try:
        return {"ok": True, "value": kernel(torch.ones(4)).tolist()}
    except Exception as exc:
        return {"ok": False, "error": type(exc).__name__, "message": str(exc)[:1500]}


def exit_normally(**fields: object) -> None:
    """Emit, then a normal exit: ``sys.exit`` runs the exit hooks (the store host's wait among them)."""
    emit(**fields)
    sys.stdout.flush()
    sys.exit(0)


@case
def watchdog_ends_a_peer():
    rank = start()

    @tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=2,
                  timing="cold", name="linger_watchdog")
    def kernel(x, *, v):
        if v == 1 and rank == 1:
            time.sleep(3600)  # a hung kernel: only the watchdog ends it
        return x + v

    exit_normally(rank=rank, **tuned(kernel))


@case
def peer_killed():
    rank = start()
    dist.barrier()
    if rank == 1:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    exit_normally(rank=rank)


@case
def peer_killed_mid_tuning():
    rank, steps = start(), set()

    @tdt.autotune([{"v": v} for v in range(8)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=10,
                  name="linger_killed")
    def kernel(x, *, v):
        if rank == 1 and in_steady_round():
            steps.add(v)
            if len(steps) == 8:  # the round's last sample
                os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.002)
        return x + v

    exit_normally(rank=rank, **tuned(kernel))


if __name__ == "__main__":
    main()
