"""Code ported from ``triton.autotune`` to ``autotune`` as docs/autotune.md says (the kernel a plain ``@triton.jit``
one, each ``triton.Config`` a value of ``config_space``, launched with ``**config.all_kwargs()``), run by real
ranks in Triton's interpreter; tests/test_triton_port.py asserts what each rank prints.

Usage: python triton_port_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}``.
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402


@triton.jit
def accumulate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``out += x`` by atomic adds, as a split-K GEMM writes its partial sums: ``out`` must start at zero."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def zero_out(nargs: dict) -> None:
    """The configs' ``pre_hook``, as a split-K kernel's ``triton.Config(..., pre_hook=...)`` zeroes its output."""
    nargs["out_ptr"].zero_()


CONFIGS = [triton.Config({"BLOCK": block}, num_warps=4, pre_hook=zero_out) for block in (64, 128)]


def launch(x: torch.Tensor, out: torch.Tensor, config: triton.Config) -> None:
    n = x.numel()
    accumulate_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, **config.all_kwargs())


@case
def config_pre_hook():
    """A ``triton.Config``'s ``pre_hook`` that the ported function never calls, and one that it calls: the first is
    said when decorating (Triton calls it before every launch; ``**config.all_kwargs()`` leaves it out)."""
    tdt.init_distributed()
    with warnings.catch_warnings(record=True) as unhooked_warnings:
        warnings.simplefilter("always")

        @tdt.autotune([{"config": c} for c in CONFIGS], key_fn=lambda x, out: x.numel(), reset_to_zero=["out"])
        def unhooked(x, out, *, config):
            launch(x, out, config)
            dist.all_reduce(out)
            return out

    with warnings.catch_warnings(record=True) as hooked_warnings:
        warnings.simplefilter("always")

        @tdt.autotune([{"config": c} for c in CONFIGS], key_fn=lambda x, out: x.numel(), reset_to_zero=["out"])
        def hooked(x, out, *, config):
            if config.pre_hook:
                config.pre_hook({"x_ptr": x, "out_ptr": out})
            launch(x, out, config)
            dist.all_reduce(out)
            return out

    x = torch.ones(300)
    values = {}
    for name, fn in (("unhooked", unhooked), ("hooked", hooked)):
        for call in ("tuning", "decided"):
            out = torch.full((300,), 7.0)  # the caller's values, which the config's pre_hook zeroes
            values[f"{name} {call}"] = sorted(set(fn(x, out).tolist()))
    emit(unhooked=[(str(w.message), w.category.__name__, os.path.basename(w.filename)) for w in unhooked_warnings],
         hooked=[str(w.message) for w in hooked_warnings], values=values, ranks=dist.get_world_size())


if __name__ == "__main__":
    main()
