"""Multi-rank scenarios for the control channel's traffic and for multi-node jobs, run by tests/test_scale.py.

Usage: python scale_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, or under torchrun). Each rank
prints ``RESULT {json}`` lines.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

import torch.distributed as dist
from _cases import case, emit, main, spend, virtual_clock, waited_for

import triton_dist_tune as tdt
from triton_dist_tune.group.resolve import resolve_group

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_traffic import count_store  # noqa: E402  (the benchmark's request counter)

BIG = 8  # configs of the big space, each with a 4 KB text


def counted_group():
    tdt.init_distributed(backend="gloo")
    group = resolve_group(None)
    return group, count_store(group)


def waits_client_made(store, seconds: float = 30.0) -> None:
    """Wait (at most ``seconds``) until ``store``'s blocking waits have a client of their own free: the first wait's
    connect of it runs on a helper thread, and a wait that finds none yet looks for its keys with a ``check`` each
    (CI once counted 4.2 requests an exchange on rank 3 of 4: that connect outlasted the warm-up exchange, and an
    exchange after it looked once before its client was made)."""
    from triton_dist_tune.group import clients

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pool = clients._pools.get(store)
        if pool is not None and (pool.free or pool.itself):
            return
        time.sleep(0.05)


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
        waits_client_made(store)
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


#: ms per config: config 2 is the fastest on every rank, by 75 ms. ``multinode`` spends them on the virtual clock
#: that times its samples too (``_cases.virtual_clock``): on the wall clock its test's choice of config 2 rested on
#: 3 samples of two fresh processes under torchrun, and stalls of a loaded machine have closed 35 and 60 ms gaps
SLEEP_MS = [80, 100, 5]


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
        spend(SLEEP_MS[variant])
        return x + variant

    with virtual_clock():  # (see SLEEP_MS)
        out = work(10)
    emit(rank=dist.get_rank(), node=os.environ.get("NODE"), out=out, calls=calls,
         chosen=work.tuner.decided[10]["variant"])


TP = 2  # ranks per tensor-parallel group: groups [0, 1], [2, 3], ...; replica j holds global ranks 2j and 2j + 1
N_CONFIGS = 16


def replica_sleep_ms(replica: int, variant: int) -> float:
    """Config 0 is the fastest on replica 0 but slow on replica 1; config 1 is second everywhere, and the choice of
    replica 1 and of the replicas together by 4x (40 against 160 ms and more; at 90 ms, 2.25x from 3 samples on 4
    ranks, the gap was narrower than one that a loaded machine once closed at 4 ranks, tune_cases.agree's 4x).
    ``replicas`` spends them on the virtual clock that times its samples too (``_cases.virtual_clock``): replica 0's
    own choice of config 0 is 5 against 40 ms, the 35 ms gap a loaded machine closed in fault_cases.py."""
    if variant == 0:
        return 320.0 if replica == 1 else 5.0
    return 40.0 if variant == 1 else 160.0


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
            spend(replica_sleep_ms(replica, variant))
            y = x * (variant + 1)
            dist.all_reduce(y, group=tp)
            return y

        import torch

        extra = {} if mode == "independent" else {"autotune_replicas": across}
        with virtual_clock():  # (see replica_sleep_ms)
            out = layer(torch.ones(4), autotune_pg=tp, **extra)
        emit(mode=mode, rank=rank, replica=replica, calls=calls, out=out.tolist(),
             chosen=next(iter(layer.tuner.decided_in.values()))["variant"])


@case
def late_ranks_looked_up():
    """4 ranks, a beating failure board open (as in a tuning): rank 3 comes to an exchange 5 s after the others,
    which wait. How many times a waiting rank looked up its late ranks (a store request per rank each time), and how
    many 1 s slices it waited."""
    from triton_dist_tune.group.store_wait import SeenFrom as _SeenFrom

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    looks = [0]
    seen = _SeenFrom.missing

    def counted(self):
        looks[0] += 1
        return seen(self)

    _SeenFrom.missing = counted
    board = group.board(60.0)
    group.barrier("first barrier")
    if group.rank == 3:
        time.sleep(5)
    started = time.monotonic()
    group.barrier("second barrier")
    board.close()
    emit(rank=group.rank, looks=looks[0], seconds=time.monotonic() - started)


class KeysLookedUp:
    """The job's store, counting the message keys (and a progress watch's round marks) the tuner checks one by one (a
    waiting rank's look-up of its late ranks; its polls check the result's key, or every message at once on rank 0),
    and those of them that are the keys of the ranks ``late`` (a look-up's confirmation of the keys its log names,
    when it names one, is a check of one key too, of a rank that arrived)."""

    def __init__(self, store, late=()) -> None:
        self._store, self.one_by_one, self.late, self.late_one_by_one = store, 0, set(late), 0
        self.errors: list[str] = []  # what a request other than check raised (a look swallows it: keys one by one)
        self.singles: list[str] = []  # the keys checked one by one

    def check(self, keys):
        found = re.search(r"/\d+/(\d+)$", keys[0]) if len(keys) == 1 else None
        if found:
            self.one_by_one += 1
            self.singles.append(keys[0])
            self.late_one_by_one += int(found.group(1)) in self.late
        return self._store.check(keys)

    def __getattr__(self, name):
        method = getattr(self._store, name)
        if not callable(method):
            return method

        def recorded(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except Exception as exc:
                self.errors.append(f"{name}: {exc!r}"[:300])
                raise

        return recorded


@case
def late_rank_lookup_requests():
    """N ranks, a beating failure board open: rank N - 1 comes to a barrier 4.5 s after the others, which wait and
    look up their late ranks once a second. How many message keys each checked one by one, in how many looks."""
    from triton_dist_tune.group import store as comm
    from triton_dist_tune.group.unresolved import Notes

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    counted, looks, look = KeysLookedUp(comm._job_store(), [group.size - 1]), [0], Notes.look
    comm._job_store = lambda: counted

    def counted_look(self, *args, **kwargs):
        looks[0] += 1
        return look(self, *args, **kwargs)

    Notes.look = counted_look
    board = group.board(60.0)
    group.barrier("first barrier")
    counted.one_by_one, counted.late_one_by_one, looks[0] = 0, 0, 0
    if group.rank == group.size - 1:
        time.sleep(4.5)
    started = time.monotonic()
    group.barrier("second barrier")
    board.close()
    emit(rank=group.rank, size=group.size, one_by_one=counted.one_by_one, late_one_by_one=counted.late_one_by_one,
         looks=looks[0], seconds=time.monotonic() - started)


@case
def half_late_lookups():
    """N ranks, a beating failure board open: the upper half comes to a barrier 4 s after the lower half, then to a
    progress watch's round 3 s after it. How many message keys and round marks each checked one by one, in how many
    looks, and which logs of arrivals (the barrier's, the round's) are still in the store after the waits."""
    from triton_dist_tune.faults.progress import RoundWatch
    from triton_dist_tune.group import store as comm
    from triton_dist_tune.group.unresolved import Notes

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    later = range(group.size - group.size // 2, group.size)  # (the upper half)
    counted, looks, look = KeysLookedUp(comm._job_store(), later), [0], Notes.look
    comm._job_store = lambda: counted
    watch_looks, beats = [0], RoundWatch._counts

    def counted_look(self, *args, **kwargs):
        looks[0] += 1
        return look(self, *args, **kwargs)

    def counted_beats(self, units):
        watch_looks[0] += 1
        return beats(self, units)

    Notes.look, RoundWatch._counts = counted_look, counted_beats
    board = group.board(60.0)
    group.barrier("first barrier")
    counted.one_by_one, counted.late_one_by_one, looks[0] = 0, 0, 0
    if group.rank in later:
        time.sleep(4)
    seq = group._seq + 1
    group.barrier("half late")
    exchange = {"one_by_one": counted.one_by_one, "late_one_by_one": counted.late_one_by_one, "looks": looks[0]}
    counted.one_by_one = counted.late_one_by_one = 0
    with RoundWatch.start(group, "half late", 30.0) as watch:
        if group.rank in later:
            time.sleep(3)
        group.barrier("after the round", timeout=watch.arrive(0, "the round", 60.0))
        watch.passed(0)
    round_ = {"one_by_one": counted.one_by_one, "late_one_by_one": counted.late_one_by_one,
              "looks": watch_looks[0]}
    group.barrier("last")
    logs = [key for key in (group._key(seq, "log"), f"{watch.scope}done/0/log") if counted.check([key])]
    board.close()
    emit(rank=group.rank, later=group.rank in later, exchange=exchange, round=round_, logs_left=logs,
         store_errors=counted.errors)


@case
def result_before_the_look():
    """4 ranks: ranks 0-2 come to a barrier, rank 3 3 s after them. Rank 2's look that reads the log naming rank 1
    then waits (the window widened, as load widens it) until rank 1 has deleted its message: rank 3 came, rank 0
    wrote the result, rank 1 read it and tidied its key. The keys rank 2 checks one by one after that look, and
    whether it then looked at all."""
    from triton_dist_tune.group import store as comm
    from triton_dist_tune.group.store_wait import Arrivals

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    raw = comm._job_store()
    counted = KeysLookedUp(raw, [3])
    comm._job_store = lambda: counted
    group.barrier("first barrier")
    seq, widened = group._seq + 1, [False]
    entries = Arrivals._entries

    def late_look(self):
        found = entries(self)
        if group.rank == 2 and found and found.get(1) and not widened[0]:
            widened[0] = True
            deadline = time.monotonic() + 30
            while raw.check([group._key(seq, 1)]) and time.monotonic() < deadline:
                time.sleep(0.05)
        return found

    Arrivals._entries = late_look
    counted.one_by_one = counted.late_one_by_one = 0
    if group.rank == 3:
        time.sleep(3)
    group.barrier("rank 3 late")
    emit(rank=group.rank, widened=widened[0], one_by_one=counted.one_by_one, singles=counted.singles,
         late_one_by_one=counted.late_one_by_one, store_errors=counted.errors)


@case
def message_then_end():
    """4 ranks, a failure board beating every 0.3 s (a window of 1.5 s): rank 2 writes its message of a barrier and
    ends at once, before its wait's first look (where it would append to the barrier's log of arrivals); rank 3
    comes 6 s late. What ranks 0, 1 and 3 raised at the barrier, and how long they waited."""
    import threading

    from triton_dist_tune.errors import AutotuneError
    from triton_dist_tune.group import store as comm

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    board = group.board(1.5)
    group.barrier("first barrier")
    if group.rank == 2:
        own, key = comm._job_store().clone(), group._key(group._seq + 1, 2)

        def end_once_written() -> None:  # (a client of its own: the job's is held by the wait)
            while not own.check([key]):
                time.sleep(0.005)
            os._exit(0)

        threading.Thread(target=end_once_written, daemon=True).start()
    if group.rank == 3:
        time.sleep(6)
    started, error = time.monotonic(), None
    try:
        group.barrier("second barrier")
    except AutotuneError as exc:
        error = f"{type(exc).__name__}: {exc}"
    board.close()
    emit(rank=group.rank, error=error, seconds=time.monotonic() - started)
    folder = os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"]  # (rank 0 hosts the store: it ends after the others)
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, f"done.{group.rank}"), "w").close()
    if group.rank == 0:
        waited_for([os.path.join(folder, f"done.{r}") for r in (1, 3)], 30)
    os._exit(0)


@case
def watch_after_a_side_watch_left_with_an_error():
    """2 ranks: rank 0 opens a progress watch on the group that rank 1 never opens (a side path of its own) and
    leaves it with an error; then both open the group's next watch, at the same point of the group's exchanges (the
    same scope), and wait at its first round. What each raised, and how long it took."""
    from triton_dist_tune.faults.progress import RoundWatch

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    group.barrier("start")
    if group.rank == 0:
        try:
            with RoundWatch.start(group, "side work", 2.0):
                raise RuntimeError("rank 0's error on its side path")
        except RuntimeError:
            pass
        group.store.set("test/side watch closed", b"1")
    else:
        group.store.wait(["test/side watch closed"])
    started, error = time.monotonic(), None
    try:
        with RoundWatch.start(group, "shared work", 2.0) as watch:  # (a silent unit's window: 3 s)
            watch.arrive(0, "round 1", 10.0)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    emit(rank=group.rank, error=error, seconds=time.monotonic() - started)


class ChecksTimed(KeysLookedUp):
    """The job's store, recording when each ``check`` was made (``time.monotonic()``) and of which keys."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.checked: list[tuple[float, frozenset[str]]] = []

    def check(self, keys):
        self.checked.append((time.monotonic(), frozenset(keys)))
        return super().check(keys)


