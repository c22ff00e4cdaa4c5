"""Scenarios of code ported from ``triton.autotune``: an ``early_config_prune`` that returns configs of its own
making inside ``contextual_autotune``, and a stock ``@triton.autotune`` kernel launched by an ``autotune`` function
under Triton's interpreter; run as real processes by tests/test_migration.py.

Usage: python migration_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402

#: the BLOCK of every launch of the pruned kernels (a config pre_hook records it)
BLOCKS: list[int] = []


def record(nargs):
    BLOCKS.append(int(nargs["BLOCK"]))


def pruned_kernel(prune):
    @triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=record) for b in (32, 64)], key=["n"],
                     prune_configs_by={"early_config_prune": prune})
    @triton.jit
    def add_one(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)

    return add_one


def tune_pruned(prune) -> None:
    """Tune ``pruned_kernel(prune)`` on the default group; emit what happened."""
    tdt.init_distributed()
    kernel = pruned_kernel(prune)

    @tdt.contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x):
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out

    x = torch.arange(300, dtype=torch.float32)
    BLOCKS.clear()
    try:
        ok = bool(torch.equal(layer(x), x + 1))
        emit(ok=ok, launched=sorted(set(BLOCKS)), best=kernel.best_config.kwargs)
    except Exception as exc:
        from triton.runtime.errors import AutotunerError

        emit(error=type(exc).__name__, message=str(exc), bad_input=isinstance(exc, tdt.BadInputError),
             triton_error=isinstance(exc, AutotunerError), launched=sorted(set(BLOCKS)))


@case
def prune_makes_a_config():
    """The pruning keeps the first config and adds one of its own (BLOCK 256), as stock Triton would benchmark."""
    tune_pruned(lambda configs, nargs, **kw: [configs[0], triton.Config({"BLOCK": 256}, pre_hook=record)])


@case
def prune_returns_equal_copies():
    """The pruning returns new Config objects equal to the kernel's own: they are the kernel's configs."""
    tune_pruned(lambda configs, nargs, **kw: [triton.Config(dict(c.kwargs), pre_hook=record) for c in configs])


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
@triton.jit
def stock_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * 2, mask=mask)


@case
def stock_autotune_inside_autotune():
    """A function tuned by ``autotune`` launches a stock ``@triton.autotune`` kernel (2 configs) under the
    interpreter: Triton's own benchmarking asks for a GPU driver on every config."""
    @tdt.autotune([{"chunks": c} for c in (1, 2)], key_fn=lambda x: x.numel())
    def f(x, *, chunks):
        out = torch.empty_like(x)
        stock_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out

    try:
        f(torch.ones(100))
        emit(ok=True)
    except Exception as exc:
        emit(error=type(exc).__name__, message=str(exc), interpret=os.environ.get("TRITON_INTERPRET"),
             ranks=dist.get_world_size() if dist.is_initialized() else 1)


if __name__ == "__main__":
    main()
