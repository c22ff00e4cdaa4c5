"""The first mistakes of a newcomer (issue 29, item 7), run by tests/test_newcomer.py.

Usage: python newcomer_cases.py CASE... (RANK/WORLD_SIZE set by the harness). No case initializes a process group
unless it says so: each prints ``RESULT {"error": ..., "message": ...}`` for what its call raised.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import triton
import triton.language as tl
from _cases import case, emit, main

import triton_dist_tune as tdt


def outcome(fn, *args, **kwargs) -> dict[str, str]:
    """What ``fn(*args, **kwargs)`` raised: its class name and message (``ok`` when it returned)."""
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": "", "message": "ok"}


@case
def no_init():
    """A function with a collective, on 2 launched ranks that never called init_process_group."""

    @tdt.autotune([{"v": v} for v in range(3)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=2)
    def reduce_(x, *, v):
        dist.all_reduce(x)
        return x

    emit(**outcome(reduce_, torch.ones(4)))


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)


@case
def no_driver():
    """A Triton kernel on a machine without a GPU, without TRITON_INTERPRET=1."""

    @tdt.autotune([{"block": b} for b in (16, 32)], key_fn=lambda x: x.numel(), n_repeat=1)
    def add(x, *, block):
        add_one[(1,)](x, x.numel(), BLOCK=block)
        return x

    emit(**outcome(add, torch.ones(8)))


@case
def by_position():
    """A tuned parameter passed by position (or by keyword), with a key_fn written for the call without it."""

    @tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0])
    def plain(x, v):
        return x

    @tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x, *a: x.shape[0])
    def keyword_only(x, *, v):
        return x

    emit(plain=outcome(plain, torch.ones(4), 1), keyword_only=outcome(keyword_only, torch.ones(4), 1),
         by_keyword=outcome(plain, torch.ones(4), v=1))


@case
def typo_on_decided_key():
    """An unknown ``autotune_*`` keyword, once the key is decided and before, with a key_fn taking no keywords."""

    @tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_repeat=1)
    def scale(x, *, v):
        return x * (v + 1)

    scale(torch.ones(4))
    emit(decided=outcome(scale, torch.ones(4), autotune_verbos=True),
         undecided=outcome(scale, torch.ones(5), autotune_verbos=True))


if __name__ == "__main__":
    main()
