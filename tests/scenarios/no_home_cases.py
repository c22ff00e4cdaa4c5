"""Ranks some of which have no home folder: ``HOME`` unset and a real user id with no entry in the password database
(a container run as an arbitrary user), where ``Path.home()`` raises. Usage: python no_home_cases.py CASE."""

from __future__ import annotations

import os
import pwd
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt


def unknown_uid() -> int:
    """A user id the password database does not name."""
    uid = 54321
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


def lose_home() -> None:
    """This process's real user id becomes one the password database does not name (its effective one stays: its
    files stay readable) and ``HOME`` is unset: it has no home folder. Needs root."""
    os.environ.pop("HOME", None)
    os.setresuid(unknown_uid(), os.geteuid(), os.geteuid())


@case
def tune_without_home():
    """Env: NO_HOME (the ranks that have no home folder, e.g. ``1``). The function is decorated after the rank lost
    its home, then called once."""
    tdt.init_distributed(backend="gloo")
    me = dist.get_rank()
    if str(me) in os.environ["NO_HOME"].split(","):
        lose_home()

    @tdt.autotune(config_space=[{"v": v} for v in range(2)], key_fn=lambda x, **_: (x.numel(),), n_warmup=1,
                  n_repeat=2, name="homeless")
    def work(x, *, v):
        time.sleep((1 + v) * 1e-3)
        return x * (v + 1)

    t0 = time.monotonic()
    try:
        work(torch.ones(4))
        said = {"error": None, "message": None}
    except Exception as exc:  # noqa: BLE001 (what the test asserts on)
        said = {"error": type(exc).__name__, "message": str(exc)[:600]}
    emit(rank=me, seconds=round(time.monotonic() - t0, 2), decided=[c["v"] for c in work.tuner.decided.values()],
         **said)


@case
def contextual_without_home():
    """Env: NO_HOME, as above; a ``contextual_autotune`` layer of two Triton kernels (contextual_cases.py) called
    once."""
    from contextual_cases import add_reduce_scale, inputs

    tdt.init_distributed(backend="gloo")
    me = dist.get_rank()
    if str(me) in os.environ["NO_HOME"].split(","):
        lose_home()
    layer = add_reduce_scale(n_warmup=1, n_repeat=1)
    t0 = time.monotonic()
    try:
        layer(*inputs())
        said = {"error": None, "message": None}
    except Exception as exc:  # noqa: BLE001 (what the test asserts on)
        said = {"error": type(exc).__name__, "message": str(exc)[:600]}
    emit(rank=me, seconds=round(time.monotonic() - t0, 2), **said)


if __name__ == "__main__":
    main()
