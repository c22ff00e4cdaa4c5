"""Rank cases of tests/test_unusual_input.py: edge cases of ``autotune``'s input.

Usage: python unusual_input.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from _cases import case, emit, main, outcome  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402


class StrFails(Exception):
    """An exception whose text cannot be made: ``str()`` raises."""

    def __str__(self) -> str:
        raise ValueError("no text")


@case
def error_without_text():
    """Config 0 raises, on rank 1 only, an exception whose ``str()`` raises; the function talks to no rank. Config
    0 must be left out on every rank (config 1 chosen everywhere), as for any other exception."""
    tdt.init_distributed()
    rank = dist.get_rank()

    @tdt.autotune([{"variant": 0}, {"variant": 1}], key_fn=lambda x: x.numel(), n_repeat=2)
    def no_text(x, *, variant):
        if rank == 1 and variant == 0:
            raise StrFails()
        return x * (variant + 1)

    emit(**outcome(lambda: no_text(torch.ones(4)).tolist()), decided=no_text.tuner.decided.get(4, {}).get("variant"))


@case
def alone_before_init():
    """Tune a key before ``init_distributed`` (each rank alone: rank 0 finds variant 0 slow, rank 1 variant 1, so
    they choose differently), then call again with the same key once the default group exists: the group must tune
    it and every rank run the same choice."""
    rank = int(os.environ["RANK"])

    @tdt.autotune([{"variant": 0}, {"variant": 1}], key_fn=lambda x: x.numel(), n_repeat=3)
    def alone(x, *, variant):
        if variant == rank:
            time.sleep(0.05)  # the other variant takes microseconds: no load makes them swap
        return x * (variant + 1)

    before = alone(torch.ones(4)).tolist()
    served = alone.tuner.decided.get(4)  # the hot path's table: a call before init_distributed is a dict lookup
    tdt.init_distributed()
    after = alone(torch.ones(4)).tolist()
    emit(before=before, after=after, decided=alone.tuner.decided.get(4, {}).get("variant"),
         served_before_init=served is not None)


def _sleeper(ms: int):
    def op(x):
        time.sleep(ms / 1e3)
        return x

    return op


@case
def closures_in_order():
    """One process alone: a space of closures of one factory, sleeping the ms given by ``SLEEPS`` (e.g. ``1,30``).
    Prints the index of the chosen config and the ms it sleeps."""
    sleeps = [int(v) for v in os.environ["SLEEPS"].split(",")]
    space = [{"op": _sleeper(ms)} for ms in sleeps]

    @tdt.autotune(space, key_fn=lambda x: x.numel(), n_repeat=3)
    def closures(x, *, op):
        return op(x)

    closures(torch.ones(4))
    chosen = next(i for i, c in enumerate(space) if c["op"] is closures.tuner.decided[4]["op"])
    emit(index=chosen, ms=sleeps[chosen], descriptions=closures.tuner.descriptions)


@case
def campaign_calls_not_iterable():
    """Rank 1 gives ``campaign`` a number for its calls, rank 0 a list (found by a reviewer)."""
    tdt.init_distributed()

    @tdt.autotune([{"v": 0}, {"v": 1}], key_fn=lambda x: x.numel(), timing="cold", n_repeat=1, name="calls")
    def f(x, *, v):
        dist.all_reduce(x.clone())
        return x * (v + 1)

    began = time.monotonic()
    try:
        tdt.campaign(f, 3 if dist.get_rank() == 1 else [torch.ones(4)])
        emit(error=None)
    except Exception as exc:
        emit(error=f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - began)


if __name__ == "__main__":
    main()