@case
def late_barrier_polls():
    """3 ranks: rank 2 comes to a barrier 10 s after ranks 0 and 1, which wait for it. How long each waited, and
    when it made its polls, from the start of its wait: its ``check``s of every key it waits for at once (rank 0:
    the two other ranks' messages; rank 1: the result), in all and from its third second on (its look-ups' checks
    apart)."""
    from triton_dist_tune.group import store as comm

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    counted = ChecksTimed(comm._job_store())
    comm._job_store = lambda: counted
    group.barrier("first barrier")
    if group.rank == 2:
        time.sleep(10)
    counted.checked.clear()
    seq, started = group._seq + 1, time.monotonic()
    group.barrier("late barrier")
    seconds = time.monotonic() - started
    awaited = frozenset([group._key(seq, 1), group._key(seq, 2)] if group.rank == 0 else [group._key(seq, "all")])
    polls = [t - started for t, keys in counted.checked if keys == awaited]
    emit(rank=group.rank, seconds=seconds, checks=len(counted.checked), polls=len(polls),
         polls_from_3s=sum(1 for t in polls if t >= 3.0))

@case
def store_clients_of_many_tunings():
    """Six keys of one function tuned one after the other (each tuning opens a failure board): how many clients of the
    job's store this rank made (``clone`` of the store, counted where torch defines it; the clients are real)."""
    made = {"clones": 0}
    for cls in (dist.TCPStore, dist.PrefixStore):
        def counted(self, _clone=cls.clone):
            made["clones"] += 1
            return _clone(self)

        cls.clone = counted
    tdt.init_distributed(backend="gloo")

    @tdt.autotune([{"scale": s} for s in (1, 2)], key_fn=lambda n: n, n_warmup=0, n_repeat=1, timing="cold",
                  name="many_boards")
    def scaled(n, *, scale):
        return n * scale

    for n in range(6):
        scaled(n)
    emit(rank=dist.get_rank(), clones=made["clones"], tunings=len(scaled.tuner.decided))


