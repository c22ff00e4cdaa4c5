"""Scenarios for the search in ``contextual_autotune``: an inner ``triton.autotune`` kernel of 120 configs (more than
the search threshold), each config's ``pre_hook`` spending a smooth landscape's time on the virtual clock (10 ms at its
bottom, 4x that at its rim; ``_cases.contextual_virtual_clock``, so that load cannot reorder configs), on real ranks
with Triton's interpreter.

Usage: python contextual_search_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Prints ``RESULT``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import random  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, contextual_virtual_clock, emit, main, spend

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune  # noqa: E402

#: the configs' parameters: 12 x 10 = 120 configs; the landscape's bottom at (A, B) = (8, 3)
A_VALUES, B_VALUES, BOTTOM = range(12), range(10), (8, 3)
LAUNCHED: list[int] = []


def landscape_ms(a: int, b: int) -> float:
    return 10.0 * (1 + 3 * (((a - BOTTOM[0]) / 11) ** 2 + ((b - BOTTOM[1]) / 9) ** 2) / 2)


#: the ranks' own noise in the ``noisy`` case, a fraction of each launch's time (rank r: JITTER[r % 4])
JITTER = (0.0, 0.1, 0.05, 0.15)
NOISE = {"jitter": 0.0, "random": random.Random(0)}


def sleeper(index: int, a: int, b: int):
    def hook(nargs):
        LAUNCHED.append(index)
        spend(landscape_ms(a, b) * (1.0 + NOISE["jitter"] * NOISE["random"].random()))

    return hook


CONFIGS = [triton.Config({"BLOCK": 128, "A": a, "B": b}, pre_hook=sleeper(i, a, b))
           for i, (a, b) in enumerate((a, b) for a in A_VALUES for b in B_VALUES)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def add_kernel(x, y, out, n, A: tl.constexpr, B: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@case
def landscape():
    """Tune the 120-config kernel inside a function with an all_reduce, on every rank (the default: searched)."""
    tune_landscape()


@case
def noisy():
    """The searched tuning with noise of each rank's own (:data:`JITTER`), for 4 ranks."""
    rank = int(os.environ["RANK"])
    NOISE.update(jitter=JITTER[rank % len(JITTER)], random=random.Random(1000 + rank))
    tune_landscape()


@case
def landscape_exhaustive():
    """The same with ``search="exhaustive"``: every config is measured."""
    tune_landscape(search="exhaustive")


def tune_landscape(**options):
    tdt.init_distributed()
    contextual_virtual_clock()
    runs = [0]
    LAUNCHED.clear()

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3, **options)
    def layer(x, y):
        runs[0] += 1
        out = torch.empty_like(x)
        add_kernel[(1,)](x, y, out, x.numel())
        dist.all_reduce(out)
        return out

    x, y = torch.ones(64), torch.ones(64)
    out = layer(x, y)
    ((_, decision),) = layer.tuner.decisions.items()
    chosen = decision["index"]
    a, b = CONFIGS[chosen].kwargs["A"], CONFIGS[chosen].kwargs["B"]
    emit(chosen=chosen, chosen_ms=landscape_ms(a, b), best_ms=landscape_ms(*BOTTOM), runs=runs[0],
         ok=bool(torch.equal(out, dist.get_world_size() * (x + y))), launched=len(set(LAUNCHED)),
         states=sorted({r["state"] for r in decision["table"]}))


if __name__ == "__main__":
    main()
