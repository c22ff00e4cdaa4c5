"""A job restarted by torchrun on two nodes, and two jobs on one port, run by tests/test_init_distributed.py.

Usage: under ``python -m torch.distributed.run --nnodes 2 ... restart_cases.py CASE`` (two agents), or as ranks with
torchrun's variables set as two agents would set them. Each rank prints ``RESULT {json}`` lines naming the restart
count its agent gave it (and its node, ``GROUP_RANK``, under torchrun).
"""

from __future__ import annotations

import json
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


@case
def notes_on_nodes_that_count_restarts_apart():
    """As :func:`own_init_on_nodes_that_count_restarts_apart` (counts 1 and 0, ``GROUP_WORLD_SIZE`` 2). Rank 0 first
    writes into the job's store the wrong-group note an earlier attempt's rank 1 would have left there (its error,
    posted 30 s before this attempt's processes started, by a process of this host that has ended), about the
    function the ranks then tune with rank 1 3 s late: rank 0 waits for rank 1 and must read that note as the earlier
    attempt's. Then rank 1 calls another function with a wrong ``autotune_pg`` and posts its note; rank 0, calling
    with the right one, must read it at once. Each rank prints both outcomes."""
    from triton_dist_tune.group.note import this_process
    from triton_dist_tune.group.unresolved import EVERY_ATTEMPT

    dist.init_process_group("gloo")
    me = dist.get_rank()
    if me == 0:  # (the key of global rank 1's note, as every rank of this job names it)
        store = dist.distributed_c10d._get_default_store()
        host, pid, start = this_process()
        about = {"about": ["late_after_an_earlier_attempt"], "posted": time.time() - 30,
                 "process": [host, pid, start - 1]}
        store.add(f"{EVERY_ATTEMPT}count", 1)
        store.set(f"{EVERY_ATTEMPT}1", f"1.99\n{json.dumps(about)}\nBadInputError: an earlier attempt's error")
    dist.barrier()
    if me == 1:
        time.sleep(3)
    outcome = {"late": _tune_all_reducing("late_after_an_earlier_attempt")}

    @tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=1, name="wrong_pg")
    def g(x, *, v):
        return x * v

    t0 = time.monotonic()
    try:
        g(torch.ones(4), autotune_pg="not a group" if me == 1 else dist.group.WORLD)
        outcome["wrong"] = {"error": None}
    except tdt.AutotuneError as exc:
        outcome["wrong"] = {"error": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - t0}
    emit(restart=os.environ["TORCHELASTIC_RESTART_COUNT"], **outcome)
    dist.barrier()


@case
def init_again_after_destroy():
    """Every rank starts torch.distributed with ``init_distributed``, destroys the group and starts it again (a
    program that runs two phases, or a test fixture), then all-reduces and prints the sum and how long the second
    start took, or its error."""
    tdt.init_distributed(backend="gloo", timeout_s=60)
    dist.barrier()
    dist.destroy_process_group()
    t0 = time.monotonic()
    try:
        tdt.init_distributed(backend="gloo", timeout_s=60)
    except Exception as exc:
        emit(error=f"{type(exc).__name__}: {exc}"[:400], seconds=time.monotonic() - t0)
        return
    x = torch.ones(1)
    dist.all_reduce(x)
    emit(sum=x.item(), seconds=time.monotonic() - t0)
    dist.destroy_process_group()



@case
def all_reduce_own_value():
    """A rank of one of two jobs meeting on one host (tests/test_init_distributed.py): ``init_distributed``, then an
    all-reduce of its job's ``JOB_VALUE``; prints the sum, or the error and how long it took to come. Where
    ``GO_FILE`` is set, it starts once that file exists (at most 60 s later), having touched ``READY_FILE`` first
    where that is set (its imports done: a test starting a fresh interpreter beside forks waits for every process's
    before it touches ``GO_FILE``, so that no process times its start across another's imports); where ``UP_FILE``
    is, it touches it once it printed, then, where ``HOLD_FILE`` is, waits for that file before it ends (within
    the same 60 s); where ``LATE_RANK`` is this rank, it sleeps ``LATE_S`` seconds first (a rank late to its
    ``init_distributed``); where ``ARRIVE_FILE`` is set, it touches that path with ``.PID`` added as its start's
    check of its rank's claim begins (a test then knows it is in that check: ``group/claims.py``
    ``Claims.arrive``); where ``CLAIMED_FILE`` is set, it touches that file once it has claimed its rank in the
    start, and stalls there (``Claims.claim``)."""
    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "-1")))
    if os.environ.get("ARRIVE_FILE"):
        from triton_dist_tune.group import claims

        arrive = claims.Claims.arrive

        def arriving(self):
            Path(f"{os.environ['ARRIVE_FILE']}.{os.getpid()}").touch()
            return arrive(self)

        claims.Claims.arrive = arriving
    if os.environ.get("CLAIMED_FILE"):  # (a test kills this process once it has claimed its rank, before it confirms)
        from triton_dist_tune.group import claims

        claim = claims.Claims.claim

        def claimed(self, name):
            claim(self, name)
            Path(os.environ["CLAIMED_FILE"]).touch()
            time.sleep(60)

        claims.Claims.claim = claimed
    if os.environ.get("LATE_RANK") == str(rank):
        time.sleep(float(os.environ["LATE_S"]))
    if os.environ.get("READY_FILE"):
        Path(os.environ["READY_FILE"]).touch()
    deadline = time.monotonic() + 60
    while os.environ.get("GO_FILE") and not Path(os.environ["GO_FILE"]).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    t0 = time.monotonic()
    try:
        tdt.init_distributed(backend="gloo", timeout_s=60)
    except Exception as exc:
        emit(rank=rank, error=type(exc).__name__, message=str(exc), seconds=time.monotonic() - t0)
        return
    x = torch.tensor([float(os.environ["JOB_VALUE"])])
    dist.all_reduce(x)
    emit(rank=rank, sum=x.item(), port=os.environ.get("MASTER_PORT"))
    if os.environ.get("UP_FILE"):  # (a test starts another job while this one holds its store)
        Path(os.environ["UP_FILE"]).touch()
    while os.environ.get("HOLD_FILE") and not Path(os.environ["HOLD_FILE"]).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
