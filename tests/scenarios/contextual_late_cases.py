"""Multi-rank scenarios of a ``contextual_autotune`` rank interrupted inside its wait for the result of an exchange
of a tuning call, its message written (``contextual/exchange.py``), run by tests/test_passover.py.

Usage: python contextual_late_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
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
def interrupted_then_called():
    """Every rank calls a ``contextual_autotune`` function at the sizes ``PLAN`` lists (comma-separated); rank 1 is
    interrupted (SIGINT) inside its wait for the result of call ``AT_CALL``'s exchange whose step ends with
    ``AT``, which rank 0 gives only once rank 1 caught it. Its configs cost 1 where BLOCK is the size, else 2 (on
    the virtual clock; the first config, a hot call's local default, is BLOCK 64). ``MAX_RUNS``: the decorator's
    bound. ``CAPTURE``: the call (by position) made as inside a CUDA graph's capture. Each rank emits, per call, what
    it gave, its runs, the (size, BLOCK) of its last launch and how long it took."""
    import triton
    from _cases import contextual_virtual_clock, spend
    from _kernels import block_matched_increment

    from triton_dist_tune.contextual import hot
    from triton_dist_tune.contextual import tuner as tuner_module
    from triton_dist_tune.group.resolve import resolve_group

    signal.signal(signal.SIGINT, signal.default_int_handler)
    tdt.init_distributed(backend="gloo")
    contextual_virtual_clock()
    me, group = dist.get_rank(), resolve_group(None)
    folder = os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]
    os.makedirs(folder, exist_ok=True)
    caught, at_call, target = os.path.join(folder, "caught"), int(os.environ["AT_CALL"]), os.environ["AT"]
    current, launched, began = [-1], [], [0]  # began: the group's exchanges before the current call

    add_one = block_matched_increment(spend, lambda: launched)

    @tdt.contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1, max_runs=int(os.environ.get("MAX_RUNS", "50")))
    def runs(x):
        add_one[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
        return x

    if me == 0:
        gather = group._gather_and_send

        def held(seq, obj, fn, what, timeout):  # the result comes once rank 1 caught its interruption
            if current[0] == at_call and what.endswith(target):
                waited_for([caught], 60)
            return gather(seq, obj, fn, what, timeout)

        group._gather_and_send = held
    elif me == 1:
        def interrupt_in_the_wait() -> None:  # once rank 1's message of that exchange of that call is in the store
            while not (current[0] == at_call and group.exchanges() > began[0] and group._what.endswith(target)
                       and group._sent == group.exchanges()):
                time.sleep(0.01)
            time.sleep(0.2)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

        threading.Thread(target=interrupt_in_the_wait, daemon=True).start()
    for i, n in enumerate(int(n) for n in os.environ["PLAN"].split(",")):
        began[0] = group.exchanges()  # (before current: an earlier call's last exchange may end with AT too)
        current[0] = i
        launched.clear()
        captured = str(i) == os.environ.get("CAPTURE")
        if captured:
            tuner_module.capturing = hot.capturing = lambda: True
        t0 = time.monotonic()
        try:
            said = {"error": None, "value": float(runs(torch.zeros(n)).sum())}
        except KeyboardInterrupt:
            said = {"error": "KeyboardInterrupt"}
            open(caught, "w").close()
        except Exception as exc:
            said = {"error": type(exc).__name__, "message": str(exc)}
        finally:
            if captured:
                from triton_dist_tune.capture import capturing

                tuner_module.capturing = hot.capturing = capturing
        emit(rank=me, what=i, seconds=time.monotonic() - t0, runs=runs.tuner.last_runs, last=launched[-1:], **said)


if __name__ == "__main__":
    main()
