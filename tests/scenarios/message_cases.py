"""Multi-rank scenarios of the messages of issue 35 item 3, run by tests/test_messages.py.

Usage: python message_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import logging
import os
import time

import torch
import torch.distributed as dist
import triton
from _cases import case, emit, main, outcome, spend, virtual_clock, waited_for
from _kernels import copying_layer, increment

import triton_dist_tune as tdt

#: the entry at which rank 1's config space differs from rank 0's (of 200)
DIFFERS_AT = 137


@case
def subgroup_rank_fails():
    """On the group of global ranks [1, 2] (global rank 0 not in it), global rank 2 (group rank 1) fails: key_fn
    raises there, then (a second function) every config's run raises there."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    group = dist.new_group([1, 2])

    def key_fn(x):
        if rank == 2:
            raise IndexError("key broke on global rank 2")
        return x.numel()

    @tdt.autotune([{"m": m} for m in (1, 2)], key_fn=key_fn, n_warmup=0, n_repeat=1)
    def f(x, *, m):
        return x * m

    @tdt.autotune([{"m": m} for m in (1, 2)], key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=1)
    def g(x, *, m):
        if rank == 2:
            raise ValueError("run broke on global rank 2")
        return x * m

    if rank in (1, 2):
        emit(key=outcome(f, torch.ones(10), autotune_pg=group), run=outcome(g, torch.ones(10), autotune_pg=group))
    dist.barrier()


@case
def autotune_false_on_one_rank():
    """Rank 1 calls the tuned function with ``autotune=False`` (no tuning, no communication) where rank 0 tunes:
    rank 0's wait runs out naming rank 1; rank 1 waits for it at a barrier."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()

    @tdt.autotune([{"m": m} for m in (1, 2)], key_fn=lambda n: n, n_warmup=0, n_repeat=1)
    def f(n, *, m):
        return n * m

    emit(**outcome(f, 8, autotune=rank == 0))
    dist.barrier()


@case
def autotune_never_called_on_rank_1():
    """Rank 1 never calls the ``autotune`` function that rank 0 tunes on the default group: rank 0's wait runs out
    naming rank 1 and autotune's causes; rank 1 waits for it at a barrier."""
    tdt.init_distributed(backend="gloo")

    @tdt.autotune([{"m": m} for m in (1, 2)], key_fn=lambda n: n, n_warmup=0, n_repeat=1)
    def f(n, *, m):
        return n * m

    if dist.get_rank() == 0:
        emit(**outcome(f, 8))
    dist.barrier()


@case
def contextual_never_called_on_rank_1():
    """Rank 1 never calls the ``contextual_autotune`` function that rank 0 tunes on the default group: rank 0's
    wait runs out naming rank 1 and a contextual function's causes; rank 1 waits for it at a barrier."""
    tdt.init_distributed(backend="gloo")
    layer = copying_layer(n_warmup=0, n_repeat=1)
    if dist.get_rank() == 0:
        emit(**outcome(lambda: layer(torch.ones(32)).sum().item()))
    dist.barrier()


@case
def space_mismatch():
    """200-config spaces that differ at one entry: the MismatchError names that entry and both values."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    space = [{"block": 16, "stage": i, "name": f"cfg{i:03d}"} for i in range(200)]
    if rank == 1:
        space[DIFFERS_AT] = {"block": 32, "stage": DIFFERS_AT, "name": f"cfg{DIFFERS_AT:03d}"}

    @tdt.autotune(space, key_fn=lambda n: n, n_warmup=0, n_repeat=1, search="exhaustive")
    def f(n, *, block, stage, name):
        return block

    emit(**outcome(f, 8))


@case
def prune_apart():
    """A ``prune_fn`` that depends on the rank: each rank keeps configs the other leaves out."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()

    @tdt.autotune([{"v": v} for v in range(4)], key_fn=lambda n: n, n_warmup=0, n_repeat=1,
                  prune_fn=lambda config, n: config["v"] in ((0, 2) if rank == 0 else (1,)))
    def f(n, *, v):
        return v

    emit(**outcome(f, 8))


@case
def nearest_keeps_none():
    """``undecided='nearest'`` at a key where ``prune_fn`` keeps no config: the key is tuned, and that raises."""
    tdt.init_distributed(backend="gloo")

    @tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda n: n, n_warmup=0, n_repeat=1, undecided="nearest",
                  prune_fn=lambda config, n: n < 100)
    def f(n, *, v):
        return v

    f(8)
    emit(**outcome(f, 1000))


