"""Multi-rank scenarios for ``autotune``, run as real processes by tests/test_tune_dist.py.

Usage: python tune_cases.py CASE  (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, or under mpiexec for
``mpi_*`` cases). Each rank prints ``RESULT {json}`` lines.
"""

from __future__ import annotations

import collections
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main, spend, virtual_clock

import triton_dist_tune as tdt

# Sleep times in ms per (rank, config): alone, rank 0 would pick config 0 and rank 1 config 1; the group max
# (320, 80, 10) is least for config 2 (by 8x and 70 ms), then config 1 (by 4x and 240 ms, for the cases where config 2
# fails). 16 against 32 ms did not survive the stalls of a loaded machine, nor did 20 against 80 ms from 3 samples
# on 4 ranks (agree, when on the wall clock); 80 against 240 ms (3x) was a 2-sample choice below 4x.
SLEEP_MS = {0: [5, 80, 10], 1: [320, 5, 10], 2: [5, 80, 10], 3: [320, 5, 10]}


def sleepy_space():
    return [{"variant": v} for v in range(3)]


def make_sleepy(name="sleepy", collective=True, **options):
    @tdt.autotune(config_space=sleepy_space(), key_fn=lambda x, **k: tuple(x.shape), n_warmup=1, n_repeat=3,
                  name=name, **options)
    def sleepy(x, *, variant, group=None):
        rank = dist.get_rank() if dist.is_initialized() else 0
        time.sleep(SLEEP_MS[rank % 4][variant] / 1e3)
        spend(SLEEP_MS[rank % 4][variant])  # the time it takes on the virtual clock, where a case uses it
        y = x * (variant + 1)
        if collective and dist.is_initialized():
            dist.all_reduce(y, group=group)
        return y

    return sleepy


@case
def agree():
    """Each rank alone would choose differently; the group must agree on config 2 for every key. Timed on the
    virtual clock: under load the group once chose config 1 (4x slower) at the second key."""
    tdt.init_distributed()
    sleepy = make_sleepy()
    for n in (4, 8):
        with virtual_clock():
            out = sleepy(torch.ones(n))
        emit(key=n, chosen=sleepy.tuner.decided[(n,)]["variant"], out=out.tolist())
    t0 = time.perf_counter()
    for _ in range(1000):
        sleepy.tuner.decided[(4,)]  # noqa: B018 (sanity: decided keys stay)
    emit(hot=(time.perf_counter() - t0))


@case
def cache_reuse():
    """Second process: must load from disk (no tuning run): every config counter stays 1 (final call only). Timed
    on the virtual clock: two samples of 10 against 80 ms (the group's max) in each of the test's four tunings."""
    tdt.init_distributed()
    calls = []

    @tdt.autotune(config_space=sleepy_space(), key_fn=lambda x: tuple(x.shape), n_warmup=1, n_repeat=2,
                  batch=1, name="reuse")
    def f(x, *, variant):
        calls.append(variant)
        time.sleep(SLEEP_MS[dist.get_rank() % 4][variant] / 1e3)
        spend(SLEEP_MS[dist.get_rank() % 4][variant])
        return x + variant

    with virtual_clock():
        f(torch.zeros(3))
    emit(calls=calls, chosen=f.tuner.decided[(3,)]["variant"])


