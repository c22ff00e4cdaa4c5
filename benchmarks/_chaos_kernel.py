"""The Triton kernel of the chaos ranks' ``contextual_autotune`` functions (``_chaos_rank.py``,
``_chaos_interrupt_rank.py``): a copy tuned by ``triton.autotune`` over one config per block size (16, 32, 64, ...),
each config's pre_hook calling the rank's ``on_config(index)`` (its injected fault, its record of what ran), then
sleeping that config's time, so that every launch of a config is one call the rank sees and the configs differ."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def tuned_copy(configs: int, on_config: Callable[[int], object],
               sleep_ms: Sequence[float]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``copy(x)``: a copy of ``x`` by :func:`copy_kernel` under ``triton.autotune`` (key: the size), over
    ``configs`` block sizes, config ``i``'s pre_hook calling ``on_config(i)``, then sleeping ``sleep_ms[i]`` ms."""

    def hook_of(index: int) -> Callable[[dict[str, Any]], None]:
        def hook(nargs: dict[str, Any]) -> None:
            on_config(index)
            time.sleep(sleep_ms[index] / 1e3)

        return hook

    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 16 << i}, pre_hook=hook_of(i)) for i in range(configs)],
                            key=["n"])(copy_kernel)

    def copy(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        tuned[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out

    return copy
