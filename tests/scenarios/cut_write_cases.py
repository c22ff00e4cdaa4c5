"""A rank SIGKILLed while it writes a decision into the cache: between its temporary file's write and its rename into
place. Usage: python cut_write_cases.py CASE."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt


@case
def tune_once():
    """Env: KILL_AT_RENAME (the rank SIGKILLed, by a real signal to itself, as it is about to rename a decision's
    temporary file, ``.<entry>.json.XXXXXXXX.tmp``, into place; none where unset). One key tuned, then said."""
    tdt.init_distributed(backend="gloo")
    me = dist.get_rank()
    if os.environ.get("KILL_AT_RENAME") == str(me):
        rename = os.replace

        def killed_at_rename(src, dst, *args, **kwargs):
            if str(src).endswith(".tmp") and str(dst).endswith(".json"):
                os.kill(os.getpid(), signal.SIGKILL)
            return rename(src, dst, *args, **kwargs)

        os.replace = killed_at_rename

    @tdt.autotune(config_space=[{"v": v} for v in range(3)], key_fn=lambda x, **_: (x.numel(),), n_warmup=1,
                  n_repeat=2, name="cut")
    def work(x, *, v):
        time.sleep((3 - v) * 2e-3)
        return x * (v + 1)

    work(torch.ones(4))
    emit(rank=me, decided=[c["v"] for c in work.tuner.decided.values()])


if __name__ == "__main__":
    main()
