"""Scenarios of ``autotune_pg`` / ``autotune_replicas`` given wrongly, run by tests/test_layout.py.

Usage: python layout_cases.py CASE (4 ranks with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set; the ``mpi_`` cases
one plain process, MPI's singleton). Each rank prints ``RESULT {json}`` lines: what its call raised and how long it
took.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main, waited_for

import triton_dist_tune as tdt


def layer(name: str, key_fn=lambda x: x.numel(), **options):
    @tdt.autotune([{"v": v} for v in range(4)], key_fn=key_fn, n_warmup=0, n_repeat=1, timing="cold", name=name,
                  **options)
    def f(x, *, v):
        return x * v

    return f


def call(f, **groups) -> None:
    t0 = time.perf_counter()
    try:
        f(torch.ones(4), **groups)
        emit(error=None, seconds=time.perf_counter() - t0)
    except tdt.AutotuneError as exc:
        emit(error=type(exc).__name__, message=str(exc), seconds=time.perf_counter() - t0)


def two_by_two():
    """4 ranks: TP groups {0, 1} and {2, 3}, replica groups {0, 2} and {1, 3}, and this rank's of each."""
    tdt.init_distributed()
    me = dist.get_rank()
    tps = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    across = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    return me, tps[me // 2], across[me % 2]


@case
def key_fn_raises_on_one_rank():
    """key_fn raises on rank 1 only: rank 0 (its TP peer) and ranks 2, 3 (the other replica) must learn it too."""
    me, tp, across = two_by_two()

    def key(x):
        if me == 1:
            raise ValueError("no key on rank 1")
        return x.numel()

    call(layer("key_fn_raises", key), autotune_pg=tp, autotune_replicas=across)


@case
def ref_prog_raises_on_one_rank():
    """ref_prog raises on rank 1 only: rank 0 (its TP peer) learns it at the tuning's exchange of the preparation;
    ranks 2, 3 (the other replica) must learn it too, at once."""
    me, tp, across = two_by_two()

    def ref(x):
        if me == 1:
            raise ValueError("no reference on rank 1")
        return x

    @tdt.autotune([{"v": v} for v in range(4)], key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=1, timing="cold",
                  ref_prog=ref, name="ref_prog_raises")
    def f(x, *, v):
        return x * v

    call(f, autotune_pg=tp, autotune_replicas=across)


@case
def prune_fn_raises_on_one_rank():
    """prune_fn raises on rank 1 only: rank 0 (its TP peer) learns it at the tuning's exchange of the pruning; ranks
    2, 3 (the other replica) must learn it too, at once."""
    me, tp, across = two_by_two()

    def prune(config, x):
        if me == 1:
            raise ValueError("no pruning on rank 1")
        return True

    @tdt.autotune([{"v": v} for v in range(4)], key_fn=lambda x: x.numel(), prune_fn=prune, n_warmup=0, n_repeat=1,
                  timing="cold", name="prune_fn_raises")
    def f(x, *, v):
        return x * v

    call(f, autotune_pg=tp, autotune_replicas=across)


@case
def replicas_on_some_ranks_only():
    """Ranks 0 and 2 pass autotune_replicas, their TP peers 1 and 3 do not."""
    me, tp, across = two_by_two()
    call(layer("replicas_some"), autotune_pg=tp, **({"autotune_replicas": across} if me % 2 == 0 else {}))


@case
def replicas_missing_on_one_rank():
    """Rank 2 passes no autotune_replicas; ranks 0, 1 and 3 pass theirs. Rank 2 meets only its TP peer 3, while
    rank 0, its partner across replicas, waits for it there (and rank 1 for rank 0, rank 3 for rank 1)."""
    me, tp, across = two_by_two()
    call(layer("replicas_missing"), autotune_pg=tp, **({} if me == 2 else {"autotune_replicas": across}))


@case
def replicas_differ_in_cache_key_extra():
    """Each TP group agrees on its cache_key_extra ('v2' on ranks 0 and 1, 'v3' on ranks 2 and 3), but the two
    replicas, which keep one decision for the whole layout, differ in it."""
    me, tp, across = two_by_two()
    call(layer("replicas_extra", cache_key_extra=f"v{2 + me // 2}"), autotune_pg=tp, autotune_replicas=across)


@case
def replicas_differ_in_key():
    """Each TP group agrees on its key, but replica 1 (ranks 2 and 3) sees another shape (8 elements, replica 0 4):
    the replicas, which keep one decision for the whole layout, differ in key."""
    me, tp, across = two_by_two()
    started = time.perf_counter()
    try:
        layer("replicas_key")(torch.ones(4 if me < 2 else 8), autotune_pg=tp, autotune_replicas=across)
        emit(error=None, seconds=time.perf_counter() - started)
    except tdt.AutotuneError as exc:
        emit(error=type(exc).__name__, message=str(exc), seconds=time.perf_counter() - started)


@case
def groups_created_in_another_order_on_one_rank():
    """2 ranks, two groups of both ranks (a TP group and another): rank 1 creates them in the other order, so torch
    names the TP group '1' on rank 0 and '2' on rank 1 (the creations still pair up: each pair has the same ranks,
    and torch checks nothing more). Both ranks tune on their TP group."""
    groups_in_other_orders(late_s=0.0)


@case
def groups_created_in_another_order_on_one_rank_coming_late():
    """As :func:`groups_created_in_another_order_on_one_rank`, rank 1 calling 1.5 s after rank 0: rank 0 finds rank
    1's name a look before rank 1 finds rank 0's, which rank 0 leaves in the store as it raises. Then both tune on
    the default group (the same global ranks), rank 0 coming to it 5 s late: the key it left is no sign that it
    waits elsewhere (it left before rank 1's wait began)."""
    groups_in_other_orders(late_s=1.5)
    if dist.get_rank() == 0:
        time.sleep(5.0)
    call(layer("default_after"))


@case
def groups_in_another_order_on_rank_0_of_four_rank_3_late():
    """4 ranks: rank 0 tunes on the default group, ranks 1-3 on a group they made of all four (torch's '1'), rank 3
    calling 1.5 s after the others (its ticket comes after rank 0 found rank 1 or 2 elsewhere)."""
    tdt.init_distributed()
    me = dist.get_rank()
    everyone = dist.new_group([0, 1, 2, 3])
    if me == 3:
        time.sleep(1.5)
    call(layer("named_by_order"), autotune_pg=None if me == 0 else everyone)


def groups_in_other_orders(late_s: float) -> None:
    tdt.init_distributed()
    me = dist.get_rank()
    if me == 0:
        tp, _other = dist.new_group([0, 1]), dist.new_group([0, 1])
    else:
        _other, tp = dist.new_group([0, 1]), dist.new_group([0, 1])
        time.sleep(late_s)
    call(layer("named_by_order"), autotune_pg=tp)


@case
def groups_created_in_one_order_both_tuned():
    """2 ranks, two groups of both ranks created in the same order on both: each rank tunes on the first, then on
    the second (torch names them '1' and '2' on both ranks)."""
    groups_in_one_order(late_s=0.0)


@case
def groups_created_in_one_order_a_rank_late():
    """As :func:`groups_created_in_one_order_both_tuned`, rank 1 coming to the first group's tuning 5 s late, rank 0
    to the second's: each waits at a group's first exchange for a rank merely late, past the look at its name."""
    groups_in_one_order(late_s=5.0)


@case
def groups_tuned_from_two_threads_in_other_orders():
    """2 ranks, two groups of both ranks created in one order, each tuned from a thread of its own: on rank 0 the
    first group's thread calls at once and the second's 5 s later, on rank 1 the other way round. Each rank's first
    wait stands at one group while its peer's stands at the other, 5 s long, and both complete: a thread of each
    process comes to the other group."""
    tdt.init_distributed()
    me = dist.get_rank()
    groups = {"first_group": dist.new_group([0, 1]), "second_group": dist.new_group([0, 1])}
    late = "second_group" if me == 0 else "first_group"

    def tune(name: str) -> None:
        if name == late:
            time.sleep(5.0)
        call(layer(name), autotune_pg=groups[name])

    threads = [threading.Thread(target=tune, args=(name,), name=name) for name in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@case
def groups_in_one_order_a_rank_stopped_as_its_first_wait_ends():
    """2 ranks, two groups of both ranks created in one order. Rank 1 waits at the first group's first exchange for
    rank 0 until it has written its name of that group (2 s into the wait; a file ``$FAULT_DIR/named.rank1`` says so,
    which rank 0 waits for: a fixed 3 s before once stood in for it, which a loaded rank 1, slow to come to its
    wait, could outlast), and stops (SIGSTOP, after writing its pid at ``$FAULT_DIR/stop-me.rank1``: the test
    continues it) as that wait ends, before it deletes its key. That call
    ends on both ranks at its first exchange (rank 1's cache_key_extra raises, rank 0's is '': a BadInputError
    on every rank there, every field alike), and
    rank 0 goes on to tune on the second group, where it waits for rank 1 past its look at rank 1's key, which
    still names the first group: rank 1 met rank 0 there, and is waited for (both tunings of the second group
    complete once it is continued)."""
    from _cases import pid_marker

    from triton_dist_tune.group import names

    tdt.init_distributed()
    me = dist.get_rank()
    first, second = dist.new_group([0, 1]), dist.new_group([0, 1])
    named = Path(os.environ["FAULT_DIR"]) / "named.rank1"
    if me == 1:
        real, marker, look = names.Names.close, Path(os.environ["FAULT_DIR"]) / "stop-me.rank1", names.Names.look

        def looked(self: names.Names, *args: object, **kwargs: object) -> dict[int, str]:
            found = look(self, *args, **kwargs)
            if self._written and not named.exists():  # its name is in the store: rank 0 may come
                named.touch()
            return found

        def close(self: names.Names) -> None:  # the wait is over, its key still up: stop here, once
            if self._written and not marker.exists():
                pid_marker(marker)
                os.kill(os.getpid(), signal.SIGSTOP)
            real(self)

        names.Names.look, names.Names.close = looked, close  # type: ignore[method-assign]
    else:
        waited_for([named])

    def extra() -> str:
        if me == 1:
            raise ValueError("no cache_key_extra on rank 1")
        return ""

    call(layer("stopped_first", cache_key_extra=extra), autotune_pg=first)
    call(layer("stopped_second"), autotune_pg=second)


def groups_in_one_order(late_s: float) -> None:
    tdt.init_distributed()
    me = dist.get_rank()
    first, second = dist.new_group([0, 1]), dist.new_group([0, 1])
    for late_rank, group, name in ((1, first, "first_group"), (0, second, "second_group")):
        if me == late_rank:
            time.sleep(late_s)
        call(layer(name), autotune_pg=group)


@case
def replicas_given_by_one_replica_only():
    """Replica 0 (ranks 0 and 1) passes autotune_replicas; replica 1 (ranks 2 and 3) forgets it and tunes its TP
    group alone, never coming to the exchanges across replicas that ranks 0 and 1 wait at."""
    me, tp, across = two_by_two()
    call(layer("replicas_one_side"), autotune_pg=tp, **({"autotune_replicas": across} if me < 2 else {}))


@case
def a_rank_killed_before_its_first_call():
    """TP groups {0, 1} and {2, 3}: rank 3 is SIGKILLed before it calls (no board beats yet: rank 2 waits at its
    first agreement for a rank no beat can show dead); ranks 0 and 1 tune their own group, then stay (rank 0 hosts
    the job's store) until rank 2's call has ended (at most the timeout and 10 s), rank 0 until the others are
    done with the store."""
    gone_before_its_first_call("killed_before", "kill")


@case
def a_rank_crashing_before_its_first_call():
    """As :func:`a_rank_killed_before_its_first_call`, rank 3 raising an uncaught error (its model's set-up
    crashed): its exit hooks run, and it counts out."""
    gone_before_its_first_call("crashed_before", "raise")


def gone_before_its_first_call(name: str, end: str) -> None:
    me, tp, _ = two_by_two()
    store = dist.distributed_c10d._get_default_store()
    if me == 3 and end == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if me == 3:
        raise RuntimeError("the model's set-up failed on rank 3")
    call(layer(name), autotune_pg=tp)
    if me > 0:
        if me == 1:
            store.wait(["case/done/2"], timedelta(seconds=float(os.environ["TRITON_DIST_AUTOTUNE_TIMEOUT"]) + 10))
        store.set(f"case/done/{me}", b"1")
    else:  # (last: its process hosts the store, which its os._exit ends at once, a peer's request in flight or not)
        store.wait(["case/done/1", "case/done/2"],
                   timedelta(seconds=float(os.environ["TRITON_DIST_AUTOTUNE_TIMEOUT"]) + 10))
    sys.stdout.flush()
    os._exit(0)  # (no barrier at the end: rank 3 is gone)


@case
def a_rank_late_but_alive_before_its_first_call():
    """TP groups {0, 1} and {2, 3}: rank 3 comes to its first call 4 s after the others (alive: its peer's looks at
    whether it has ended, once a second from 2 s into the wait, find nothing), and every rank's tuning succeeds."""
    me, tp, _ = two_by_two()
    if me == 3:
        time.sleep(4)
    call(layer("late_but_alive"), autotune_pg=tp)


@case
def one_key_tuned_as_replicas_then_alone():
    """One function and key tuned twice into one cache folder: first with the replicas tuned as one, then by each TP
    group alone (another cache entry: a layout's decision includes its replica count)."""
    me, tp, across = two_by_two()
    f = layer("two_layouts")
    call(f, autotune_pg=tp, autotune_replicas=across)
    call(f, autotune_pg=tp)


@case
def two_ranks_end_their_job_without_calling():
    """4 ranks: ranks 2 and 3 end their process normally (their exit counts them out of the job) without calling the
    function that ranks 0 and 1 tune on the default group; ranks 0 and 1 wait for them until the timeout."""
    me, _, _ = two_by_two()
    if me >= 2:
        sys.stdout.flush()
        sys.exit(0)
    call(layer("ended_without"))
    sys.stdout.flush()
    sys.exit(0)  # (no barrier at the end: ranks 2 and 3 are gone; rank 0, the store's host, lingers for rank 1)


@case
def tp_group_on_two_ranks_default_group_on_two():
    """Ranks 0 and 1 tune on their TP group; ranks 2 and 3 pass no autotune_pg (the default group), and wait there
    for ranks 0 and 1, which never come to it."""
    me, tp, _ = two_by_two()
    call(layer("membership"), **({"autotune_pg": tp} if me < 2 else {}))


@case
def rank_0_waiting_first_and_a_short_wait_timing_out():
    """3 ranks at a barrier: rank 0 comes first (deadline 60 s), then rank 1 (deadline 0.3 s, under the 1 s after
    which rank 0's wait first looks and logs its arrival), while rank 2 comes only once rank 1 has given up. What
    rank 1's timeout names as never arrived (rank 2 alone: rank 0 was there all along)."""
    from triton_dist_tune.group import store as comm
    from triton_dist_tune.group.resolve import resolve_group

    tdt.init_distributed(backend="gloo")
    group = resolve_group(None)
    store = comm._job_store()
    group.barrier("first barrier")
    if group.rank == 0:
        store.set("test/rank0_in", b"1")  # (just before its wait: rank 1 comes after it)
    elif group.rank == 1:
        store.wait(["test/rank0_in"])
    else:
        store.wait(["test/rank1_done"])
    t0 = time.perf_counter()
    try:
        group.barrier("late barrier", timeout=0.3 if group.rank == 1 else 60)
        emit(rank=group.rank, error=None, seconds=time.perf_counter() - t0)
    except tdt.AutotuneError as exc:
        emit(rank=group.rank, error=type(exc).__name__, message=str(exc), seconds=time.perf_counter() - t0)
    if group.rank == 1:
        store.set("test/rank1_done", b"1")


@case
def rank_0_waiting_while_a_rank_that_logged_itself_times_out():
    """4 ranks at a barrier: rank 0 comes first (deadline 60 s) and logs its arrival in the barrier's log of arrivals
    at its first look; then rank 1 (deadline 2 s: it looks and logs itself too, then gives up); rank 2 comes only once
    rank 1 has given up (deadline 3 s), and rank 3 only once rank 2 has. What rank 2's timeout names as never
    arrived: rank 3 alone (rank 0 waits there all along, and rank 1's message is in the store)."""
    from triton_dist_tune.group import store as comm
    from triton_dist_tune.group.resolve import resolve_group
    from triton_dist_tune.group.store_peek import peek

    tdt.init_distributed(backend="gloo")
    group = resolve_group(None)
    store = comm._job_store()
    group.barrier("first barrier")
    log = group._key(group._seq + 1, "log")  # (the late barrier's log of arrivals)
    if group.rank == 1:  # comes once rank 0's first look has logged it (deterministic: read, not timed)
        deadline = time.monotonic() + 30
        while b"0," not in (peek(store, log) or b"") and time.monotonic() < deadline:
            time.sleep(0.05)
    elif group.rank > 1:
        store.wait([f"test/rank{group.rank - 1}_done"])
    t0 = time.perf_counter()
    try:
        group.barrier("late barrier", timeout={1: 2.0, 2: 3.0}.get(group.rank, 60.0))
        emit(rank=group.rank, error=None, seconds=time.perf_counter() - t0)
    except tdt.AutotuneError as exc:
        emit(rank=group.rank, error=type(exc).__name__, message=str(exc), seconds=time.perf_counter() - t0)
    if group.rank in (1, 2):
        store.set(f"test/rank{group.rank}_done", b"1")


@case
def where_decisions_are_kept():
    """A call on the default group, one with autotune_pg (the TP group) and one with autotune_replicas too, each of
    its own key: prints where each decision is kept (docs/autotune.md: ``decided`` and ``decided_in``)."""
    me, tp, across = two_by_two()
    f = layer("where_kept", key_fn=lambda x: x.numel())
    f(torch.ones(2))
    f(torch.ones(3), autotune_pg=tp)
    f(torch.ones(5), autotune_pg=tp, autotune_replicas=across)
    emit(decided=sorted(f.tuner.decided), decided_in=sorted(repr(slot) for slot in f.tuner.decided_in),
         tp=[tp.group_name, dist.get_process_group_ranks(tp)],
         across=[across.group_name, dist.get_process_group_ranks(across)])


@case
def replicas_overlap_the_group():
    """autotune_replicas is the whole job (it holds both ranks of each TP group), not one rank of each replica."""
    _, tp, _ = two_by_two()
    call(layer("replicas_overlap"), autotune_pg=tp, autotune_replicas=dist.group.WORLD)


@case
def replicas_not_a_member():
    """Rank 3 passes as autotune_replicas a group it is not in (new_group gives it -100); the others do not call."""
    me, tp, _ = two_by_two()
    elsewhere = dist.new_group([0, 2])
    if me == 3:
        call(layer("replicas_member"), autotune_pg=tp, autotune_replicas=elsewhere)


@case
def replicas_wrong_on_one_rank():
    """Rank 3 passes as autotune_replicas a group it is not in (new_group gives it -100); the other ranks pass
    their own groups, right, and wait for it: rank 1 across replicas, rank 2 in its TP group, and rank 0 for rank 1."""
    me, tp, across = two_by_two()
    elsewhere = dist.new_group([0, 2])
    call(layer("replicas_wrong"), autotune_pg=tp, autotune_replicas=elsewhere if me == 3 else across)


@case
def note_withdrawn():
    """One process, a gloo world of one: a wrong autotune_pg posts this rank's note in the job's store; the next call
    with a right group withdraws it (the note's count goes back to 0 and its key is gone)."""
    import os
    import tempfile

    from triton_dist_tune.group.unresolved import Notes

    dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/store", rank=0, world_size=1)
    store = dist.distributed_c10d._get_default_store()
    os.environ.pop("TORCHELASTIC_RESTART_COUNT", None)
    f = layer("note")
    call(f, autotune_pg="not a group")
    emit(posted={rank: note.text for rank, note in Notes.read(store, [0]).items()})
    call(f)
    note = Notes.read(store, [0])[0]
    emit(withdrawn=note.withdrawn is not None, text=note.text, to=note.to,
         count=int(store.add("tdt/0/unresolved/count", 0)))
    os.environ["TRITON_DIST_AUTOTUNE_TIMEOUT"] = "1"
    time.sleep(2.5)  # twice the timeout: no wait that began before the withdrawal is still on
    call(layer("note_later"))  # a call that resolves its group (a decided key's call of ``f`` need not)
    emit(after=Notes.read(store, [0]), count=int(store.add("tdt/0/unresolved/count", 0)))


@case
def mpi_comm_null():
    """One process: MPI.COMM_NULL (what Split gives the ranks outside the new communicator) as autotune_pg."""
    from mpi4py import MPI

    call(layer("comm_null"), autotune_pg=MPI.COMM_NULL)


@case
def called_again_after_a_wrong_group():
    """2 ranks. Rank 1 passes a wrong autotune_pg, rank 0 the right one: both raise BadInputError (rank 0 quoting
    rank 1's note, which it posts in turn). Both catch it and call again with the right group, rank 1 3 s after
    rank 0, which waits for it at the first exchange while rank 1's note of the first call is still in the store."""
    tdt.init_distributed()
    me = dist.get_rank()
    f = layer("again")
    call(f, **({"autotune_pg": "not a group"} if me == 1 else {}))
    if me == 1:
        time.sleep(3)
    call(f)
    call(f)  # cached: one more exchange, in step


@case
def stale_note_of_another_group():
    """4 ranks, TP groups {0, 1} and {2, 3}. Rank 1 calls one function with a wrong autotune_pg: it raises
    BadInputError and posts its note; rank 0, waiting for it, raises it too; ranks 2 and 3 tune their group's key,
    not concerned. Then every rank tunes another function on the whole job, rank 1 4 s late (still handling its
    error): ranks 2 and 3 wait for it there while its note (and rank 0's) is still in the store."""
    me, tp, _ = two_by_two()
    call(layer("stale_tp"), autotune_pg="not a group" if me == 1 else tp)
    if me == 1:
        time.sleep(4)
    call(layer("stale_world"))


@case
def stale_note_same_function():
    """As :func:`stale_note_of_another_group`, but the second call is of the same function, at the same key: every
    rank calls it again on the whole job, rank 1 4 s late. Ranks 2 and 3 tuned that key on their TP group in the
    first call, which rank 1's note is not about, and now wait for rank 1 while its note is still in the store. With
    ``ANSWER_LATE`` set, rank 0 calls 1.5 s late, so that ranks 2 and 3 read the note before rank 0 answers it."""
    me, tp, _ = two_by_two()
    f = layer("stale_same")
    if me == 0 and os.environ.get("ANSWER_LATE"):
        time.sleep(1.5)
    call(f, autotune_pg="not a group" if me == 1 else tp)
    if me == 1:
        time.sleep(4)
    call(f)
    call(f)  # decided on the whole job: no exchange


@case
def wrong_group_then_at_once_another():
    """4 ranks, TP groups {0, 1} and {2, 3}, replica groups {0, 2} and {1, 3}. Rank 0 calls a tuned function on its
    TP group and waits for rank 1. Rank 1, 5 s later (rank 0 is waiting by then, under load too), calls it with the
    other TP group, which it is not in: it raises BadInputError and posts its note; it catches the error and calls
    again at once on its replica group {1, 3}, with rank 3, which resolves well. Rank 2 does not call. Rank 3 calls
    once rank 1's note reads withdrawn: waiting there before, it would read the note if it looked between its
    posting and its withdrawal (milliseconds, up to a second on a loaded machine), and rightly raise it (its wait
    would then have begun in the note's call, for all it can tell): one CI run saw that."""
    from triton_dist_tune.group.unresolved import Notes

    tdt.init_distributed()
    me = dist.get_rank()
    tps = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    across = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    f = layer("wrong_then_other")
    if me == 0:
        call(f, autotune_pg=tps[0])
    elif me == 1:
        time.sleep(5)
        call(f, autotune_pg=tps[1])  # not a member: BadInputError, a note
        call(f, autotune_pg=across[1])  # at once, a right group: the note withdrawn
    elif me == 3:
        store, deadline = dist.distributed_c10d._get_default_store(), time.monotonic() + 60
        while time.monotonic() < deadline and getattr(Notes.read(store, [1]).get(1), "withdrawn", None) is None:
            time.sleep(0.05)
        call(f, autotune_pg=across[1])


@case
def wrong_group_withdrawn_before_a_peer_waits():
    """As :func:`wrong_group_then_at_once_another`, but rank 0 calls on its TP group only once rank 1 has called
    with the group it is not in (BadInputError, a note) and again on its replica group {1, 3}, with rank 3 (the note
    withdrawn): rank 0 reaches its wait for rank 1 after the withdrawal, and rank 1 never comes to that group. Rank 2
    does not call."""
    withdrawn_before_a_peer_waits("withdrawn_then_late", end="")


@case
def wrong_group_withdrawn_then_ended():
    """As :func:`wrong_group_withdrawn_before_a_peer_waits`, but rank 1 then ends its process normally (destroys
    the process group and exits: its exit hooks run), and rank 0 calls on its TP group only once rank 1's exit
    hooks have run (an exit hook the case registered before rank 1's first call, so that it runs after the
    tuner's, sets a key rank 0 waits for). Ranks 0, 2 and 3 end without :func:`_cases.main`'s barrier (rank 1 is
    gone), rank 0, which hosts the store, last."""
    withdrawn_before_a_peer_waits("withdrawn_then_ended", end="exit")


@case
def wrong_group_withdrawn_then_killed():
    """As :func:`wrong_group_withdrawn_then_ended`, but rank 1 SIGKILLs itself after its calls (no exit hook runs,
    nothing marks its note), and rank 0 calls on its TP group once rank 1 has withdrawn its note (before or after
    the kill lands)."""
    withdrawn_before_a_peer_waits("withdrawn_then_killed", end="kill")


@case
def wrong_group_withdrawn_then_killed_elsewhere():
    """As :func:`wrong_group_withdrawn_then_killed`, with rank 1 started in a pid namespace of its own (the test
    runs it under ``unshare --pid``): its note's process is on another "host" for rank 0, which cannot read it gone
    from ``/proc`` and reads its note's beat instead."""
    withdrawn_before_a_peer_waits("withdrawn_then_killed_elsewhere", end="kill")


def withdrawn_before_a_peer_waits(name: str, end: str) -> None:
    """Rank 1 calls ``name``'s function with a TP group it is not in, then on its replica group {1, 3} with rank 3;
    then rank 0 calls it on its TP group {0, 1} and waits for rank 1 there. ``end``: "exit": rank 1 ends its
    process after its calls, and rank 0 calls only after rank 1's exit hooks have run; "kill": rank 1 SIGKILLs
    itself after its calls; "": rank 1 stays."""
    ended = bool(end)
    tdt.init_distributed()
    me = dist.get_rank()
    store = dist.distributed_c10d._get_default_store()
    tps = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    across = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    f = layer(name)
    if me == 0:
        store.wait(["case/exited" if end == "exit" else "case/withdrawn"])  # rank 1's calls are over (its process)
        call(f, autotune_pg=tps[0])
    elif me == 1:
        if end == "exit":  # registered before the tuner's hook (at rank 1's first note): runs after it
            atexit.register(store.set, "case/exited", b"1")
        call(f, autotune_pg=tps[1])  # not a member: BadInputError, a note
        call(f, autotune_pg=across[1])  # a right group: the note withdrawn
        store.set("case/withdrawn", b"1")
        if end == "kill":
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if ended:
            dist.destroy_process_group()
            sys.exit(0)
    elif me == 3:
        call(f, autotune_pg=across[1])
    if ended:  # rank 1 is gone: no barrier; the store's host (rank 0) leaves once the others are done
        if me == 0:
            store.wait(["case/done/2", "case/done/3"])
        else:
            store.set(f"case/done/{me}", b"1")
        sys.stdout.flush()
        os._exit(0)


#: the seconds each new client of the job's store takes in :func:`wrong_group_beside_slow_clones` (a resolver that
#: stalls each new connection: docs/operations.md, made deterministic)
SLOW_CLONE_S = 20.0


@case
def wrong_group_beside_slow_clones():
    """2 ranks; every new client of the job's store takes :data:`SLOW_CLONE_S` to connect (``clone`` wrapped to
    sleep first, where torch defines it; the clients are real). Rank 1 calls with a wrong autotune_pg (its note
    posted, its beat started, its exit's client asked for), rank 0 with the right group (it waits for rank 1, and
    raises its note's error). Then rank 1 runs its exit's marking of the note (``Notes.end``, timed) and rank 0
    reads whether the mark is in the store. Each rank's call: its seconds and error; rank 1: the clients asked for on
    its calling thread."""
    import threading

    from triton_dist_tune.group.unresolved import NOTES, Notes

    tdt.init_distributed()
    me, store = dist.get_rank(), dist.distributed_c10d._get_default_store()
    asked: list[str] = []
    for cls in (dist.TCPStore, dist.PrefixStore):
        def slow(self, _clone=cls.clone):
            asked.append(threading.current_thread().name)
            time.sleep(SLOW_CLONE_S)
            return _clone(self)

        cls.clone = slow
    call(layer("slow_clones_note"), **({"autotune_pg": "not a group"} if me == 1 else {}))
    if me == 1:
        began = time.perf_counter()
        NOTES.end()  # what its exit hook does (main() ends the process without exit hooks)
        emit(end_s=time.perf_counter() - began, on_caller=asked.count(threading.current_thread().name))
        store.set("case/ended", b"1")
    else:
        store.wait(["case/ended"])
        emit(marked=Notes.read(store, [1])[1].ended is not None)


@case
def stale_pass_on_note():
    """As :func:`stale_note_same_function`, but the rank late to the second call is rank 0, the one that answered
    rank 1's note in the first call (waiting in their TP group) and posted its own note passing the error on: every
    rank calls the function again on the whole job, rank 1 4 s late (its note stays until its next call, so that rank
    0 reads it) and rank 0 20 s late (over the 10 s ``STALE_GRACE_S``), and ranks 2 and 3 wait for rank 0 there while
    its pass-on note of the first call is still in the store."""
    me, tp, _ = two_by_two()
    f = layer("stale_pass_on")
    call(f, autotune_pg="not a group" if me == 1 else tp)
    if me < 2:
        time.sleep(20 if me == 0 else 4)
    call(f)
    call(f)  # decided on the whole job: no exchange


if __name__ == "__main__":
    main()