@case
def subgroups():
    """4 ranks, two groups {0,1} and {2,3}, each tuning on its own through autotune_pg. Timed on the virtual clock,
    as agree: 4 ranks on a loaded 2-core machine are where agree's group once chose a config 4x slower."""
    tdt.init_distributed()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = groups[dist.get_rank() // 2]
    sleepy = make_sleepy(name="sub")
    with virtual_clock():
        out = sleepy(torch.ones(2), group=mine, autotune_pg=mine)
    emit(chosen=[c["variant"] for c in sleepy.tuner.decided_in.values()], out=out.tolist())


@case
def fail_one_rank():
    """Config 2 (the group's best) raises on rank 1 only: every rank must leave it out and choose the same (config
    1, timed on the virtual clock: two samples of 80 against 320 ms)."""
    tdt.init_distributed()

    @tdt.autotune(config_space=sleepy_space(), key_fn=lambda x: 0, n_warmup=1, n_repeat=2, name="failone")
    def f(x, *, variant):
        if variant == 2 and dist.get_rank() == 1:
            raise RuntimeError("out of resources on rank 1")
        time.sleep(SLEEP_MS[dist.get_rank() % 4][variant] / 1e3)
        spend(SLEEP_MS[dist.get_rank() % 4][variant])
        return x

    with virtual_clock():
        f(torch.zeros(1))
    rows = f.tuner.tables[next(iter(f.tuner.tables))]
    emit(chosen=f.tuner.decided[0]["variant"], states=[r["state"] for r in rows], errors=[r.get("error") for r in rows])


@case
def fail_mid_warmup():
    """Config 2 raises on rank 1 in its second warmup run, after the function's all_reduce: the other ranks must
    not enter the third run's all_reduce alone (they would wait there until the watchdog). Timed on the virtual
    clock, as ``fail_one_rank``."""
    tdt.init_distributed()
    calls = collections.Counter()

    @tdt.autotune(config_space=sleepy_space(), key_fn=lambda x: 0, n_warmup=3, n_repeat=2, name="midwarmup")
    def f(x, *, variant):
        calls[variant] += 1
        time.sleep(SLEEP_MS[dist.get_rank() % 4][variant] / 1e3)
        spend(SLEEP_MS[dist.get_rank() % 4][variant])
        dist.all_reduce(x.clone())
        if variant == 2 and dist.get_rank() == 1 and calls[variant] == 2:
            raise RuntimeError("failed in the second warmup run on rank 1")
        return x

    with virtual_clock():
        f(torch.zeros(1))
    rows = f.tuner.tables[next(iter(f.tuner.tables))]
    emit(chosen=f.tuner.decided[0]["variant"], states=[r["state"] for r in rows], calls=calls[2])


@case
def all_fail():
    tdt.init_distributed()

    @tdt.autotune(config_space=sleepy_space(), key_fn=lambda x: 0, n_warmup=1, n_repeat=1, name="allfail")
    def f(x, *, variant):
        if dist.get_rank() == variant % 2:
            raise ValueError(f"bad variant {variant}")
        return x

    try:
        f(torch.zeros(1))
        emit(error=None)
    except tdt.AllConfigsFailedError as exc:
        emit(error=type(exc).__name__, message=str(exc))


@case
def key_mismatch():
    tdt.init_distributed()
    sleepy = make_sleepy(name="mismatch", collective=False)
    try:
        sleepy(torch.ones(2 + dist.get_rank()))
        emit(error=None)
    except tdt.MismatchError as exc:
        emit(error=type(exc).__name__, message=str(exc))


@case
def bad_input():
    """Each bad input raises the same clear error on every rank."""
    tdt.init_distributed()
    rank = dist.get_rank()
    seen = {}

    def attempt(label, call):
        try:
            call()
            seen[label] = None
        except tdt.AutotuneError as exc:
            seen[label] = type(exc).__name__

    def flaky_key(x):
        if rank == 1:
            raise KeyError("no key on rank 1")
        return 1

    f1 = tdt.autotune(sleepy_space(), key_fn=flaky_key, name="bad1")(lambda x, *, variant: x)
    attempt("key_fn_raises", lambda: f1(0))
    f2 = tdt.autotune(sleepy_space(), key_fn=lambda x: [x], name="bad2")(lambda x, *, variant: x)
    attempt("unhashable_key", lambda: f2(0))
    f3 = tdt.autotune(sleepy_space(), key_fn=lambda x, **k: 0, prune_fn=lambda c, x, **k: c["variant"] != rank,
                      name="bad3")(lambda x, **k: x)
    attempt("prune_all_on_some_rank", lambda: f3(0))  # rank r removes config r: config 2 survives with 2 ranks
    f4 = tdt.autotune(sleepy_space(), key_fn=lambda x, **k: 0, prune_fn=lambda c, x, **k: False,
                      name="bad4")(lambda x, **k: x)
    attempt("prune_removes_all", lambda: f4(0))
    f5 = tdt.autotune(sleepy_space(), key_fn=lambda x, **k: 0, name="bad5")(lambda x, **k: x)
    attempt("clash", lambda: f5(0, variant=1))
    for label in ("empty_space", "not_a_list"):
        try:
            tdt.autotune([] if label == "empty_space" else {"a": 1}, key_fn=lambda x: 0)(lambda x: x)
            seen[label] = None
        except tdt.BadInputError as exc:
            seen[label] = type(exc).__name__
    emit(**seen)


@case
def cache_dirs():
    """Ranks whose cache folders differ: only rank 0's is read, so all ranks follow it (timed on the virtual
    clock, as ``agree``)."""
    tdt.init_distributed()
    sleepy = make_sleepy(name="dirs", collective=False)
    with virtual_clock():
        sleepy(torch.ones(5))
    emit(chosen=sleepy.tuner.decided[(5,)]["variant"], folder=str(sleepy.tuner.cache.folder))


@case
def seconds_per_rank():
    """Two "nodes" (each rank its own cache folder and local rank 0): a call tunes key (5,), then a campaign keys (6,)
    and (7,). What each rank holds of each decision, and the records its folder holds."""
    import json
    import os

    tdt.init_distributed()
    sleepy = make_sleepy(name="seconds", collective=True)
    sleepy(torch.ones(5))
    tdt.campaign(sleepy, [torch.ones(6), torch.ones(7)], progress=False)
    decisions = {}
    for (_, key), d in sleepy.tuner.decisions.items():
        agreed = [d.index, d.config, d.time, d.margin, d.near_tie, d.runner_up, d.rounds, d.statistic, d.search,
                  [[o.index, o.state, o.time, o.spread, o.per_rank, o.round_times] for o in d.outcomes]]
        decisions[str(key)] = {"agreed": agreed, "seconds": d.seconds}
    folder = sleepy.tuner.cache.folder
    records = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = json.loads(path.read_text())
        records[data["key"]] = {"file": path.name, "tuning_seconds": data["tuning_seconds"]}
    emit(decisions=decisions, records=records, local_rank=os.environ["LOCAL_RANK"])

@case
def mpi_agree():
    """Under mpiexec with an mpi4py communicator (no torch.distributed at all)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    calls = []

    @tdt.autotune(config_space=sleepy_space(), key_fn=lambda x: x, n_warmup=1, n_repeat=2, batch=1, name="mpi")
    def f(x, *, variant):
        calls.append(variant)
        time.sleep(SLEEP_MS[comm.Get_rank() % 4][variant] / 1e3)
        spend(SLEEP_MS[comm.Get_rank() % 4][variant])
        return comm.allreduce(x * variant)

    with virtual_clock():  # (as agree)
        out = f(1, autotune_pg=comm)
    emit(chosen=next(iter(f.tuner.decided_in.values()))["variant"], out=out, calls=len(calls))


@case
def single():
    """No torch.distributed: a single process tunes alone (wide gaps: 5 vs 80 vs 100 ms, robust under load)."""
    SLEEP_MS[0] = [5, 100, 80]
    sleepy = make_sleepy(name="single", collective=False)
    out = sleepy(torch.ones(2), autotune_verbose=True)
    emit(chosen=sleepy.tuner.decided[(2,)]["variant"], out=out.tolist())


@case
def clean_exit():
    """A tuning, destroy_process_group and a normal interpreter exit (no os._exit): the threads still alive when
    the interpreter finalizes are listed by an exit hook that runs after every other one."""
    import atexit
    import os
    import sys
    import threading

    def name_of(task: str) -> str | None:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                return f.read().strip()
        except FileNotFoundError:  # an OS thread of torch's (gloo, timers) ended between the listing and the read
            return None

    def report():
        tasks = sorted(filter(None, map(name_of, os.listdir("/proc/self/task"))))
        emit(python_threads=[t.name for t in threading.enumerate()], os_threads=tasks)

    atexit.register(report)  # registered first: runs last
    tdt.init_distributed()
    sleepy = make_sleepy(name="exit")
    sleepy(torch.ones(2))
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()