#: the seconds each clone of the job's store takes in :func:`first_tuning_beside_slow_clones` (a resolver that
#: stalls each new connection, made deterministic)
SLOW_CLONE_S = 20.0


def counted_clones(slow_s: float = 0.0) -> dict:
    """Count each client of the job's store this process makes from now on (``clone``, wrapped where torch defines
    it; the clients are real), by the thread that asks, each made ``slow_s`` seconds late."""
    made: dict = {"clones": 0, "threads": []}
    for cls in (dist.TCPStore, dist.PrefixStore):
        def counted(self, _clone=cls.clone):
            made["clones"] += 1
            made["threads"].append(threading.current_thread().name)
            time.sleep(slow_s)
            return _clone(self)

        cls.clone = counted
    return made


@case
def first_tuning_beside_slow_clones():
    """A first tuning (two configs) while every new client of the job's store takes :data:`SLOW_CLONE_S` to
    connect (a slow resolver, made deterministic): its seconds, and the clients asked for on the tuning's thread."""
    tdt.init_distributed(backend="gloo")
    made = counted_clones(SLOW_CLONE_S)

    @tdt.autotune([{"scale": s} for s in (1, 2)], key_fn=lambda n: n, n_warmup=0, n_repeat=1, timing="cold",
                  name="slow_clones")
    def scaled(n, *, scale):
        return n * scale

    began = time.monotonic()
    scaled(3)
    emit(rank=dist.get_rank(), s=round(time.monotonic() - began, 2), tunings=len(scaled.tuner.decided),
         on_tuner=made["threads"].count(threading.current_thread().name))


