"""Multi-rank scenarios of issue 40's blame mechanisms, run as real gloo ranks by tests/test_blame.py.

- "A config is failed only by its own error": one rank's failing sample in a steady round ends that rank's step,
  so the configs after it in the round's order get no sample on that rank; they are missing, not failed.
- "Blame in contextual_autotune needs the same evidence as in autotune": a crash inside a race launch is blamed on
  the config launched (``killed_in_race``), and the function's own error blames no config (``function_raises``).
  Each config's ``pre_hook`` spends its cost on the virtual clock (config 1 is the fastest by 4x) and appends
  ``<ATTEMPT> <config>`` to ``$FAULT_DIR/calls.rank<r>``.

Usage: python blame_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Prints ``RESULT {json}``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
import triton
import triton.language as tl
from _cases import (
    case,
    contextual_virtual_clock,
    emit,
    in_steady_round,
    killed_with_peers,
    main,
    outcome,
    spend,
    virtual_clock,
)

import triton_dist_tune as tdt
from triton_dist_tune.contextual import contextual_autotune

#: ms per call of each config on the virtual clock: config 0 is the fastest by 3x or more
COST_MS = [2.0, 8.0, 10.0, 12.0, 6.0, 14.0]
SPACE = [{"variant": v} for v in range(len(COST_MS))]


def rows(fn) -> list[dict]:
    """Every config's outcome in the decision (none when the tuning raised)."""
    return [o.to_json() for decision in fn.tuner.decisions.values() for o in decision.outcomes]


def sample_fails_on_one_rank(mode: str) -> None:
    """The first config of the first steady round's order (config 4: the order is seeded by the key and the space)
    passes its warm-up on both ranks, then raises on rank 1 in its sample (every later sample of it raises there
    too). No collective in the function: rank 0 samples every config of the round, rank 1 stops its step at the
    failure. ``mode``: ``exhaustive`` with ``n_repeat=1`` (a one-round race), or ``search``: a one-round screening
    race, then the finalists' race."""
    tdt.init_distributed()
    failing: list[int] = []
    sampled: list[int] = []

    @tdt.autotune(SPACE, key_fn=lambda: 0, n_warmup=1, n_repeat=1 if mode == "exhaustive" else 4, batch=1,
                  search=mode, name=f"samplefails{mode}")
    def f(*, variant):
        spend(COST_MS[variant])
        if in_steady_round():
            sampled.append(variant)
            if not failing:
                failing.append(variant)
            if dist.get_rank() == 1 and variant == failing[0]:
                raise RuntimeError(f"config {variant} fails in its sample on rank 1")
        return variant

    with virtual_clock():
        result = outcome(f)
    emit(result=result, failing=failing[0] if failing else None, sampled=sampled, outcomes=rows(f))


@case
def sample_fails_exhaustive():
    sample_fails_on_one_rank("exhaustive")


@case
def sample_fails_search():
    sample_fails_on_one_rank("search")


#: the contextual cases' config costs (ms on the virtual clock): config 1 is the fastest by 4x or more
KERNEL_MS = [4.0, 1.0, 16.0]
#: the contextual cases' hook before each launch: (config index) -> None
HOOK = [lambda index: None]


def recording_hook(index: int):
    def hook(nargs):
        with open(Path(os.environ["FAULT_DIR"]) / f"calls.rank{dist.get_rank()}", "a") as f:
            f.write(f"{os.environ.get('ATTEMPT', '0')} {index}\n")
        HOOK[0](index)
        spend(KERNEL_MS[index])

    return hook


@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=recording_hook(i))
                          for i, b in enumerate((128, 256, 512))], key=["n"])
@triton.jit
def copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def contextual_layer(after=None):
    """The tuned layer: the kernel, an all_reduce, then ``after(run)`` (runs count from 1)."""
    runs = [0]

    @contextual_autotune(n_warmup=1, n_repeat=2, timeout=30)
    def layer(x):
        runs[0] += 1
        out = torch.empty_like(x)
        copy_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        dist.all_reduce(out)
        if after:
            after(runs[0])
        return out

    return layer


def contextual_result(layer) -> dict:
    """The call's choice and every config's state and error (or the call's error)."""
    x = torch.arange(64, dtype=torch.float32)
    try:
        layer(x)
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)[:600]}
    decision = next(iter(layer.tuner.decisions.values()))
    return {"chosen": decision["index"], "states": [r["state"] for r in decision["table"]],
            "errors": [r["error"] for r in decision["table"]]}


@case
def killed_in_race():
    """With KILL=1, both ranks SIGKILL themselves at config 0's second launch (its first race launch: one warm-up
    run per config before the race), once both are there (:func:`_cases.killed_with_peers`). Two such attempts
    leave config 0 out as crashed; the third (KILL=0) races configs 1 and 2 and chooses config 1."""
    tdt.init_distributed()
    contextual_virtual_clock()
    seen: list[int] = []

    def hook(index: int) -> None:
        seen.append(index)
        if os.environ.get("KILL") == "1" and index == 0 and seen.count(0) == 2:
            killed_with_peers(os.environ["FAULT_DIR"], os.environ["ATTEMPT"], dist.get_rank(), (0, 1))

    HOOK[0] = hook
    emit(**contextual_result(contextual_layer()), launched=seen)


@case
def function_raises():
    """With RAISE=1, the tuned function raises its own transient error on every rank in run 2 (config 1's warm-up
    run), after its kernel and all_reduce: every rank raises AutotuneError, and no config is to blame. Two such jobs,
    then a third (RAISE=0) must leave no config out and choose config 1."""
    tdt.init_distributed()
    contextual_virtual_clock()
    seen: list[int] = []
    HOOK[0] = seen.append

    def after(run: int) -> None:
        if os.environ.get("RAISE") == "1" and run == 2:
            raise ConnectionError("a transient error of the function's own I/O")

    emit(**contextual_result(contextual_layer(after)), launched=seen)


if __name__ == "__main__":
    main()