@case
def local_nearest():
    """A rank-local campaign of two keys, then a key served by ``undecided='nearest'`` on every rank."""
    tdt.init_distributed(backend="gloo")
    # 3 samples a config, timed on the virtual clock: on the wall clock, 2 against 30 ms (28 ms apart) is a gap a
    # loaded machine's stalls can close (as 5 against 40 ms in fault_cases.py)
    @tdt.autotune([{"variant": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=0, n_repeat=3,
                  timing="cold", name="served", undecided="nearest")
    def kernel(x, *, variant):
        ms = 2.0 if variant == 0 else 30.0
        time.sleep(ms / 1e3)
        spend(ms)
        return x * (variant + 1)

    with virtual_clock():
        tdt.campaign(kernel, lambda n: torch.ones(n), [8, 64], local=True)
    served = kernel(torch.ones(10))  # never tuned: the nearest decided key's choice (8's)
    emit(rank=dist.get_rank(), served=served[0].item() - 1)


add_one = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128)], key=["n"])(increment)


@case
def interrupted_and_caught():
    """Rank 1 raises KeyboardInterrupt in its 4th call of a tuned function (``autotune``) that makes no collective;
    its caller catches it and the process lives on (it stays until the test ends it). Rank 0 hears of it on the
    failure board."""
    _interrupted_and_caught(contextual=False)


@case
def interrupted_and_caught_contextual():
    """As :func:`interrupted_and_caught`, in a run of a ``contextual_autotune`` function."""
    _interrupted_and_caught(contextual=True)


def _interrupted_and_caught(contextual: bool) -> None:
    tdt.init_distributed(backend="gloo")
    me, calls = dist.get_rank(), [0]

    def trouble() -> None:
        calls[0] += 1
        if me == 1 and calls[0] == 4:
            raise KeyboardInterrupt

    if contextual:
        @tdt.contextual_autotune(is_dist=True, n_repeat=3, n_warmup=1)
        def f(x):
            add_one[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
            trouble()
            return x
    else:
        @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel())
        def f(x, *, c):
            trouble()
            return x * c
    try:
        f(torch.zeros(128))
        emit(rank=me, error=None)
    except BaseException as exc:  # the user's catch: the process goes on
        emit(rank=me, error=type(exc).__name__, message=str(exc))
    if me == 1:
        time.sleep(120)  # alive: only the test ends it, once rank 0 has
    os._exit(0)


@case
def interrupted_then_called_again():
    """A BaseException that is not an Exception, raised by a user callable on one rank only and caught by its caller
    (a REPL, a serving loop handling SIGINT), which calls again, as every rank's caller does: rank 1's ``prune_fn``
    raises KeyboardInterrupt (before the failure board opens), then rank 0's measured run raises SystemExit (a
    ``sys.exit`` in the function; rank 0 gathers every exchange). Then rank 1's ``prune_fn`` of a rank-local function
    served by ``undecided="first"`` (no exchange) raises KeyboardInterrupt, and a collective function tunes on the
    same group. Each rank emits what each call gave."""
    tdt.init_distributed(backend="gloo")
    me = dist.get_rank()
    fired: set[str] = set()

    def once(where: str, rank: int, error: BaseException) -> None:
        if me == rank and where not in fired:
            fired.add(where)
            raise error

    def prune_fn(config, x):
        once("prune_fn", 1, KeyboardInterrupt())
        return True

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel(), prune_fn=prune_fn, n_warmup=1,
                  n_repeat=2, name="pruned")
    def pruned(x, *, c):
        return x * c

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, name="ran")
    def ran(x, *, c):
        once("run", 0, SystemExit(3))
        return x * c

    def local_prune(config, x):
        once("local_prune", 1, KeyboardInterrupt())
        return True

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel(), prune_fn=local_prune, sharded=True,
                  undecided="first", name="alone")
    def alone(x, *, c):  # rank-local, served: its call makes no exchange
        return x * c

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, name="after")
    def after(x, *, c):
        return x * c

    for fn, calls in ((pruned, (1, 2)), (ran, (1, 2)), (alone, (1,)), (after, (1,))):
        for call in calls:
            t0 = time.monotonic()
            try:
                said = {"error": None, "value": float(fn(torch.ones(8)).sum())}  # 8 c: the config chosen
            except BaseException as exc:  # the user's catch: the process goes on, and calls again
                said = {"error": type(exc).__name__, "message": str(exc)}
            emit(rank=me, fn=fn.__name__.split(".")[-1], call=call, seconds=time.monotonic() - t0, **said)


