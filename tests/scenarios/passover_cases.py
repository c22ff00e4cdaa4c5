"""Multi-rank scenarios of a rank interrupted after its turn's last exchange (``group/passover.py``), run by
tests/test_passover.py.

Usage: python passover_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set; ``LEAVER``: the group rank
interrupted, or several, comma-separated; ``THEN``: what it does next: ``ends`` its process, ``lives`` on without
calling the tuner again, calls ``again`` at once, or calls again ``late``, past the peers' grace). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main, waited_for

import triton_dist_tune as tdt


def _summed(call, x: torch.Tensor) -> dict:
    """What ``call(x)`` gave: the sum of its value, or the error it raised (an interruption is raised on)."""
    try:
        return {"error": None, "value": float(call(x).sum())}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def _end(markers: list[str]) -> None:
    """End this process without the final barrier of :func:`main` (a rank has ended, or will not come to it),
    once every file of ``markers`` exists (the peers are done: rank 0 may host the store)."""
    waited_for(markers, 120)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@case
def left_after_the_last_exchange():
    """On the default group's channel: every rank makes exchange A in a turn; rank ``LEAVER`` is interrupted
    (KeyboardInterrupt) inside that turn right after A, its last exchange. The other ranks begin their next turn once
    it was (a file), and make exchange C there; each emits what C gave, how long it took and its exchange count.
    ``THEN=again``: the leaver catches it and makes C too; then every rank makes D. ``ends``: it does not catch it
    (its process ends by the interruption). ``lives``: it catches it and calls the tuner no more until the others
    are done. ``late``: it catches it and makes C past the others' grace (8 s more), and they, whose C raised, make
    C once more (their call again); then every rank makes D. ``THREADS=1`` (with ``again``): on every rank, A's turn
    runs on one thread and C's and D's on another, which waits for the group's turn while the first holds it.
    With ``again`` and ``late``, the leaver emits last whether its "left" record is still in the store."""
    import threading

    try:
        from triton_dist_tune.group.passover import GRACE_S
    except ImportError:  # (the code before the grace)
        GRACE_S = 5.0
    from triton_dist_tune.group.resolve import resolve_group

    tdt.init_distributed(backend="gloo")
    me, group = dist.get_rank(), resolve_group(None)
    leavers, then = [int(r) for r in os.environ["LEAVER"].split(",")], os.environ["THEN"]
    folder = os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]
    os.makedirs(folder, exist_ok=True)
    raised = [os.path.join(folder, f"raised.{r}") for r in leavers]
    done = [os.path.join(folder, f"done.{r}") for r in range(dist.get_world_size()) if r not in leavers]

    def exchange(what: str) -> None:
        t0 = time.monotonic()
        try:
            said = {"error": None, "value": group.allgather(me, what)}
        except Exception as exc:
            said = {"error": type(exc).__name__, "message": str(exc)}
        emit(rank=me, what=what, seconds=time.monotonic() - t0, seq=group.exchanges(), **said)

    def rest() -> None:  # C (and D) on every rank, once the leaver was interrupted
        if me not in leavers:
            waited_for(raised, 60)
        with group.turn():
            exchange("C")
        if then == "late" and me not in leavers:
            with group.turn():
                exchange("C")
        if then not in ("again", "late"):
            open(os.path.join(folder, f"done.{me}"), "w").close()
            _end(done)
        with group.turn():
            exchange("D")
        if me in leavers:
            emit(rank=me, what="left record", kept=group.store.check([left["key"]]))

    in_a = threading.Event()
    left: dict[str, str] = {}
    leave = group.leave

    def noting_leave(interruption: BaseException) -> None:  # the key of the "left" record, as it is written
        leave(interruption)
        left["key"] = group._back[0]

    group.leave = noting_leave

    def first() -> None:  # A, in a turn the leaver leaves by KeyboardInterrupt
        try:
            with group.turn():
                exchange("A")
                in_a.set()
                if me in leavers:
                    time.sleep(0.2)  # (the other thread, if any, waits for the turn meanwhile)
                    open(raised[leavers.index(me)], "w").close()
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            emit(rank=me, what="A", error="KeyboardInterrupt")
            if then == "ends":
                raise
            if then == "lives":
                _end(done)
            if then == "late":
                time.sleep(GRACE_S + 8)

    if os.environ.get("THREADS") != "1":
        first()
        rest()
        return
    threads = [threading.Thread(target=first), threading.Thread(target=lambda: in_a.wait(60) and rest())]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@case
def contextual_left_at_its_end():
    """Rank ``LEAVER``'s rank log raises KeyboardInterrupt at the line ending a ``contextual_autotune`` function's
    tuning call (after its last exchange). ``THEN=ends``: not caught, its process ends; ``again``: caught, and it
    calls an ``autotune`` key at once, as the other ranks do. Each rank emits what each call gave and how long it
    took."""
    import triton
    from _kernels import increment

    from triton_dist_tune.disk import logs

    tdt.init_distributed(backend="gloo")
    me, leaver, then = dist.get_rank(), int(os.environ["LEAVER"]), os.environ["THEN"]
    add_one = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128)], key=["n"])(increment)

    class Interrupting(logging.Handler):
        armed = True

        def emit(self, record: logging.LogRecord) -> None:
            if me == leaver and Interrupting.armed and "done after" in record.getMessage():
                Interrupting.armed = False
                raise KeyboardInterrupt

    logs.rank_log().addHandler(Interrupting())

    @tdt.contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1)
    def runs(x):
        add_one[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
        return x

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, name="next")
    def after(x, *, c):
        return x * c

    for name, call in (("runs", runs), ("next", after)):
        t0 = time.monotonic()
        try:
            said = _summed(call, torch.ones(64))
        except KeyboardInterrupt:
            emit(rank=me, what=name, error="KeyboardInterrupt", seconds=time.monotonic() - t0)
            if then == "ends":
                raise
            continue
        emit(rank=me, what=name, seconds=time.monotonic() - t0, **said)
    if then == "ends":  # (rank 0 may host the store: it ends last)
        folder = os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]
        open(os.path.join(folder, f"done.{me}"), "w").close()
        _end([os.path.join(folder, f"done.{r}") for r in range(dist.get_world_size()) if r != leaver])


@case
def tune_left_at_the_decision():
    """The closing review's case (``tune_exit_after_last``): rank 1's rank log raises KeyboardInterrupt at the
    decision's line of an ``autotune`` tuning (key 8), after the tuning's last exchange; ``THEN=ends``: not caught,
    its process ends; ``again``: caught, and it calls key 16 at once. Rank 0 tunes key 8, then key 16; with
    ``again`` both then call key 8 again (``what``: "8 again"), decided on both, and tune key 32. Each rank emits
    what each call gave and how long it took."""
    from triton_dist_tune.disk import logs

    tdt.init_distributed(backend="gloo")
    me, then = dist.get_rank(), os.environ["THEN"]

    class Interrupting(logging.Handler):
        armed = True

        def emit(self, record: logging.LogRecord) -> None:
            if me == 1 and Interrupting.armed and "decision: config" in record.getMessage():
                Interrupting.armed = False
                raise KeyboardInterrupt

    logs.rank_log().addHandler(Interrupting())

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, name="last")
    def last(x, *, c):
        return x * c

    for i, n in enumerate((8, 16) if then == "ends" else (8, 16, 8, 32)):
        t0 = time.monotonic()
        try:
            said = _summed(last, torch.ones(n))
        except KeyboardInterrupt:
            emit(rank=me, n=n, error="KeyboardInterrupt", seconds=time.monotonic() - t0)
            if then == "ends":
                raise
            continue
        emit(rank=me, n=n, seconds=time.monotonic() - t0, **said, **({"what": "8 again"} if i == 2 else {}))
    if then == "ends":
        _end([])


@case
def tune_interrupted_waiting_for_the_decision():
    """Rank 1 is interrupted (SIGINT, KeyboardInterrupt) inside its wait for the result of the last exchange of an
    ``autotune`` tuning (key 8: "decision written"), its message written; rank 0 gives that result only once rank 1
    caught it (rank 0's cache write waits for a file). ``NEXT=same``: rank 1 then calls key 8 again at once
    (``what``: "8 again"), and both call key 8 again ("8 once more") and tune key 16. ``other``: rank 1's next call
    is of another tuned function on the group (``other``, key 16), which rank 0 calls after key 8 "once more"; then
    rank 1 calls key 8 "once more". ``exchange``: the same with an exchange of the group's channel in a turn of its
    own instead of ``other`` (what a call other than a tuning makes first: a contextual call, a campaign).
    ``capture``: as ``same``, rank 1's "8 again" made as if inside a CUDA graph's capture (its check that the key is
    decided comes first). ``decided``: both ranks first tune key 4 of ``other``; rank 1's next call is of that
    decided key ("4 again", which emits the keys of ``late`` decided then), then both call key 8 "once more".
    ``AT=read``: rank 1 is interrupted once it has read that result instead, before its call took it (a
    KeyboardInterrupt raised where the result is decoded), and rank 0 does not wait; ``AT=kept``: the same, raised
    where the tuning keeps the decision (after the exchange). ``AT=twice``: rank 1 is
    interrupted once more inside its call "8 again", whose read of that result waits (rank 0 gives it once rank 1
    caught both), then calls key 8 a third time ("8 third"). Each rank emits what each call gave, and how long it
    took."""
    import signal
    import threading

    from triton_dist_tune.group.resolve import resolve_group

    signal.signal(signal.SIGINT, signal.default_int_handler)
    tdt.init_distributed(backend="gloo")
    me, group = dist.get_rank(), resolve_group(None)
    caught = os.path.join(os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"], "caught")
    twice = os.environ.get("AT") == "twice"

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, name="late")
    def late(x, *, c):
        return x * c

    @tdt.autotune([{"c": c} for c in (1, 2)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, name="other")
    def other(x, *, c):
        return x * c

    if os.environ.get("AT") == "read":
        if me == 1:
            from triton_dist_tune.group import store

            decode = store.unpack

            def interrupted_once_read(payload, what, *args):
                if "decision written" in what and not os.path.exists(caught):
                    raise KeyboardInterrupt
                return decode(payload, what, *args)

            store.unpack = interrupted_once_read
    elif os.environ.get("AT") == "kept":
        if me == 1:
            from triton_dist_tune.function import tuning

            keep = tuning.keep

            def interrupted_once_kept(*args):
                if not os.path.exists(caught):
                    raise KeyboardInterrupt
                return keep(*args)

            tuning.keep = interrupted_once_kept
    elif me == 0:
        cache, write = late.tuner.cache, late.tuner.cache.store

        def slow_write(*args, **kwargs):  # the result comes once rank 1 caught its interruption (or both)
            waited_for([caught, caught + "2"] if twice else [caught], 60)
            return write(*args, **kwargs)

        cache.store = slow_write
    else:
        def interrupt_in_the_wait() -> None:  # once rank 1's message of the decision's exchange is in the store
            while not ("decision written" in group._what and "[late" in group._what
                       and group._sent == group.exchanges()):
                time.sleep(0.01)
            time.sleep(0.2)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            if twice:  # inside "8 again", whose read of the result waits for rank 0
                waited_for([caught], 60)
                time.sleep(1.5)
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

        threading.Thread(target=interrupt_in_the_wait, daemon=True).start()
    calls = [(late, 8, 8), (late, 8, "8 again"), *([(late, 8, "8 third")] if twice else []), (late, 8, "8 once more"),
             (late, 16, 16)]

    def exchange(x: torch.Tensor) -> torch.Tensor:
        with group.turn():
            return torch.tensor(group.allgather(float(x.numel()), "C"))

    if os.environ["NEXT"] in ("other", "exchange"):
        calls = [(late, 8, 8), (other if os.environ["NEXT"] == "other" else exchange, 16, 16), (late, 8, "8 once more")]
        calls = calls if me == 1 else [calls[0], calls[2], calls[1]]
    if os.environ["NEXT"] == "decided":
        calls = [(other, 4, 4), (late, 8, 8), (other, 4, "4 again"), (late, 8, "8 once more"), (late, 16, 16)]
    if os.environ["NEXT"] == "capture" and me == 1:
        import triton_dist_tune.tune as tune_module

        def as_if_captured(x: torch.Tensor) -> torch.Tensor:
            saved, tune_module.capturing = tune_module.capturing, lambda: True
            try:
                return late(x)
            finally:
                tune_module.capturing = saved

        calls[1] = (as_if_captured, 8, "8 again")
    for f, n, what in calls:
        if me == 0 and what in ("8 again", "8 third"):
            continue
        t0 = time.monotonic()
        try:
            said = _summed(f, torch.ones(n))
        except KeyboardInterrupt:
            said = {"error": "KeyboardInterrupt"}
            with open(caught + "2" if os.path.exists(caught) else caught, "w"):
                pass
        if what == "4 again":
            said["late_keys"] = sorted(late.tuner.decided)
        emit(rank=me, what=what, seconds=time.monotonic() - t0, **said)
    folder = os.path.join(os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"], "late")
    emit(rank=me, what="decided", keys=sorted(late.tuner.decided),
         journals=sorted(name for name in os.listdir(folder) if name.endswith(".journal")))


@case
def contextual_interrupted_waiting_for_its_result():
    """Rank 1 is interrupted (``SIG``: INT, KeyboardInterrupt; TERM, SystemExit) inside its wait for the result of
    a run's exchange of a ``contextual_autotune`` tuning call (key 64), its message written; rank 0 gives that result
    only once rank 1 caught it. ``AT=last``: the exchange after the final run (run 6: on the virtual clock the key
    is decided by run 5's exchange), the call's last; ``decided``: run 5's, which decides the key; ``summary``:
    rank 1's rank log raises KeyboardInterrupt at the call's summary line instead, once the call's last exchange
    was read; ``applying last``, ``applying decided``: rank 1 is interrupted once run 6's (run 5's) exchange
    returned, as it begins to apply the result (a KeyboardInterrupt raised where the result's steps are checked);
    ``decision line``: its rank log raises KeyboardInterrupt at the first decision's line (run 5's exchange decides
    two keys there: ``TWO=1``, each run launching the kernel with a second tensor, twice the size); ``signal in
    apply``: SIGINT comes as it applies the first key's step of that result (raised to itself there). Then every rank
    calls key 64 "again" and key 128 ("new"), in that order (``NEXT=same``) or the other (``other``). With
    ``LATE_COST=1`` rank 1's configs cost the other way round after its first call (a key it tuned again alone would
    choose the other config). Each rank emits, per call, what it gave, how many runs it made, the config its kernel
    runs for each key and how long it took; then the decisions and its journals left."""
    import signal
    import threading

    import triton
    from _cases import contextual_virtual_clock, spend
    from _kernels import increment

    from triton_dist_tune.group.resolve import resolve_group

    signal.signal(signal.SIGINT, signal.default_int_handler)
    tdt.init_distributed(backend="gloo")
    contextual_virtual_clock()
    me, group = dist.get_rank(), resolve_group(None)
    folder = os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]
    caught = os.path.join(folder, "caught")
    at = os.environ["AT"]
    target = f"end of run {6 if at.endswith('last') else 5}"
    two = os.environ.get("TWO") == "1"
    costs = [{64: 1.0, 128: 2.0}, {64: 3.0, 128: 2.0} if me == 1 and os.environ.get("LATE_COST") else
             {64: 1.0, 128: 2.0}]
    called = [0]

    def cost(block: int):
        return lambda nargs: spend(costs[min(called[0], 1)][block])

    add_one = triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=cost(b)) for b in (64, 128)],
                              key=["n"])(increment)

    @tdt.contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1)
    def runs(x):
        add_one[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
        if two:
            y = torch.zeros(2 * x.numel())
            add_one[lambda meta: (triton.cdiv(y.numel(), meta["BLOCK"]),)](y, y.numel())
        return x

    if at in ("summary", "decision line"):
        from triton_dist_tune.disk import logs

        line = "done after" if at == "summary" else "decision kernel="

        class Interrupting(logging.Handler):
            armed = me == 1

            def emit(self, record: logging.LogRecord) -> None:
                if Interrupting.armed and line in record.getMessage():
                    Interrupting.armed = False
                    raise KeyboardInterrupt

        logs.rank_log().addHandler(Interrupting())
    elif at.startswith("applying"):
        if me == 1:
            from triton_dist_tune.contextual import exchange as exchange_module

            check = exchange_module.check_same_steps
            armed = [True]

            def interrupted_as_it_applies(*args):  # the exchange returned: the result is about to be applied
                if armed[0] and group._what.endswith(target):
                    armed[0] = False
                    raise KeyboardInterrupt
                return check(*args)

            exchange_module.check_same_steps = interrupted_as_it_applies
    elif at == "signal in apply":
        if me == 1:
            from triton_dist_tune.contextual import exchange as exchange_module

            step, armed = exchange_module.step_track, [True]

            def signalled_in_a_step(*args):  # Ctrl-C lands while the result is applied (its handler's turn: here)
                if armed[0] and group._what.endswith(target):
                    armed[0] = False
                    signal.raise_signal(signal.SIGINT)
                return step(*args)

            exchange_module.step_track = signalled_in_a_step
    elif me == 0:
        gather = group._gather_and_send

        def held(seq, obj, fn, what, timeout):  # the result comes once rank 1 caught its interruption
            if what.endswith(target):
                waited_for([caught], 60)
            return gather(seq, obj, fn, what, timeout)

        group._gather_and_send = held
    elif me == 1:
        def interrupt_in_the_wait() -> None:  # once rank 1's message of that exchange is in the store
            while not (group._what.endswith(target) and group._sent == group.exchanges()):
                time.sleep(0.01)
            time.sleep(0.2)
            signal.pthread_kill(threading.main_thread().ident, getattr(signal, "SIG" + os.environ["SIG"]))

        threading.Thread(target=interrupt_in_the_wait, daemon=True).start()
    later = [(64, "again"), (128, "new")]
    for n, what in [(64, "first"), *(later if os.environ["NEXT"] == "same" else later[::-1])]:
        t0 = time.monotonic()
        try:
            said = _summed(runs, torch.zeros(n))
        except (KeyboardInterrupt, SystemExit) as exc:
            said = {"error": type(exc).__name__}
            open(caught, "w").close()
        called[0] += 1
        emit(rank=me, what=what, seconds=time.monotonic() - t0, runs=runs.tuner.last_runs,
             configs={str(k[0]): v.kwargs["BLOCK"] for k, v in add_one.cache.items()}, **said)
    emit(rank=me, what="decided", keys={str(k[1]): v["index"] for k, v in runs.tuner.decisions.items()},
         journals=sorted(name for name in os.listdir(os.path.join(folder, "contextual"))
                         if name.endswith(f".rank{me}.journal")))


if __name__ == "__main__":
    main()