@case
def waiter_clients_of_four_threads():
    """Four threads each tune a function of its own on the default group, in the same order on every rank (each
    starts once the one before is inside its tuning: all four in a turn at once): how many clients of the job's
    store this rank made."""
    tdt.init_distributed(backend="gloo")
    made = counted_clones()
    entered = [threading.Event() for _ in range(4)]

    def tuned(i):
        @tdt.autotune([{"scale": s} for s in (1, 2)], key_fn=lambda n: n, n_warmup=0, n_repeat=1, timing="cold",
                      name=f"four_threads_{i}")
        def scaled(n, *, scale):
            entered[i].set()
            time.sleep(0.05)
            return n * scale

        return scaled

    fns, threads = [tuned(i) for i in range(4)], []
    for i, fn in enumerate(fns):
        if i:
            entered[i - 1].wait(30)
        threads.append(threading.Thread(target=fn, args=(i,), name=f"tuner-{i}"))
        threads[-1].start()
    for thread in threads:
        thread.join(120)
    emit(rank=dist.get_rank(), clones=made["clones"], tunings=sum(len(fn.tuner.decided) for fn in fns))


class EndsRead:
    """The job's store as :mod:`triton_dist_tune.group.exits` holds it, counting the requests that read the ranks'
    ends: the log of count-outs and the process records (:mod:`triton_dist_tune.group.departed`)."""

    def __init__(self, store) -> None:
        self._store, self.log, self.records = store, 0, 0

    def _count(self, keys) -> None:
        self.log += any(str(k).endswith("/exited/log") for k in keys)
        self.records += any("/process/" in str(k) for k in keys)

    def __getattr__(self, name):
        method = getattr(self._store, name)
        if not callable(method):
            return method

        def counted(*args, **kwargs):
            if args:
                self._count(args[0] if isinstance(args[0], list) else [args[0]])
            return method(*args, **kwargs)

        return counted


@case
def ends_looked_at():
    """3 ranks: a barrier where nobody waits, then two where rank 2 comes 8 s, then 6 s, after the others (alive:
    they wait for it; twice the seconds the test needs a wait to last, so that a loaded machine that holds a waiting
    rank back cannot make its wait too short). How many requests each waiting rank made at each to read the ranks'
    ends (the log of count-outs, the process records), and how long it waited there."""
    from triton_dist_tune.group import exits

    group = resolve_group(tdt.init_distributed(backend="gloo"))
    job = exits.current()
    counted = job.store = EndsRead(job.store)
    group.barrier("warm")
    steps = {}
    for what, late_s in (("on time", 0.0), ("late", 8.0), ("late again", 6.0)):
        counted.log = counted.records = 0
        if group.rank == 2:
            time.sleep(late_s)
        started = time.monotonic()
        group.barrier(what)
        steps[what] = {"seconds": time.monotonic() - started, "log": counted.log, "records": counted.records}
    job.store = counted._store  # (the count-out and the host's wait at exit on the real store)
    emit(rank=group.rank, steps=steps)


if __name__ == "__main__":
    main()
