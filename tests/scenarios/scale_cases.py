"""Multi-rank scenarios for the control channel's traffic and for multi-node jobs, run by tests/test_scale.py.

Usage: python scale_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, or under torchrun). Each rank
prints ``RESULT {json}`` lines.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt
from triton_dist_tune.group.resolve import resolve_group

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_traffic import count_store  # noqa: E402  (the benchmark's request counter)

BIG = 8  # configs of the big space, each with a 4 KB text


def counted_group():
    tdt.init_distributed(backend="gloo")
    group = resolve_group(None)
    return group, count_store(group)


@case
def traffic():
    """Store requests and bytes of this rank per exchange of each kind, and of a tuning with a big config space."""
    group, store = counted_group()
    calls = {"allgather": lambda i: group.allgather(i, f"allgather {i}"),
             "broadcast": lambda i: group.broadcast(i, f"broadcast {i}"),
             "barrier": lambda i: group.barrier(f"barrier {i}"),
             "combine": lambda i: group.combine(float(i), f"combine {i}", max)}
    counts = {}
    for kind, call in calls.items():
        call(0)
        store.reset()
        for i in range(1, 6):
            call(i)
        counts[kind] = {"requests": store.requests / 5, "bytes": store.bytes / 5}

    @tdt.autotune([{"variant": v, "note": str(v) * 4096} for v in range(BIG)], key_fn=lambda x, **kw: x,
                  n_warmup=0, n_repeat=1, name="traffic")
    def trivial(x, *, variant, note):
        return x + variant

    store.reset()
    trivial(1)
    counts["tuning"] = {"requests": store.requests, "bytes": store.bytes,
                        "space_chars": len(trivial.tuner.space_text)}
    emit(rank=group.rank, size=group.size, counts=counts)


@case
def late():
    """Rank 2 of 4 never comes to the second barrier: every other rank raises GroupTimeoutError naming it."""
    group = resolve_group(tdt.init_distributed(backend="gloo"))
    group.barrier("first barrier")
    if group.rank == 2:
        emit(rank=2, error=None)
        return
    try:
        group.barrier("second barrier", timeout=3)
        emit(rank=group.rank, error=None)
    except tdt.GroupTimeoutError as exc:
        emit(rank=group.rank, error=type(exc).__name__, message=str(exc))


@case
def nested_boards():
    """A board opened inside another's tuning (an ``autotune`` tuning in a ``contextual_autotune`` call on the same
    group): the group's waits read the inner one, then the outer one again once the inner closes."""
    group = resolve_group(tdt.init_distributed(backend="gloo"))
    outer = group.board()
    inner = group.board(10.0)
    seen = [group._board is inner]
    inner.close()
    seen.append(group._board is outer)
    outer.close()
    seen.append(group._board is None)
    emit(rank=group.rank, seen=seen)


@case
def store_stays_small():
    """The store holds no more tuner keys after 60 exchanges than after 10."""
    group = resolve_group(tdt.init_distributed(backend="gloo"))
    from torch.distributed import distributed_c10d as c10d

    store = c10d._get_default_store()
    counts = []
    for total in (10, 60):
        while group._seq < total:
            group.allgather(group._seq, "exchange")
        group.barrier("count")  # every rank is past its own keys' deletion of the rounds before
        counts.append(store.num_keys())
    emit(rank=group.rank, keys=counts)


@case
def tunings_leave_no_keys():
    """The store holds no more keys after 8 tunings (each its own key: a failure board, beats, exchanges) than after
    2, nor after 2 sharded tunings (a progress watch each) more than before them."""
    tdt.init_distributed(backend="gloo")
    group = resolve_group(None)
    from torch.distributed import distributed_c10d as c10d

    store = c10d._get_default_store()

    def tuned(sharded: bool):
        @tdt.autotune([{"v": v} for v in range(3)], key_fn=lambda x: x, n_warmup=1, n_repeat=2, timing="cold",
                      sharded=sharded, name=f"keys_{sharded}")
        def work(x, *, v):
            return x + v

        return work

    work, counts = tuned(False), []
    for keys in ((0, 1), tuple(range(2, 8))):
        for key in keys:
            work(key)
        group.barrier("count")  # every rank is past its own deletions of the tunings before
        counts.append(store.num_keys())
    work = tuned(True)
    for key in (0, 1):
        work(key)
    group.barrier("count")
    counts.append(store.num_keys())
    emit(rank=group.rank, keys=counts)


SLEEP_MS = [80, 100, 5]  # config 2 is clearly the fastest on every rank (by 75 ms: more than a stall under load)


@case
def multinode():
    """Under two torchrun agents (one per "node"): tune on the whole job, or reuse the cache of an earlier job."""
    tdt.init_distributed(backend="gloo")
    calls = []

    @tdt.autotune([{"variant": v} for v in range(3)], key_fn=lambda x, **kw: x, n_warmup=1, n_repeat=3,
                  name="multinode")
    def work(x, *, variant):
        calls.append(variant)
        time.sleep(SLEEP_MS[variant] / 1e3)
        return x + variant

    out = work(10)
    emit(rank=dist.get_rank(), node=os.environ.get("NODE"), out=out, calls=calls,
         chosen=work.tuner.decided[10]["variant"])


TP = 2  # ranks per tensor-parallel group: groups [0, 1], [2, 3], ...; replica j holds global ranks 2j and 2j + 1
N_CONFIGS = 16


