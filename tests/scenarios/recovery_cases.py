"""Recovery scenarios (issue 17) run as real ranks by tests/test_recovery.py; the fault-injected ``tune`` case
lives in fault_cases.py.

- ``two_threads``: two threads tune two functions at once on two groups; ``hang`` (config 1 of the first) sleeps
  for an hour on every rank once the second thread is about to start. Only the first tuning's own deadline ends it.
- ``sharded_poison``: ``sharded=True`` on a rank-local function; config 1 raises the error torch raises after an
  illegal memory access on rank 1 (its share), while rank 0 measures a slow share of its own.
- ``sharded_slow_share``: ``sharded=True``; rank 1's share is slow but healthy, each of its phases within the
  timeout, the whole share not.
- ``slow_warmup``: config 1's warm-up takes longer than the timeout in all, each of its runs well within it.
- ``sharded_killed``: ``sharded=True`` over 8 configs; rank 1 is killed (SIGKILL) in its share's first config, while
  rank 0 measures its own share and then waits at the exchange of sharded results.
- ``sharded_killed_then_resumed``: the same on 4 configs, then a second attempt on the same cache, which measures
  only what the first did not (a share's measured config is final).
- ``killed_in_steady_round``: lock-step; rank 1 is killed (SIGKILL) in a steady round, its samples queued, while
  rank 0 waits at the round's one exchange.
- ``replicas_slow_share``: ``autotune_replicas`` over two one-rank groups; replica 1's share (config 1) is slow but
  healthy, each of its runs within the timeout, the whole share not.
- ``replicas_cancelled``: the same layout; replica 1's share raises ``asyncio.CancelledError`` and the rank lives on.
- ``cancelled``: a rank-local function's config 1 raises ``asyncio.CancelledError`` (a ``BaseException``, not an
  ``Exception``: a task cancelled around the call) on rank 1, in a steady round of the race; rank 1 catches it, as an
  event loop would, and stays alive; rank 0 waits at the round's exchange.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time

import _cases
import torch
import torch.distributed as dist
from _cases import case, main

import triton_dist_tune as tdt


@case
def two_threads():
    tdt.init_distributed()
    pair = dist.new_group([0, 1])
    hanging = threading.Event()

    @tdt.autotune(config_space=[{"v": 0}, {"v": 1}], key_fn=lambda x: 0, n_warmup=1, n_repeat=1, timing="cold",
                  name="first")
    def first(x, *, v):
        if v == 1:
            hanging.set()
            time.sleep(3600)  # a hung kernel: only this tuning's deadline ends it
        return x + v

    @tdt.autotune(config_space=[{"v": v} for v in range(3)], key_fn=lambda x: 0, n_warmup=1, n_repeat=2,
                  timing="cold", name="second")
    def second(x, *, v):
        time.sleep(0.05)
        return x + v

    def tune_second():
        hanging.wait(60)
        second(torch.ones(2), autotune_pg=pair)  # arms and disarms its own deadline while the first one hangs
        _cases.emit(rank=dist.get_rank(), second_done=time.time())

    other = threading.Thread(target=tune_second)
    other.start()
    first(torch.ones(2), autotune_pg=dist.group.WORLD)
    _cases.emit(rank=dist.get_rank(), first_done=True)  # never: config 1 hangs
    other.join()


@case
def sharded_poison():
    tdt.init_distributed()
    me = dist.get_rank()

    @tdt.autotune(config_space=[{"v": v} for v in range(6)], key_fn=lambda x: 0, n_warmup=1, n_repeat=2,
                  timing="cold", sharded=True, name="sharded")
    def local(x, *, v):
        if v == 1 and me == 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered (injected)")
        time.sleep(0.3 if me == 0 else 0.01)
        return x + v

    t0 = time.time()
    try:
        local(torch.ones(2))
        _cases.emit(rank=me, error=None)
    except tdt.AutotuneError as exc:
        _cases.emit(rank=me, error=type(exc).__name__, message=str(exc), seconds=time.time() - t0)
    dist.barrier()
    os._exit(0)


@case
def sharded_collective():
    """``sharded=True`` on a function whose calls all-reduce (a misuse): the ranks measure different shares alone,
    so one is left inside an all_reduce no other rank joins, and its watchdog ends it."""
    tdt.init_distributed()

    @tdt.autotune(config_space=[{"v": v} for v in range(3)], key_fn=lambda x: 0, n_warmup=1, n_repeat=2,
                  sharded=True, name="sharded_collective")
    def reduced(x, *, v):
        y = x + v
        dist.all_reduce(y)
        return y

    reduced(torch.ones(2))
    _cases.emit(rank=dist.get_rank(), finished=True)


@case
def sharded_slow_share():
    """``sharded=True``: rank 1's share (config 1) is slow but healthy, 1.05 s a call: its warm-up (3 runs and a
    probe of 3 calls, 6.3 s) and its samples (3 of 2 calls, 6.3 s) each end within the timeout (10 s in the test),
    together not."""
    tdt.init_distributed()
    me = dist.get_rank()

    @tdt.autotune(config_space=[{"v": 0}, {"v": 1}], key_fn=lambda x: 0, n_warmup=3, n_repeat=3, sharded=True,
                  name="sharded_slow_share")
    def local(x, *, v):
        time.sleep(1.05 if v == 1 else 0.001)
        return x + v

    t0 = time.monotonic()
    try:
        local(torch.ones(2))
        (decided,) = local.tuner.decided.values()
        _cases.emit(rank=me, chosen=decided["v"], seconds=time.monotonic() - t0)
    except tdt.AutotuneError as exc:
        _cases.emit(rank=me, error=type(exc).__name__, message=str(exc), seconds=time.monotonic() - t0)


@case
def slow_warmup():
    """Config 1's calls take 1.2 s outside the race (its warm-up: 3 runs and a probe of one call, 4.8 s in all) and
    1 ms in the race's steady rounds, config 0's 10 ms (a gap no load closes: its probe sizes config 1's samples at
    one call, whose overhead on a loaded machine read 2 ms against config 0's 2 ms before); every run is well within
    the timeout (4 s in the test), the warm-up is not."""
    tdt.init_distributed()
    me = dist.get_rank()

    @tdt.autotune(config_space=[{"v": 0}, {"v": 1}], key_fn=lambda x: 0, n_warmup=3, n_repeat=3, name="slow_warmup")
    def local(x, *, v):
        time.sleep(1.2 if v == 1 and not _cases.in_steady_round() else (0.001 if v == 1 else 0.010))
        return x + v

    local(torch.ones(2))
    (decided,) = local.tuner.decided.values()
    _cases.emit(rank=me, chosen=decided["v"])


@case
def cancelled():
    tdt.init_distributed()
    me = dist.get_rank()
    runs = [0]

    @tdt.autotune(config_space=[{"v": v} for v in range(3)], key_fn=lambda x: 0, n_warmup=1, n_repeat=10,
                  name="cancelled")
    def local(x, *, v):
        runs[0] += v == 1
        if me == cancelled_rank and v == 1 and _cases.in_steady_round():
            raise asyncio.CancelledError()
        time.sleep(0.002)
        return x + v

    cancelled_rank = int(os.environ.get("CANCELLED_RANK", "1"))
    t0 = time.monotonic()
    try:
        local(torch.ones(2))
        _cases.emit(rank=me, error=None)
    except BaseException as exc:  # what an event loop does with a cancelled task's error
        _cases.emit(rank=me, error=type(exc).__name__, message=str(exc), seconds=time.monotonic() - t0)
    if me == cancelled_rank:
        time.sleep(120)  # alive, as a served process whose task was cancelled: only the others' reaction ends the test
    os._exit(0)


@case
def replicas_hang():
    tdt.init_distributed()
    me = dist.get_rank()
    tps = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    across = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    tp, replicas = tps[me // 2], across[me % 2]

    @tdt.autotune(config_space=[{"v": v} for v in range(4)], key_fn=lambda x: 0, n_warmup=1, n_repeat=2,
                  timing="cold", name="replicas_hang")
    def layer(x, *, v):
        with open(os.path.join(os.environ["FAULT_DIR"], f"calls.rank{me}"), "a") as f:
            f.write(f"{os.environ['RUN']} {v}\n")
        if v == 0 and me == 2:
            time.sleep(3600)  # a hung kernel on replica 1: only the watchdog ends it
        time.sleep([10, 30, 90, 90][v] / 1e3)
        _cases.spend([10, 30, 90, 90][v])
        y = x * (v + 1)
        dist.all_reduce(y, group=tp)
        return y

    # timed on the virtual clock: on the wall clock, the choice of config 1 was two cold samples of 30 against 90 ms
    # on 4 ranks, a gap of 60 ms (as tune_cases' 20 against 80 ms on 4 ranks, which a loaded machine reordered)
    with _cases.virtual_clock():
        out = layer(torch.ones(2), autotune_pg=tp, autotune_replicas=replicas)
    (decided,) = layer.tuner.decided_in.values()
    _cases.emit(rank=me, chosen=decided["v"], out=out.tolist())


def _emit_outcome(me: int, tune) -> None:
    """Emit what ``tune()`` returns (a dict), or its AutotuneError, and the seconds it took."""
    t0 = time.monotonic()
    try:
        _cases.emit(rank=me, error=None, **tune(), seconds=time.monotonic() - t0)
    except tdt.AutotuneError as exc:
        _cases.emit(rank=me, error=type(exc).__name__, message=str(exc), seconds=time.monotonic() - t0)


@case
def sharded_killed():
    """``sharded=True``, 8 configs (a share of 4 per rank); rank 1 kills itself in its first config."""
    tdt.init_distributed()
    me = dist.get_rank()

    @tdt.autotune(config_space=[{"v": v} for v in range(8)], key_fn=lambda x: 0, n_warmup=1, n_repeat=2,
                  sharded=True, name="sharded_killed")
    def local(x, *, v):
        if me == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # a process the OOM killer took
        time.sleep(0.002)
        return x + v

    _emit_outcome(me, lambda: {"out": local(torch.ones(2)).tolist()})
    os._exit(0)  # no closing barrier: rank 1 is gone


@case
def sharded_killed_then_resumed():
    """``sharded=True``, 4 configs on 2 ranks (rank 0's share 0 and 2, rank 1's 1 and 3). Attempt ``0`` (argv):
    rank 1 kills itself as it starts config 3, its config 1 measured and journaled; rank 0 measures its share and
    gives up at the exchange. Attempt ``1``, on the same cache: every rank emits the configs it ran."""
    attempt = int(sys.argv[2])
    tdt.init_distributed()
    me = dist.get_rank()
    ran: list[int] = []

    @tdt.autotune(config_space=[{"v": v} for v in range(4)], key_fn=lambda x: 0, n_warmup=1, n_repeat=2,
                  sharded=True, name="sharded_resumed")
    def local(x, *, v):
        if attempt == 0 and me == 1 and v == 3:
            os.kill(os.getpid(), signal.SIGKILL)  # a process the OOM killer took, its first config journaled
        if v not in ran:
            ran.append(v)
        time.sleep(0.002)
        return x + v

    _emit_outcome(me, lambda: {"chosen": next(iter(local.tuner.decisions.values())).index, "ran": ran}
                  if local(torch.ones(2)) is not None else {})
    os._exit(0)  # no closing barrier: in attempt 0 rank 1 is gone


@case
def killed_in_steady_round():
    """Lock-step, 8 configs; rank 1 kills itself in the first steady round, at its last config's sample (the round's
    one exchange waits T for each of its 8 samples)."""
    tdt.init_distributed()
    me = dist.get_rank()
    steps = set()

    @tdt.autotune(config_space=[{"v": v} for v in range(8)], key_fn=lambda x: 0, n_warmup=1, n_repeat=10,
                  name="killed_in_steady_round")
    def local(x, *, v):
        if me == 1 and _cases.in_steady_round():
            steps.add(v)
            if len(steps) == 8:  # the round's last sample
                os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.002)
        return x + v

    _emit_outcome(me, lambda: {"out": local(torch.ones(2)).tolist()})
    os._exit(0)  # no closing barrier: rank 1 is gone


def _one_rank_replicas() -> tuple[int, object, object]:
    """This rank, its own one-rank tensor-parallel group, and the group linking both ranks as replicas."""
    tdt.init_distributed()
    me = dist.get_rank()
    tps = [dist.new_group([0]), dist.new_group([1])]
    return me, tps[me], dist.new_group([0, 1])


@case
def replicas_slow_share():
    """Two replicas of one rank each; config 1 takes 0.8 s a call (every rank): replica 1's share, its warm-up (3
    runs and a probe) and its samples, takes about 10 s, each run well within the timeout (4 s in the test), while
    replica 0's share (config 0, 1 ms a call) ends at once and waits for it at the exchange across replicas."""
    me, tp, across = _one_rank_replicas()

    @tdt.autotune(config_space=[{"v": 0}, {"v": 1}], key_fn=lambda x: 0, n_warmup=3, n_repeat=3,
                  name="replicas_slow_share")
    def layer(x, *, v):
        time.sleep(0.8 if v == 1 else 0.001)
        return x + v

    def tune() -> dict:
        layer(torch.ones(2), autotune_pg=tp, autotune_replicas=across)
        (decided,) = layer.tuner.decided_in.values()
        return {"chosen": decided["v"]}

    _emit_outcome(me, tune)


@case
def replicas_cancelled():
    """Two replicas of one rank each; replica 1's share (config 1) raises ``asyncio.CancelledError`` in a steady round
    on rank 1, which catches it, as an event loop would, and lives on; rank 0 waits at the exchange across
    replicas."""
    me, tp, across = _one_rank_replicas()

    @tdt.autotune(config_space=[{"v": 0}, {"v": 1}], key_fn=lambda x: 0, n_warmup=1, n_repeat=10,
                  name="replicas_cancelled")
    def layer(x, *, v):
        if me == 1 and _cases.in_steady_round():
            raise asyncio.CancelledError()
        time.sleep(0.002)
        return x + v

    t0 = time.monotonic()
    try:
        layer(torch.ones(2), autotune_pg=tp, autotune_replicas=across)
        _cases.emit(rank=me, error=None)
    except BaseException as exc:
        _cases.emit(rank=me, error=type(exc).__name__, message=str(exc), seconds=time.monotonic() - t0)
    if me == 1:
        time.sleep(120)  # alive: only rank 0's own reaction ends the test
    os._exit(0)


if __name__ == "__main__":
    main()
