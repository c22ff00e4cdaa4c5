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
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main, pid_marker, process_stopped, waited_for

import triton_dist_tune as tdt


def said_when_ended(me: int, call: Callable[[], object]) -> None:
    """Run ``call`` and say how it ended (the library's error, if any) and when; after an error, end the process
    with status 3 (no barrier: rank 0 never comes)."""
    try:
        call()
        emit(rank=me, error=None, ended=time.time())
    except tdt.AutotuneError as exc:
        emit(rank=me, error=type(exc).__name__, message=str(exc), ended=time.time())
        os._exit(3)


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

    said_when_ended(me, lambda: work(torch.ones(4)))


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

def _freeze() -> None:
    """Stop this process (the store's host) for good, after writing its pid into ``$FAULT_DIR/host.pid`` and when
    into ``$FAULT_DIR/frozen``."""
    pid_marker(Path(os.environ["FAULT_DIR"], "host.pid"))
    Path(os.environ["FAULT_DIR"], "frozen").write_text(repr(time.time()))
    os.kill(os.getpid(), signal.SIGSTOP)


def _host_frozen() -> None:
    """Wait until the store's host has frozen itself (:func:`_freeze`): its ``frozen`` file written and its process
    seen stopped in ``/proc``. (A fixed 0.2 s after the file stood in for the stop before: a loaded host could be
    descheduled between the two, and answer the first requests of a peer that should meet it frozen.)"""
    if waited_for([Path(os.environ["FAULT_DIR"], "frozen")]):  # (else the case goes on: its test's bounds fail)
        process_stopped(int(Path(os.environ["FAULT_DIR"], "host.pid").read_text()))


@case
def frozen_host_before_an_exchange():
    """Rank 0 (the store's host) stops itself once both ranks have the group (a gloo barrier, no store request);
    rank 1 goes on to an exchange that opens no failure board and no progress watch: ``WHERE=campaign``, a
    campaign's agreement on its keys (its first exchange); ``WHERE=autotune``, a tuned function's first call, whose
    first exchange (the agreement on its key and config space) comes before its failure board opens;
    ``WHERE=board``, a tuned function's first call, rank 0 stopping as its failure board opens, rank 1 opening its
    own once rank 0 has stopped (a board's first requests come before any beat); ``WHERE=watch``, the same with a
    campaign of units of one rank, whose rounds a progress watch watches."""
    from triton_dist_tune.faults.progress import RoundWatch
    from triton_dist_tune.group.store import StoreGroup

    tdt.init_distributed()
    me, where = dist.get_rank(), os.environ["WHERE"]
    dist.barrier()
    if where in ("board", "watch"):  # rank 0 stops as it opens its first, rank 1 opens its own once rank 0 stopped
        owner, name = (StoreGroup, "board") if where == "board" else (RoundWatch, "start")
        opening = getattr(owner, name)

        def freeze_then_open(*args, **kwargs):
            if me == 0:
                _freeze()
            _host_frozen()
            return opening(*args, **kwargs)

        setattr(owner, name, freeze_then_open if where == "board" else classmethod(
            lambda cls, *args, **kwargs: freeze_then_open(*args, **kwargs)))
    elif me == 0:
        _freeze()

    @tdt.autotune(config_space=[{"v": v} for v in range(2)], key_fn=lambda x: tuple(x.shape), n_warmup=1,
                  n_repeat=1, timing="cold", name="frozen_before")
    def work(x: torch.Tensor, *, v: int) -> torch.Tensor:
        return x * (v + 1)

    if where in ("campaign", "watch"):  # (units of one rank: a progress watch, no board)
        said_when_ended(me, lambda: tdt.campaign(work, lambda n: (torch.ones(n),), keys=[4, 8],
                                                 local=where == "watch", progress=False))
    else:
        said_when_ended(me, lambda: work(torch.ones(4)))


@case
def frozen_host_in_init():
    """Rank 0 (the store's host) stops itself inside ``init_distributed``, in its naming of the attempt:
    ``WHERE=naming``, once rank 1 has said hello (rank 1 waits for its reply); ``WHERE=connect``, at its first look,
    before rank 1 connects (rank 1 starts once rank 0 has stopped, not 1.5 s later as before, and connects to a host
    that accepts no request). Rank 1 calls ``init_distributed(timeout_s=$INIT_TIMEOUT)``."""
    from triton_dist_tune.group import epoch

    me = int(os.environ["RANK"])
    if me == 0:
        answer = epoch.Naming.answer

        def answer_then_stop(naming: epoch.Naming) -> None:
            if os.environ["WHERE"] == "connect" or int(naming.store.add(f"{naming.base}hellos", 0)) >= 1:
                _freeze()
            answer(naming)

        epoch.Naming.answer = answer_then_stop  # type: ignore[method-assign]
    elif os.environ["WHERE"] == "connect":
        _host_frozen()
    try:
        tdt.init_distributed(timeout_s=float(os.environ.get("INIT_TIMEOUT", "600")))
        emit(rank=me, error=None, ended=time.time())
    except tdt.AutotuneError as exc:
        emit(rank=me, error=type(exc).__name__, message=str(exc), ended=time.time())
        os._exit(3)


