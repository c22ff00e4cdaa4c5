"""Triton kernels that several scenario files wrap in their own ``@triton.autotune`` (import it after the scenario
has set ``TRITON_INTERPRET``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl


@triton.jit
def increment(x_ptr, n, BLOCK: tl.constexpr):
    """``x += 1`` in place, ``BLOCK`` elements per program."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def block_matched_increment(spend: Callable[[float], None],
                            launched: Callable[[], list[tuple[int, int]]] | None = None) -> Any:
    """:func:`increment` under ``triton.autotune`` over ``BLOCK`` 64 and 128, keyed by ``n``: a launch ``spend``s 1
    unit of the scenario's clock where its ``BLOCK`` is ``n``, else 2 (so the config whose ``BLOCK`` is the size
    wins), and appends ``(n, BLOCK)`` to the list ``launched()`` returns, where given."""

    def cost(block: int) -> Callable[[dict[str, Any]], None]:
        def hook(nargs: dict[str, Any]) -> None:
            if launched is not None:
                launched().append((int(nargs["n"]), block))
            spend(1.0 if block == int(nargs["n"]) else 2.0)
        return hook

    return triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=cost(b)) for b in (64, 128)],
                           key=["n"])(increment)


@triton.jit
def copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``out = x``, ``BLOCK`` elements per program."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def copying_layer(**options: Any) -> Any:
    """A ``contextual_autotune`` function (``options``: the decorator's) ``layer(x)`` that copies ``x`` with
    :func:`copy` under ``triton.autotune`` over ``BLOCK`` 16 and 32, keyed by ``n``."""
    import torch

    import triton_dist_tune as tdt

    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])(copy)

    @tdt.contextual_autotune(**options)
    def layer(x: Any) -> Any:
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out

    return layer
