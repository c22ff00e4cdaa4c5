"""A ``contextual_autotune`` rank interrupted inside a hot call's new-key settlement (``contextual/newkeys.py``), the
interruption caught, the program calling on. Usage: python newkey_interrupted_cases.py CASE."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main, waited_for

import triton_dist_tune as tdt


@case
def interrupted_in_the_settlement():
    """Calls: key 64 (the group's first call: tunes), then key 128 three times. ``AT=in the wait``: rank 0's hot
    call meets key 128 undecided and waits in the settlement, where its SIGINT comes (sent to itself at its wait's
    first poll, after its ``add``); rank 1 comes to its second call only once rank 0 has caught that interruption (a
    file), and its ``add`` then makes the count whole. (Before: rank 1 came a second late and the SIGINT came 0.25 s
    into rank 0's call, an order a loaded machine could break: rank 0 not yet at its ``add`` by then, or at it only
    after rank 1's.) ``AT=after now``: rank 0 comes 0.3 s late instead, completes the count (``now``), and is
    interrupted as its settlement returns, before the tuning's first exchange (a KeyboardInterrupt raised there; the
    count is ``now`` whichever rank adds first). ``AT=in the last compare``: rank 1's second call, a second late,
    meets key 64 (decided), so rank 0 settles key 128 alone and, its grace over, is interrupted as its
    ``compare_set`` of ``later`` returns (the settlement's last requests)."""
    from _kernels import copying_layer

    signal.signal(signal.SIGINT, signal.default_int_handler)
    tdt.init_distributed(backend="gloo")
    me = dist.get_rank()

    layer = copying_layer(is_dist=True, n_warmup=1, n_repeat=1)

    import os

    from triton_dist_tune.contextual import session

    after_now, last_compare = os.environ.get("AT") == "after now", os.environ.get("AT") == "in the last compare"
    in_the_wait = not after_now and not last_compare
    caught = Path(os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"]).parent / "caught"  # (rank 0 caught its interruption)
    if me == 0 and not after_now:
        from triton_dist_tune.group import store as store_module

        real_store, armed, added = store_module.StoreGroup.store, [False], [False]

        class Interrupting:  # the job's store, but rank 0 is interrupted at one point of its settlement, once
            def __init__(self, store):
                self._store = store

            def __getattr__(self, name):
                return getattr(self._store, name)

            def add(self, key, amount):
                found = self._store.add(key, amount)
                added[0] = added[0] or (armed[0] and str(key).endswith("/n"))
                return found

            def check(self, keys):  # in the wait: its first poll after this rank's add, a real SIGINT to itself
                if in_the_wait and armed[0] and added[0]:
                    armed[0] = False
                    signal.raise_signal(signal.SIGINT)
                return self._store.check(keys)

            def compare_set(self, key, expected, desired):  # in the last compare: the first "later", as it returns
                found = self._store.compare_set(key, expected, desired)
                if last_compare and armed[0] and desired == "later":
                    armed[0] = False
                    raise KeyboardInterrupt
                return found

        store_module.StoreGroup.store = property(lambda group: Interrupting(real_store.fget(group)))
    if after_now and me == 0:
        settle = session.settle

        def interrupted_after(*args):  # the call goes on as a tuning call on every rank: interrupted just then
            if settle(*args):
                raise KeyboardInterrupt
            return False

        session.settle = interrupted_after
    for i, n in enumerate([64, 128, 128, 128]):
        if i == 1 and me == 1 and in_the_wait:
            waited_for([caught])
        elif i == 1 and me == (0 if after_now else 1):
            time.sleep(0.3 if after_now else 1.0)  # (after now: within rank 1's grace, which the test sets long)
        if i == 1 and me == 0 and not after_now:
            armed[0] = True
        if i == 2 and after_now and me == 0:
            session.settle = settle
        t0 = time.monotonic()
        try:
            layer(torch.ones(64 if last_compare and i == 1 and me == 1 else n))
            said = {"error": None}
        except KeyboardInterrupt:
            said = {"error": "KeyboardInterrupt"}
            caught.touch()
        except Exception as exc:  # noqa: BLE001 (what the test asserts on)
            said = {"error": type(exc).__name__, "message": str(exc)[:300]}
        emit(rank=me, what=i, n=n, seconds=round(time.monotonic() - t0, 2),
             decided=sorted(str(k[1]) for k in layer.tuner.decisions), **said)


if __name__ == "__main__":
    main()