@case
def interrupted_after_the_last_exchange():
    """A rank is interrupted (KeyboardInterrupt) after the last exchange of its tuning, inside the group's turn, so
    that no peer waits in that tuning any more: a handler of its rank log raises at a line each rank logs once that
    exchange is over. Rank 1 at the decision's line of an ``autotune`` tuning (key 8; after the exchange that waits
    for the cache write), then rank 0 (which gathers the exchanges) at the line ending a ``contextual_autotune``
    function's tuning call. Each time the caller catches it, then both ranks tune an ``autotune`` key on the group
    (16, then 32), calling once more if a call raises. Each rank emits what each call gave."""
    from triton_dist_tune.disk import logs

    tdt.init_distributed(backend="gloo")
    me, armed = dist.get_rank(), {}

    class Interrupting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = armed.get(me)
            if text is not None and text in record.getMessage():
                del armed[me]
                raise KeyboardInterrupt

    logs.rank_log().addHandler(Interrupting())

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, name="last")
    def last(x, *, c):
        return x * c

    @tdt.contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1)
    def runs(x):
        add_one[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
        return x

    steps = (({1: "decision: config"}, "last", 8), ({}, "last", 16),
             ({0: "done after"}, "runs", 64), ({}, "last", 32))
    for arm, name, n in steps:
        armed.update(arm)
        for call in (1, 2):
            t0 = time.monotonic()
            try:
                said = {"error": None, "value": float((last if name == "last" else runs)(torch.ones(n)).sum())}
            except BaseException as exc:  # the user's catch: the process goes on
                said = {"error": type(exc).__name__, "message": str(exc)}
            emit(rank=me, fn=name, n=n, call=call, seconds=time.monotonic() - t0, **said)
            if arm or said["error"] is None:
                break


@case
def interrupted_in_the_last_exchanges_wait():
    """On the default group's channel: rank 1 writes its message of a turn's exchange B and is interrupted
    (SIGINT, KeyboardInterrupt) while it waits for B's result, caught by its caller; rank 0 comes to B only once
    rank 1 has caught it. Where B is the turn's last exchange (``past``: no peer waits in the turn once B is over),
    the exchange rank 1's "left" record is written at is the first of rank 0's next turn; else (``inside``) rank
    0's turn goes on to an exchange B2, the one rank 1 left. Then both ranks make an exchange C in a turn of their
    own. Each rank emits what each exchange gave."""
    import signal
    import threading

    from triton_dist_tune.group.resolve import resolve_group

    # SIGINT as a terminal gives it, to the main thread: in two full-suite CI runs rank 1 was never interrupted (it
    # waited in B until rank 0 gave up waiting for it, and the test ran out), which neither a lone run nor one beside
    # 6 workers showed; an ignored SIGINT inherited from the process that started the test server, or a signal taken
    # by the sending thread while the main thread waits in C, would do it: neither can now
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tdt.init_distributed(backend="gloo")
    me, group = dist.get_rank(), resolve_group(None)
    folder = os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]
    os.makedirs(folder, exist_ok=True)
    for variant in ("past", "inside"):
        caught = os.path.join(folder, f"caught.{variant}")

        def exchange(what: str) -> None:
            t0 = time.monotonic()
            try:
                said = {"error": None, "value": group.allgather(me, f"{variant} {what}")}
            except Exception as exc:
                said = {"error": type(exc).__name__, "message": str(exc)}
            emit(rank=me, variant=variant, what=what, seconds=time.monotonic() - t0, **said)

        def interrupt_once_written(seq: int) -> None:  # once rank 1's message of B is in the store
            while group._sent < seq:
                time.sleep(0.01)
            time.sleep(0.2)  # (inside the wait for B's result: rank 0 comes only once rank 1 caught this)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

        try:
            with group.turn():
                exchange("A")
                if me == 1:
                    threading.Thread(target=interrupt_once_written, args=(group.exchanges() + 1,), daemon=True).start()
                else:
                    waited_for([caught], 60)
                exchange("B")
                if me == 0 and variant == "inside":
                    exchange("B2")
        except KeyboardInterrupt:  # the user's catch (rank 1): the process goes on
            emit(rank=me, variant=variant, what="B", error="KeyboardInterrupt")
            open(caught, "w").close()
        with group.turn():
            exchange("C")


if __name__ == "__main__":
    main()
