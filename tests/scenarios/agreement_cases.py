"""Scenarios for settings that change a tuning's steps and may differ between ranks (each rank's environment is
set by the test): every rank must get the same clear error naming the setting, at once.

Usage: python agreement_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Prints ``RESULT {json}``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main, outcome  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune  # noqa: E402


def tune_once(name: str, **options) -> None:
    """Tune a 2-config collective function at one key (``options``: more of autotune's); emit what happened and
    how long it took."""
    tdt.init_distributed()

    @tdt.autotune([{"block": 16}, {"block": 32}], key_fn=lambda x: x.numel(), name=name, **options)
    def f(x, *, block):
        time.sleep(0.001)
        dist.all_reduce(x.clone())
        return block

    started = time.monotonic()
    emit(result=outcome(f, torch.ones(2)), seconds=time.monotonic() - started)


@case
def always_tune_differs():
    """``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE`` on one rank only (it decides which journal records the ranks plan
    from)."""
    tune_once("always")


@case
def cache_key_extra_differs():
    """``cache_key_extra`` (a function of the rank's environment, ``EXTRA``) returns another text on one rank:
    group rank 0 alone reads the cache, for the entry its own text names."""
    tune_once("extra", cache_key_extra=lambda: os.environ.get("EXTRA", ""))


@case
def cache_key_extra_not_text():
    """``cache_key_extra`` returns a number (the option asks for text): made text, as the entry's name always
    made it."""
    tune_once("extra_number", cache_key_extra=lambda: 7)


@case
def undecided_differs():
    """``TRITON_DIST_AUTOTUNE_UNDECIDED`` differs: a rank that serves an undecided key exchanges once to agree on
    what it serves, a rank that tunes it goes to the first agreement of a tuning."""
    tune_once("undecided")


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"])
@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


@case
def contextual_steps_differ():
    """``TRITON_DIST_AUTOTUNE_MAX_RUNS`` / ``..._SYNC_EVERY`` differ between the ranks: they bound a call's runs
    and set when the ranks agree on pending keys."""
    tdt.init_distributed()

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x):
        out = torch.empty_like(x)
        copy_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        dist.all_reduce(out)
        return out

    started = time.monotonic()
    emit(result=outcome(lambda: float(layer(torch.ones(64)).sum())), seconds=time.monotonic() - started)


def failing_in_phase_one(nargs):
    """Config 0's ``pre_hook``: it raises in phase 1 only (``PHASE=1``), so that phase 1's journals hold it failed."""
    if os.environ.get("PHASE") == "1":
        raise RuntimeError("config 0 fails in phase 1")


@triton.autotune(configs=[triton.Config({"BLOCK": 16}, pre_hook=failing_in_phase_one), triton.Config({"BLOCK": 32})],
                 key=["n"])
@triton.jit
def phased_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


@case
def contextual_always_tune_differs():
    """``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE`` decides which journal records a contextual call resumes from (only this
    job's under it). Phase 1 (``PHASE=1``, ``TRITON_DIST_AUTOTUNE_MAX_RUNS=1``): config 0 fails in run 0 and the
    bound ends the track, a cut: the journals (config 0 failed) stay. Phase 2 runs in another job, config 0 no
    longer fails, and the test sets ``ALWAYS_TUNE`` on some ranks only. Emits each rank's choice (or its error)."""
    tdt.init_distributed()

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x):
        out = torch.empty_like(x)
        phased_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        dist.all_reduce(out)
        return out

    started = time.monotonic()
    result = outcome(lambda: float(layer(torch.ones(64)).sum()))
    chosen = [d["index"] for d in layer.tuner.decisions.values()]
    emit(result=result, chosen=chosen, seconds=time.monotonic() - started)


if __name__ == "__main__":
    main()