def replica_sleep_ms(replica: int, variant: int) -> float:
    """Config 0 is the fastest on replica 0 but slow on replica 1; config 1 is second everywhere. The gaps (5, 40,
    90 and 150 ms) are 35 ms or more, over several samples: wider than a stall of a loaded machine."""
    if variant == 0:
        return 150.0 if replica == 1 else 5.0
    return 40.0 if variant == 1 else 90.0


@case
def replicas():
    """TP groups of 2 ranks, replicated world/2 times. ``MODE`` is a comma-separated list of tunings run one after
    another in this job, each of its own function (so its own cache folder): ``replicas`` tunes the TP groups as one
    layout (function ``replicas``), ``mesh`` the same with the groups of a DeviceMesh (``replicas_mesh``),
    ``independent`` lets every TP group tune alone (``replicas_alone``: a subgroup-only job, as before replicas
    existed). One ``RESULT`` per mode, in order."""
    tdt.init_distributed(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tp_groups = [dist.new_group(list(range(s, s + TP))) for s in range(0, world, TP)]
    replica_groups = [dist.new_group(list(range(p, world, TP))) for p in range(TP)]
    replica = rank // TP
    names = {"replicas": "replicas", "mesh": "replicas_mesh", "independent": "replicas_alone"}
    for mode in os.environ["MODE"].split(","):
        if mode == "mesh":  # the same layout as a DeviceMesh with named dimensions
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh("cpu", (world // TP, TP), mesh_dim_names=("dp", "tp"))
            tp, across = mesh.get_group("tp"), mesh.get_group("dp")
        else:
            tp, across = tp_groups[rank // TP], replica_groups[rank % TP]
        calls = []

        @tdt.autotune([{"variant": v} for v in range(N_CONFIGS)], key_fn=lambda x, **kw: tuple(x.shape), n_warmup=1,
                      n_repeat=3, name=names[mode])
        def layer(x, *, variant):
            calls.append(variant)
            time.sleep(replica_sleep_ms(replica, variant) / 1e3)
            y = x * (variant + 1)
            dist.all_reduce(y, group=tp)
            return y

        import torch

        extra = {} if mode == "independent" else {"autotune_replicas": across}
        out = layer(torch.ones(4), autotune_pg=tp, **extra)
        emit(mode=mode, rank=rank, replica=replica, calls=calls, out=out.tolist(),
             chosen=next(iter(layer.tuner.decided_in.values()))["variant"])


@case
def late_ranks_looked_up():
    """4 ranks, a beating failure board open (as in a tuning): rank 3 comes to an exchange 5 s after the others,
    which wait. How many times a waiting rank looked up its late ranks (a store request per rank each time), and how
    many 1 s slices it waited."""
    from triton_dist_tune.group.store import StoreGroup

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    looks = [0]
    seen = StoreGroup._missing_seen_from

    def counted(self, *args):
        looks[0] += 1
        return seen(self, *args)

    StoreGroup._missing_seen_from = counted
    board = group.board(60.0)
    group.barrier("first barrier")
    if group.rank == 3:
        time.sleep(5)
    started = time.monotonic()
    group.barrier("second barrier")
    board.close()
    emit(rank=group.rank, looks=looks[0], seconds=time.monotonic() - started)


class KeysLookedUp:
    """The job's store, counting the message keys the tuner checks one by one (a waiting rank's look-up of its late
    ranks; its polls check the result's key, or every message at once on rank 0)."""

    def __init__(self, store) -> None:
        self._store, self.one_by_one = store, 0

    def check(self, keys):
        if len(keys) == 1 and re.search(r"/\d+/\d+$", keys[0]):
            self.one_by_one += 1
        return self._store.check(keys)

    def __getattr__(self, name):
        return getattr(self._store, name)


@case
def late_rank_lookup_requests():
    """N ranks, a beating failure board open: rank N - 1 comes to a barrier 4.5 s after the others, which wait and
    look up their late ranks once a second. How many message keys each checked one by one, in how many looks."""
    from triton_dist_tune.group import store as comm
    from triton_dist_tune.group.unresolved import Notes

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    counted, looks, look = KeysLookedUp(comm._job_store()), [0], Notes.look
    comm._job_store = lambda: counted

    def counted_look(self, *args, **kwargs):
        looks[0] += 1
        return look(self, *args, **kwargs)

    Notes.look = counted_look
    board = group.board(60.0)
    group.barrier("first barrier")
    counted.one_by_one, looks[0] = 0, 0
    if group.rank == group.size - 1:
        time.sleep(4.5)
    started = time.monotonic()
    group.barrier("second barrier")
    board.close()
    emit(rank=group.rank, size=group.size, one_by_one=counted.one_by_one, looks=looks[0],
         seconds=time.monotonic() - started)


@case
def watch_after_a_side_watch():
    """2 ranks: rank 0 opens and closes a progress watch on the group that rank 1 never opens (a side path of its
    own), then both watch one round of work and exchange its results. What each raised, and how long it took."""
    from triton_dist_tune.errors import AutotuneError
    from triton_dist_tune.faults.progress import RoundWatch

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    group.barrier("start")
    if group.rank == 0:
        with RoundWatch.start(group, "side work", 2.0):
            pass
    started, error = time.monotonic(), None
    try:
        with RoundWatch.start(group, "shared work", 2.0) as watch:
            group.allgather(group.rank, "round 1", timeout=watch.arrive(0, "round 1", 10.0))
            watch.passed(0)
    except AutotuneError as exc:
        error = f"{type(exc).__name__}: {exc}"
    emit(rank=group.rank, error=error, seconds=time.monotonic() - started)


if __name__ == "__main__":
    main()