@case
def frozen_host_at_exit():
    """Rank 0 (the store's host) stops itself once both ranks have the group; rank 1 exits normally once it has (its
    exit hook counts it out in the store: ``group/exits.py``)."""
    tdt.init_distributed()
    dist.barrier()
    if dist.get_rank() == 0:
        _freeze()
    _host_frozen()
    emit(rank=1, exiting=time.time())
    sys.stdout.flush()
    sys.exit(0)  # a normal exit, its hooks run (not _cases.main's os._exit)


@case
def frozen_host_and_a_wrong_group():
    """Rank 0 (the store's host) stops itself once both ranks have the group (a gloo barrier); rank 1 then makes the
    store requests of a wrong-group note (``group/unresolved.py``): ``WHERE=post``, a call with a wrong
    ``autotune_pg`` (posting its note before it raises ``BadInputError``); ``WHERE=withdraw``, that call made before
    the freeze (its note posted, its error caught), then a call on a group of its own (``[1]``: no exchange with rank
    0) that withdraws it (a mark: a ``set``, which reads no reply), then, with ``T`` = 1 s and 2.5 s later, the
    freeze, then another call on that group, which deletes the note (its requests read replies); ``WHERE=exit``, that
    call made before the freeze, then a normal exit (its exit hook marks the note ended), the threads still alive
    listed by an exit hook that runs after every other one (``WHERE=exit_healthy``: the same, no rank stopping,
    both exiting normally). Rank 1 waits for the note's clients (its beat's, its mark's) to be connected before the
    freeze: a connect to a frozen host is another case."""
    import atexit
    import threading

    where = os.environ["WHERE"]
    if where.startswith("exit"):  # registered first: runs last
        atexit.register(lambda: emit(threads=sorted(t.name for t in threading.enumerate())))
    tdt.init_distributed()
    me = dist.get_rank()

    @tdt.autotune(config_space=[{"v": v} for v in range(2)], key_fn=lambda x: tuple(x.shape), n_warmup=0,
                  n_repeat=1, timing="cold", name="frozen_note")
    def work(x: torch.Tensor, *, v: int) -> torch.Tensor:
        return x * (v + 1)

    alone = dist.new_group([1])
    if me == 1 and where != "post":
        from triton_dist_tune.group.unresolved import NOTES

        try:
            work(torch.ones(4), autotune_pg="not a group")
        except tdt.BadInputError:
            pass
        while NOTES.beat._on.client is None or not NOTES._end[0].now()[1]:  # (connected: see above)
            time.sleep(0.05)
        if where == "withdraw":
            work(torch.ones(4), autotune_pg=alone)
            os.environ["TRITON_DIST_AUTOTUNE_TIMEOUT"] = "1"
            time.sleep(2.5)  # twice the timeout: the next call deletes the note
    dist.barrier()
    if me == 0 and where != "exit_healthy":
        _freeze()
    if where != "exit_healthy":
        _host_frozen()
    if where.startswith("exit"):
        emit(rank=me, exiting=time.time())
        sys.stdout.flush()
        sys.exit(0)  # a normal exit, its hooks run (not _cases.main's os._exit)
    said_when_ended(me, lambda: work(torch.ones(8), autotune_pg="not a group" if where == "post" else alone))
    sys.stdout.flush()
    os._exit(0)  # (no barrier: rank 0 never comes)


@case
def late_host():
    """Rank 0 (the store's host) starts ``init_distributed`` 4 s after rank 1: rank 1 waits for its store to listen.
    Both say they have the group."""
    if int(os.environ["RANK"]) == 0:
        time.sleep(4.0)
    tdt.init_distributed()
    emit(rank=dist.get_rank(), ok=True)


@case
def healthy_host_questions():
    """No freeze: 20 exchanges one after another (each a few ms), then one that rank 1 waits 3 s at for rank 0.
    Each rank says how many questions its prober asked the store after each part, and whether it cut the store."""
    from triton_dist_tune.group import store_silence
    from triton_dist_tune.group.store import StoreGroup

    tdt.init_distributed()
    group = StoreGroup(dist.group.WORLD)

    def asked() -> int:
        return sum(prober.asked for prober in store_silence._answering.values())

    before = asked()
    for i in range(20):
        group.combine(i, "quick", lambda xs: sum(xs))
    quick = asked() - before
    if group.rank == 0:
        time.sleep(3.0)
    group.combine(0, "slow", lambda xs: sum(xs))
    emit(rank=group.rank, quick=quick, slow=asked() - before - quick, cut=store_silence.was_cut())


if __name__ == "__main__":
    main()
