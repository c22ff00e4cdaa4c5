"""An ``autotune`` rank interrupted inside its ``key_fn`` (before it knows whether its key needs the group), run by
tests/test_interrupted_elsewhere.py. Usage: python key_fn_interrupted_cases.py CASE (RANK/WORLD_SIZE/... set)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main, waited_for

import triton_dist_tune as tdt


@case
def interrupted_in_key_fn():
    """Every rank calls keys ``PLAN`` (comma-separated sizes; the first is tuned before anything happens); a call
    that raised is made once more (its caller catches the error and calls again), a KeyboardInterrupt included. Rank
    ``LEAVER``'s ``key_fn`` is interrupted at the call of index ``AT`` (KeyboardInterrupt): raised by ``key_fn``
    itself (``HOW=raise``) or by SIGINT 0.2 s into it (``signal``), at its first call in that call (the decorated
    function's lookup: ``WHERE=lookup``) or its second (the tuner's, the key undecided: ``tuner``). ``THEN``: the
    leaver calls again at once (``again``), after the peers' grace (``late``: 8 s more), lives on without calling
    the tuner again (``lives``), or ends its process (``ends``: the KeyboardInterrupt is not caught; with ``lives``
    too, the peers call no more after that call). Each call
    emits what it gave and how long it took; every rank emits its decisions at the end."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tdt.init_distributed(backend="gloo")
    me, world = dist.get_rank(), dist.get_world_size()
    leaver, at, then = int(os.environ["LEAVER"]), int(os.environ["AT"]), os.environ["THEN"]
    how, where = os.environ.get("HOW", "raise"), os.environ.get("WHERE", "lookup")
    folder = os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]
    os.makedirs(folder, exist_ok=True)
    armed, invoked = [False], [0]
    main_thread = threading.main_thread().ident

    def key_fn(x):
        if armed[0]:
            invoked[0] += 1
            if invoked[0] == (1 if where == "lookup" else 2):
                armed[0] = False
                if how == "raise":
                    raise KeyboardInterrupt
                threading.Timer(0.2, lambda: signal.pthread_kill(main_thread, signal.SIGINT)).start()
                time.sleep(5)  # (the signal's handler raises in here)
        return x.numel()

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=key_fn, n_warmup=1, n_repeat=2, name="keyed")
    def keyed(x, *, c):
        return x * c

    def called(n: int, what: str) -> bool:
        t0 = time.monotonic()
        try:
            said = {"error": None, "value": float(keyed(torch.ones(n)).sum())}
        except KeyboardInterrupt:
            said = {"error": "KeyboardInterrupt"}
        except Exception as exc:
            said = {"error": type(exc).__name__, "message": str(exc)[:400]}
        emit(rank=me, what=what, n=n, seconds=round(time.monotonic() - t0, 2), **said)
        return said["error"] is None

    done = [os.path.join(folder, f"done.{r}") for r in range(world) if r != leaver]
    for index, n in enumerate(int(n) for n in os.environ["PLAN"].split(",")):
        if me == leaver and index == at:
            armed[0], invoked[0] = True, 0
            if then == "ends":
                sys.stdout.flush()
                keyed(torch.ones(n))  # (the KeyboardInterrupt ends the process: the peers may host the store)
            if called(n, f"{index}"):
                continue
            if then == "lives":  # (it ends once the peers are done: their last call waits for nobody)
                waited_for(done, 120)
                sys.stdout.flush()
                os._exit(0)
            if then == "late":
                time.sleep(float(os.environ.get("PASSOVER_GRACE_S", "5")) + 8)
            called(n, f"{index} again")
            continue
        if not called(n, f"{index}") and then not in ("ends", "lives"):
            called(n, f"{index} again")
        if index == at and then in ("ends", "lives"):  # (the rank that left never comes to the group again)
            break
    emit(rank=me, what="decided", keys=sorted(keyed.tuner.decided))
    if then in ("ends", "lives"):
        open(os.path.join(folder, f"done.{me}"), "w").close()
        if me == 0:
            waited_for(done[1:], 120)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
