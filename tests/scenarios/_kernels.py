"""Triton kernels that several scenario files wrap in their own ``@triton.autotune`` (import it after the scenario
has set ``TRITON_INTERPRET``)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def increment(x_ptr, n, BLOCK: tl.constexpr):
    """``x += 1`` in place, ``BLOCK`` elements per program."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)
