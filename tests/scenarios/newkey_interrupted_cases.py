"""A ``contextual_autotune`` rank interrupted inside a hot call's new-key settlement (``contextual/newkeys.py``), the
interruption caught, the program calling on. Usage: python newkey_interrupted_cases.py CASE."""

from __future__ import annotations

import signal
import threading
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt


@case
def interrupted_in_the_settlement():
    """Calls: key 64 (the group's first call: tunes), then key 128 three times. Rank 1 comes to its second call one
    second late, so rank 0, whose hot call met key 128 undecided, waits in the settlement (after its ``add``) when
    its SIGINT comes, 0.25 s into that call; rank 1's ``add`` then makes the count whole: ``now``. ``AT=after
    now``: rank 0 comes 0.3 s late instead, completes the count (``now``), and is interrupted as its settlement
    returns, before the tuning's first exchange (a KeyboardInterrupt raised there). ``AT=in the last compare``: rank
    1's second call meets key 64 (decided), so rank 0 settles key 128 alone and, its grace over, is interrupted as
    its ``compare_set`` of ``later`` returns (the settlement's last requests)."""
    from _kernels import copying_layer

    signal.signal(signal.SIGINT, signal.default_int_handler)
    tdt.init_distributed(backend="gloo")
    me = dist.get_rank()

    layer = copying_layer(is_dist=True, n_warmup=1, n_repeat=1)

    import os

    from triton_dist_tune.contextual import session

    after_now, last_compare = os.environ.get("AT") == "after now", os.environ.get("AT") == "in the last compare"
    if last_compare and me == 0:
        from triton_dist_tune.group import store as store_module

        real_store, armed = store_module.StoreGroup.store, [False]

        class InterruptedAsLaterIsWritten:  # the job's store, but the first "later" written raises as it returns
            def __init__(self, store):
                self._store = store

            def __getattr__(self, name):
                return getattr(self._store, name)

            def compare_set(self, key, expected, desired):
                found = self._store.compare_set(key, expected, desired)
                if armed[0] and desired == "later":
                    armed[0] = False
                    raise KeyboardInterrupt
                return found

        store_module.StoreGroup.store = property(lambda group: InterruptedAsLaterIsWritten(real_store.fget(group)))
    if after_now and me == 0:
        settle = session.settle

        def interrupted_after(*args):  # the call goes on as a tuning call on every rank: interrupted just then
            if settle(*args):
                raise KeyboardInterrupt
            return False

        session.settle = interrupted_after
    main_thread = threading.main_thread().ident
    for i, n in enumerate([64, 128, 128, 128]):
        if i == 1 and me == (0 if after_now else 1):
            time.sleep(0.3 if after_now else 1.0)  # (after now: within rank 1's grace, which the test sets long)
        if i == 1 and me == 0 and last_compare:
            armed[0] = True
        if i == 1 and me == 0 and not after_now and not last_compare:
            threading.Timer(0.25, lambda: signal.pthread_kill(main_thread, signal.SIGINT)).start()
        if i == 2 and after_now and me == 0:
            session.settle = settle
        t0 = time.monotonic()
        try:
            layer(torch.ones(64 if last_compare and i == 1 and me == 1 else n))
            said = {"error": None}
        except KeyboardInterrupt:
            said = {"error": "KeyboardInterrupt"}
        except Exception as exc:  # noqa: BLE001 (what the test asserts on)
            said = {"error": type(exc).__name__, "message": str(exc)[:300]}
        emit(rank=me, what=i, n=n, seconds=round(time.monotonic() - t0, 2),
             decided=sorted(str(k[1]) for k in layer.tuner.decisions), **said)


if __name__ == "__main__":
    main()
