"""Keys served by the ``undecided`` policy, and campaigns, on ranks that disagree: run by tests/test_serving.py.

Usage: python serving_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints one
``RESULT {json}`` line: what its calls returned or raised.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from _cases import case, emit, main, outcome, spend, virtual_clock  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402


def rank() -> int:
    return dist.get_rank()


def served(key_fn, algos: list[str]):
    """A collective function of two configs under ``undecided="first"``, its space built from ``algos``."""

    @tdt.autotune([{"algo": a} for a in algos], key_fn=key_fn, undecided="first", n_warmup=1, n_repeat=2,
                  timing="cold", name="served")
    def f(x, *, algo):
        y = x.clone()
        dist.all_reduce(y)
        return algo

    return f


@case
def served_spaces_in_different_orders() -> None:
    """Rank 0 builds its space as [ring, tree], rank 1 as [tree, ring] (a space built from a set): a served config
    travels as an index into the space, so the ranks would run different configs."""
    tdt.init_distributed(backend="gloo")
    f = served(lambda x: x.shape[0], ["ring", "tree"] if rank() == 0 else ["tree", "ring"])
    emit(rank=rank(), first=outcome(f, torch.ones(4)))


@case
def served_key_fn_raising_on_one_rank() -> None:
    """key_fn raises on rank 1 only: every rank must learn why, at the serving's exchange."""
    tdt.init_distributed(backend="gloo")

    def key_fn(x):
        if rank() == 1:
            raise ValueError("no key for this input")
        return x.shape[0]

    f = served(key_fn, ["ring", "tree"])
    emit(rank=rank(), first=outcome(f, torch.ones(4)))


@case
def served_tensor_key() -> None:
    """key_fn returns the tensor itself: a key hashed by identity, a new key at every call."""
    tdt.init_distributed(backend="gloo")
    f = served(lambda x: x, ["ring", "tree"])
    emit(rank=rank(), calls=[outcome(f, torch.ones(4)) for _ in range(2)])


@case
def local_campaign_spaces_in_different_orders() -> None:
    """A local campaign of a sharded function whose space rank 0 builds as [1, 2, 3] and rank 1 as [3, 2, 1]: a unit
    learns the others' decisions by index into its own space."""
    tdt.init_distributed(backend="gloo")
    bs = [1, 2, 3] if rank() == 0 else [3, 2, 1]

    @tdt.autotune([{"b": b} for b in bs], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=2, timing="cold",
                  sharded=True, name="local_order")
    def f(x, *, b):
        time.sleep(0.002 * (4 - b))
        return b

    ran = outcome(tdt.campaign, f, lambda n: tdt.Call(torch.ones(n)), keys=[1, 2], local=True, progress=False)
    emit(rank=rank(), campaign=ran, decided={str(k): v["b"] for k, v in sorted(f.tuner.decided.items())})


@case
def campaign_key_that_is_a_list() -> None:
    """key_fn returns a list: it has a text but is no key (unhashable)."""
    tdt.init_distributed(backend="gloo")

    @tdt.autotune([{"b": b} for b in (1, 2)], key_fn=lambda x: [x.shape[0]], n_warmup=1, n_repeat=2, timing="cold",
                  name="list_key")
    def f(x, *, b):
        return b

    emit(rank=rank(), campaign=outcome(tdt.campaign, f, lambda n: tdt.Call(torch.ones(n)), keys=[1, 2],
                                       progress=False))


