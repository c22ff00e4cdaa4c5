"""Multi-rank scenarios of two ranks of one group leaving one ``autotune`` tuning at different exchanges, run by
tests/test_passover.py.

Usage: python two_leavers_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, 3 ranks). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main, waited_for

import triton_dist_tune as tdt


@case
def tune_leavers_apart():
    """Key 8's tuning (``autotune``, 3 configs): rank 2 is interrupted (KeyboardInterrupt) just before its message of
    the tuning's last exchange ("decision written"), so its "left" record lies there, and calls again ``DELAY`` s
    later (past the peers' grace); rank 1 is interrupted inside its wait for that exchange's result, its message
    written, and calls again at once. Rank 0 gives that result only once rank 1 caught its interruption (its cache
    write waits): rank 2 counted out there, the result is the ``RankFailedError`` every rank raises. Then every rank
    calls key 8 again and key 16. ``R2_AT``: rank 2 is interrupted inside its wait for the result of the exchange
    whose step ends so instead (rank 0 gives it once rank 2 caught it). Each rank emits what each call gave, and how
    long it took."""
    from triton_dist_tune.group.resolve import resolve_group

    signal.signal(signal.SIGINT, signal.default_int_handler)
    tdt.init_distributed(backend="gloo")
    me, group = dist.get_rank(), resolve_group(None)
    caught = os.path.join(os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"], "caught")

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, name="late")
    def late(x, *, c):
        return x * c

    r2_at = os.environ.get("R2_AT", "")  # rank 2 is interrupted inside its wait for this exchange's result instead
    if me == 0:
        write, gather = late.tuner.cache.store, group._gather_and_send

        def slow_write(*args, **kwargs):  # the result comes once rank 1 caught its interruption
            waited_for([caught], 60)
            return write(*args, **kwargs)

        late.tuner.cache.store = slow_write

        def held(seq, obj, fn, what, timeout):  # R2_AT's result comes once rank 2 caught its interruption
            if r2_at and what.endswith(r2_at):
                waited_for([caught + ".2"], 60)
            return gather(seq, obj, fn, what, timeout)

        group._gather_and_send = held
    if me in (1, 2) and (me == 1 or r2_at):
        target = "decision written" if me == 1 else r2_at

        def interrupt_in_the_wait() -> None:  # once this rank's message of that exchange is in the store
            while not (group._what.endswith(target) and group._sent == group.exchanges()):
                time.sleep(0.01)
            time.sleep(0.2)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

        threading.Thread(target=interrupt_in_the_wait, daemon=True).start()
    elif me == 2:
        broadcast = group.broadcast

        def interrupted_before(obj, what, **kwargs):  # an interruption between the race's end and this exchange
            if "decision written" in what and not os.path.exists(caught + ".2"):
                raise KeyboardInterrupt
            return broadcast(obj, what, **kwargs)

        group.broadcast = interrupted_before
    for n, what in [(8, 8), (8, "8 again"), (16, 16)]:
        t0 = time.monotonic()
        try:
            said = {"error": None, "value": float(late(torch.ones(n)).sum())}
        except KeyboardInterrupt:
            said = {"error": "KeyboardInterrupt"}
            open(caught if me == 1 else caught + ".2", "w").close()
            if me == 2:
                time.sleep(float(os.environ["DELAY"]))
        except Exception as exc:
            said = {"error": type(exc).__name__, "message": str(exc)[:300]}
        emit(rank=me, what=what, seconds=round(time.monotonic() - t0, 2), **said)
    emit(rank=me, what="decided", keys=sorted(late.tuner.decided))


if __name__ == "__main__":
    main()
