"""Multi-rank scenarios of issue 34 defects 1, 2, 3 and 8, run by tests/test_reliability_c.py: a cut keeps the best
measured, a search ends only on evidence, a resumed search replays its stages.

Usage: python reliability_c_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines. Every tuned call launches a real Triton kernel (Triton's interpreter on CPU ranks).
"""

from __future__ import annotations

import itertools
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main, spend, virtual_clock  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.errors import AllConfigsFailedError  # noqa: E402

#: an 80-config space (5 x 4 x 4): more than the search threshold (64), so it is searched; the first look is 16
SPACE = [{"BLOCK": block, "a": a, "b": b} for block, a, b in itertools.product((16, 32, 64, 128, 256), range(4),
                                                                                range(4))]


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def leave(**fields: object) -> None:
    """Emit and end at once, with no barrier (the other rank is gone or elsewhere)."""
    emit(**fields)
    sys.stdout.flush()
    os._exit(0)


def landscape_ms(config: dict) -> float:
    """A smooth bowl over the space: 1 ms at (BLOCK 64, a 2, b 1), more away from it."""
    return 1.0 + abs(config["BLOCK"].bit_length() - 7) + abs(config["a"] - 2) + 0.5 * abs(config["b"] - 1)


@case
def function_first_look_fails():
    """Defect 2: ``autotune`` over the 80 configs, whose first 16 distinct configs run (the search's first look)
    raise on every rank; every other config works. The search must go on to untried configs and choose one."""
    tdt.init_distributed(backend="gloo")
    seen: list[int] = []
    failing = int(os.environ.get("FAILING", "16"))

    @tdt.autotune(SPACE, key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=3, timing="cold", name="first_look",
                  timeout=30)
    def f(x, *, BLOCK, a, b):
        index = SPACE.index({"BLOCK": BLOCK, "a": a, "b": b})
        if index not in seen:
            seen.append(index)
        if index in seen[:failing]:
            raise RuntimeError(f"config {index} does not run here")
        spend(landscape_ms(SPACE[index]))
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, x, out, x.numel(), BLOCK=BLOCK)
        dist.all_reduce(out)
        return out

    x = torch.ones(64)
    with virtual_clock():
        try:
            out = f(x)
        except AllConfigsFailedError as exc:
            emit(error=type(exc).__name__, message=str(exc)[:400], tried=len(seen), failing=seen[:failing])
            return
        except Exception as exc:
            emit(error=type(exc).__name__, message=str(exc)[:400], tried=len(seen), failing=seen[:failing])
            return
    ((_, decision),) = f.tuner.decisions.items()
    emit(error=None, chosen=decision.index, tried=len(seen), failing=seen[:failing], search=decision.search,
         ok=bool(torch.equal(out, 2 * dist.get_world_size() * x)))


if __name__ == "__main__":
    main()