def served_across_replicas(prune) -> None:
    """4 ranks: TP groups {0, 1} and {2, 3}, replica groups {0, 2} and {1, 3}; a function of the TP group under
    ``undecided="first"`` with ``prune``, called with both groups; each rank's outcome and how long it took."""
    tdt.init_distributed(backend="gloo")
    me = rank()
    tps = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    across = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    tp = tps[me // 2]

    @tdt.autotune([{"algo": a} for a in ("ring", "tree")], key_fn=lambda x: x.shape[0], prune_fn=prune,
                  undecided="first", n_warmup=1, n_repeat=2, timing="cold", name="served_replicas")
    def f(x, *, algo):
        y = x.clone()
        dist.all_reduce(y, group=tp)
        return algo

    started = time.perf_counter()
    first = outcome(f, torch.ones(4), autotune_pg=tp, autotune_replicas=across[me % 2])
    emit(rank=me, first=first, seconds=time.perf_counter() - started)


@case
def served_across_replicas_prune_fn_raising_on_one_rank() -> None:
    """prune_fn raises on rank 3 only: its replica ({2, 3}) cannot serve, and must not tune alone while the other
    replica serves (its tuning's agreement across replicas would wait for partners that never come)."""
    def prune(config, x):
        if rank() == 3:
            raise ValueError("no pruning on rank 3")
        return True

    served_across_replicas(prune)


@case
def served_across_replicas_pruned_apart() -> None:
    """prune_fn keeps only 'tree' on rank 3: replica {2, 3} would serve 'tree', replica {0, 1} 'ring'."""
    served_across_replicas(lambda config, x: rank() != 3 or config["algo"] == "tree")


@case
def cached_then_served() -> None:
    """4 ranks, TP groups {0, 1} {2, 3} linked as replicas: a collective function whose config "b" is 8x faster than
    the others, and a rank-local one (``sharded=True``, tuned on the default group) alike. ``TUNE=1``: each tuned
    at key 64 (``undecided="tune"``, the cache written); else a new job, under ``undecided="nearest"``, calls key
    56 (no key decided in this process yet: the cache folder's are the candidates), 64, which the cache holds, and
    60. A third function, rank-local by a ``local=True`` campaign, whose best config is "b" at key 64 and "c" at 32:
    the first job's campaign tunes key 64, the second's key 32, then calls key 64 (the cache holds it; the nearest
    key this process decided is 32)."""
    tdt.init_distributed(backend="gloo")
    r, world = rank(), dist.get_world_size()
    groups = [dist.new_group(list(range(g, g + 2))) for g in range(0, world, 2)]
    across = [dist.new_group(list(range(p, world, 2))) for p in range(2)]
    layout = {"autotune_pg": groups[r // 2], "autotune_replicas": across[r % 2]}
    @tdt.autotune([{"algo": a} for a in "abc"], key_fn=lambda x, **kw: x.numel(), n_warmup=1, n_repeat=3,
                  undecided="tune" if os.environ.get("TUNE") else "nearest", name="cached_then_served")
    def f(x, group=None, *, algo):
        time.sleep(0.005 if algo == "b" else 0.04)
        dist.all_reduce(x.clone(), group=group)
        return algo

    @tdt.autotune([{"algo": a} for a in "abc"], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=3, sharded=True,
                  undecided="tune" if os.environ.get("TUNE") else "nearest", name="cached_then_served_alone")
    def g(x, *, algo):  # rank-local (sharded=True): its serving talks to no other rank
        time.sleep(0.005 if algo == "b" else 0.04)
        return algo

    @tdt.autotune([{"algo": a} for a in "abc"], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=3,
                  undecided="tune" if os.environ.get("TUNE") else "nearest", name="cached_then_served_campaign")
    def h(x, *, algo):  # rank-local once given to a local=True campaign; "b" is fastest at key 64, "c" at 32
        time.sleep(0.005 if algo == ("b" if x.numel() > 48 else "c") else 0.04)
        return algo

    keys = [64] if os.environ.get("TUNE") else [56, 64, 60]
    tdt.campaign(h, lambda n: tdt.Call(torch.ones(n)), keys=[64] if os.environ.get("TUNE") else [32], local=True,
                 progress=False)
    emit(rank=r, ran=[f(torch.ones(n), group=layout["autotune_pg"], **layout) for n in keys],
         alone=[g(torch.ones(n)) for n in keys], campaign=h(torch.ones(64)))


@case
def cached_alone_on_one_rank_then_tuned() -> None:
    """2 ranks whose cache folders differ (each node's own disk: rank 1's is empty). A rank-local function
    (``sharded=True``) is tuned at key 64 (group rank 0 writes its folder); a second function object of the same
    code (a new process's, as far as the cache can tell) is called at key 64 under ``undecided="nearest"`` (rank 0's
    cache holds it, rank 1's does not), then under ``undecided="tune"``: a key served is not decided, so the group
    tunes it now, together."""
    tdt.init_distributed(backend="gloo")

    def make():
        @tdt.autotune([{"algo": a} for a in "abc"], key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=1,
                      sharded=True, timing="cold", name="cached_alone_split")
        def g(x, *, algo):
            spend(1 if algo == "b" else 8)  # 'b' is the fastest on the virtual clock
            return algo

        return g

    with virtual_clock():
        tuned = make()(torch.ones(64))
        g = make()
        os.environ["TRITON_DIST_AUTOTUNE_UNDECIDED"] = "nearest"
        served = outcome(g, torch.ones(64))
        os.environ["TRITON_DIST_AUTOTUNE_UNDECIDED"] = "tune"
        started = time.perf_counter()
        again = outcome(g, torch.ones(64))
    emit(rank=rank(), tuned=tuned, served=served, again=again, seconds=time.perf_counter() - started)


if __name__ == "__main__":
    main()
