"""A rank interrupted as its store write of its part of an exchange returns (a signal that came during the write:
Python runs its handler as the write returns), before its channel counted that part written: the chaos run's
``write`` trigger (benchmarks/_chaos_interrupt.py), narrowed. Usage: python interrupted_write_cases.py CASE."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt


@case
def written_then_interrupted():
    """Env: LEAVER (group rank), AT (the exchange whose write the signal follows: its number by the group's count,
    or a part of its step's name, the first such), HOLD (s
    from the write to the signal: where the peers read the part first), PLAN (the keys called, in order). One
    ``autotune`` function, no collective; the leaver catches its KeyboardInterrupt and calls on."""
    from triton_dist_tune.group.resolve import resolve_group

    signal.signal(signal.SIGINT, signal.default_int_handler)
    tdt.init_distributed(backend="gloo")
    me, group = dist.get_rank(), resolve_group(None)
    at, hold, fired = os.environ["AT"], float(os.environ.get("HOLD", "0.5")), []
    if me == int(os.environ["LEAVER"]):
        write = group._write_new

        def written(seq, slot, payload, what):
            write(seq, slot, payload, what)
            if (str(seq) == at or at in what) and not fired:
                fired.append(what)
                time.sleep(hold)
                signal.raise_signal(signal.SIGINT)

        group._write_new = written

    @tdt.autotune(config_space=[{"v": v} for v in range(3)], key_fn=lambda x, **_: (x.numel(),), n_warmup=1,
                  n_repeat=2, timing="cold", name="written")
    def work(x, *, v):
        time.sleep((1 + 4 * v) * 2e-3)
        return x * (v + 1)

    for i, n in enumerate(int(k) for k in os.environ["PLAN"].split(",")):
        t0 = time.monotonic()
        try:
            work(torch.ones(n))
            said = {"error": None}
        except KeyboardInterrupt:
            said = {"error": "KeyboardInterrupt", "at": fired[0] if fired else None}
        except Exception as exc:  # noqa: BLE001 (what the test asserts on)
            said = {"error": type(exc).__name__, "message": str(exc)[:400]}
        emit(rank=me, what=i, n=n, seconds=round(time.monotonic() - t0, 2), exchanges=group.exchanges(),
             decided={str(k[0]): c["v"] for k, c in work.tuner.decided.items()}, **said)


if __name__ == "__main__":
    main()
