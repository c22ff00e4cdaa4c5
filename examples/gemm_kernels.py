"""A tiled Triton GEMM shared by the distributed examples, with its config space and pruning.

``gemm(a, b, out, config)`` computes ``out = a @ b`` for a 2-D ``a`` ``[m, k]`` or a 3-D batch
``[batch, m, k]`` (one shared ``b`` ``[k, n]``), with any strides on ``a`` and ``out``: ``out`` may
be a view into a larger tensor (a row slice, or a strided ``[batch, rows, n]`` window), which is how
the AG-GEMM and GEMM-RS examples write chunk results straight into place.

A GEMM config is written as a short string, ``"128x256x64-g8-w8-s3"`` (BLOCK_M x BLOCK_N x BLOCK_K,
GROUP_M, num_warps, num_stages), so that it is hashable, JSON-friendly and readable in logs;
:func:`to_triton_config` turns it into a ``triton.Config``. The special value :data:`TORCH_GEMM`
means "use ``torch.matmul``" (cuBLAS on a GPU).

On a CPU tensor the kernel runs in Triton's interpreter, which must be switched on with
``TRITON_INTERPRET=1`` before Triton is first imported.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable

import torch
import triton
import triton.language as tl

TORCH_GEMM = "torch"
"""GEMM config value meaning: compute the product with ``torch.matmul`` instead of the Triton kernel."""

H100_SHARED_MEMORY_BYTES = 227 * 1024
"""Opt-in shared memory per block on H100/H200 (sm_90)."""

_SPEC = re.compile(r"^(\d+)x(\d+)x(\d+)-g(\d+)-w(\d+)-s(\d+)$")

# Hopper-friendly tiles: big 128x256 / 256x128 tiles for large problems, smaller ones for skinny M
# (decode-like shapes, small chunks) and for wave quantisation at mid sizes.
_HOPPER_SPECS = (
    "128x256x64-g8-w8-s3",
    "128x256x64-g8-w8-s4",
    "256x128x64-g8-w8-s3",
    "256x128x64-g8-w8-s4",
    "128x128x64-g8-w8-s4",
    "128x128x64-g8-w4-s4",
    "128x128x128-g8-w8-s3",
    "128x64x64-g8-w4-s4",
    "64x256x64-g8-w4-s4",
    "64x128x64-g8-w4-s4",
    "64x128x128-g8-w4-s3",
    "64x64x128-g8-w4-s4",
)
# The interpreter is slow per program: tiny tiles and a tiny list keep CPU CI fast. 16-row tiles exercise the edge
# masks and GROUP_M's grouping at awkward row counts; K = 48 or more takes two passes of the K loop. (A 16x16x16 tile
# cost 2-2.4x as much per interpreted launch at the tests' shapes, for the same code paths.)
_INTERPRETER_SPECS = ("16x32x32-g2-w1-s1", "32x32x32-g4-w4-s2")


def is_torch_gemm(config: object) -> bool:
    """True when ``config`` is :data:`TORCH_GEMM` (also safe for a ``triton.Config``)."""
    return isinstance(config, str) and config == TORCH_GEMM


def interpreter_enabled() -> bool:
    """Return True when Triton's interpreter is switched on (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def to_triton_config(spec: str | triton.Config) -> triton.Config:
    """Parse a config string like ``"128x256x64-g8-w8-s3"`` into a ``triton.Config``."""
    if isinstance(spec, triton.Config):
        return spec
    match = _SPEC.match(spec)
    if match is None:
        raise ValueError(f"bad GEMM config {spec!r}: expected 'BMxBNxBK-gG-wW-sS' or {TORCH_GEMM!r}")
    bm, bn, bk, gm, warps, stages = (int(v) for v in match.groups())
    return triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": gm}, num_warps=warps, num_stages=stages
    )


def config_spec(config: triton.Config) -> str:
    """Inverse of :func:`to_triton_config`: the short string of a ``triton.Config``."""
    kw = config.kwargs
    return (
        f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}-g{kw['GROUP_M']}"
        f"-w{config.num_warps}-s{config.num_stages}"
    )


def gemm_config_space(device: str | torch.device | None = None) -> list[triton.Config]:
    """Triton GEMM configs worth trying: a Hopper list on CUDA, a tiny one for the CPU interpreter."""
    on_cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
    specs = _HOPPER_SPECS if on_cuda and not interpreter_enabled() else _INTERPRETER_SPECS
    return [to_triton_config(s) for s in specs]


def gemm_config_specs(device: str | torch.device | None = None) -> list[str]:
    """Same as :func:`gemm_config_space`, as config strings."""
    return [config_spec(c) for c in gemm_config_space(device)]


#: the large GEMM space of issue 28: BLOCK_M x BLOCK_N x BLOCK_K x GROUP_M x num_warps x num_stages
#: (5 x 4 x 3 x 2 x 2 x 4 = 960 configs before pruning)
LARGE_AXES: dict[str, tuple[int, ...]] = {
    "BLOCK_M": (16, 32, 64, 128, 256),
    "BLOCK_N": (32, 64, 128, 256),
    "BLOCK_K": (32, 64, 128),
    "GROUP_M": (1, 8),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}


def large_gemm_config_specs(dtype_size: int = 2, limit_bytes: int | None = H100_SHARED_MEMORY_BYTES) -> list[str]:
    """The large GEMM space of issue 28, as config strings, pruned by shared memory (:func:`prune_by_shared_memory`:
    ``stages * (BLOCK_M + BLOCK_N) * BLOCK_K * dtype_size <= limit_bytes``; ``None``: no pruning, all 960).

    On Hopper in bf16 (227 KiB opt-in per block; 228 KiB gives the same) this keeps 840 configs. The issue counts
    804 for "BM 16-256 x BN 32-256 x BK 32-128 x GROUP_M {1, 8} x warps {4, 8} x stages 2-5, pruned by shared
    memory"; the rule that gave 804 is not written there and this one does not reproduce it.
    """
    specs = [f"{bm}x{bn}x{bk}-g{g}-w{w}-s{s}" for bm, bn, bk, g, w, s in itertools.product(*LARGE_AXES.values())]
    if limit_bytes is None:
        return specs
    return [s for s in specs if prune_by_shared_memory(s, dtype_size, limit_bytes)]


def large_gemm_config_space(dtype_size: int = 2, limit_bytes: int | None = H100_SHARED_MEMORY_BYTES
                            ) -> list[triton.Config]:
    """:func:`large_gemm_config_specs` as ``triton.Config`` objects, beside the examples' 12-tile Hopper list
    (:func:`gemm_config_space`) and ``benchmarks/bench_fidelity.py``'s 40-config space."""
    return [to_triton_config(s) for s in large_gemm_config_specs(dtype_size, limit_bytes)]


def shared_memory_limit(device: torch.device | None = None) -> int:
    """Shared memory a block may use on ``device`` (227 KiB default, e.g. on CPU / in the interpreter)."""
    if device is None or device.type != "cuda" or interpreter_enabled():
        return H100_SHARED_MEMORY_BYTES
    props = triton.runtime.driver.active.utils.get_device_properties(device.index or 0)
    return int(props["max_shared_mem"])


def shared_memory_bytes(config: str | triton.Config, dtype_size: int) -> int:
    """Shared memory the software pipeline of ``config`` needs: stages * (A tile + B tile)."""
    cfg = to_triton_config(config)
    kw = cfg.kwargs
    return cfg.num_stages * (kw["BLOCK_M"] * kw["BLOCK_K"] + kw["BLOCK_K"] * kw["BLOCK_N"]) * dtype_size


def tile_usable(config: str | triton.Config, a: torch.Tensor, rows_per_gemm: int) -> bool:
    """Whether GEMM ``config`` can run on ``a``'s device and is worth trying for this many rows.

    Drops Triton tiles without a GPU or interpreter, tiles over the device's shared memory, and tiles
    much taller than the GEMM (``BLOCK_M`` above ``max(64, next_pow2(rows))``).
    """
    if is_torch_gemm(config):
        return True
    if a.device.type != "cuda" and not interpreter_enabled():
        return False
    if not prune_by_shared_memory(config, a.element_size(), shared_memory_limit(a.device)):
        return False
    block_m = to_triton_config(config).kwargs["BLOCK_M"]
    return block_m <= max(64, triton.next_power_of_2(max(rows_per_gemm, 1)))


def prune_by_shared_memory(
    config: str | triton.Config, dtype_size: int, limit_bytes: int = H100_SHARED_MEMORY_BYTES
) -> bool:
    """True when ``config`` fits in ``limit_bytes`` of shared memory for elements of ``dtype_size`` bytes.

    :data:`TORCH_GEMM` always fits.
    """
    if is_torch_gemm(config):
        return True
    return shared_memory_bytes(config, dtype_size) <= limit_bytes


@triton.jit
def _gemm_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_ab, stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
):  # fmt: skip
    """C[b] = A[b] @ B for one (BLOCK_M, BLOCK_N) tile; program axis 1 is the batch index b."""
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: GROUP_M row-tiles share each column of B while it is hot in L2.
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    group_rows = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_rows
    pid_n = (pid % width) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows/columns past the edge wrap around (their results are masked off at the store), so the
    # loads of the main loop need no M/N masks.
    rows = (offs_m % M).to(tl.int64)
    cols = offs_n % N
    a_ptrs = a_ptr + batch * stride_ab + rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + cols[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c = acc.to(c_ptr.dtype.element_ty)
    out_rows = offs_m.to(tl.int64)
    c_ptrs = c_ptr + batch * stride_cb + out_rows[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _as_batched(t: torch.Tensor) -> torch.Tensor:
    return t.unsqueeze(0) if t.dim() == 2 else t


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor | None = None,
    config: str | triton.Config | Callable[..., torch.Tensor] = _INTERPRETER_SPECS[0],
) -> torch.Tensor:
    """Compute ``out = a @ b`` with the Triton kernel (or ``torch.matmul`` for :data:`TORCH_GEMM`).

    Args:
        a: ``[m, k]`` or ``[batch, m, k]``, any strides.
        b: ``[k, n]``, shared by every batch entry.
        out: ``[m, n]`` or ``[batch, m, n]`` with ``a``'s leading shape, any strides (a view into a
            larger tensor is fine); allocated (contiguous, ``a``'s dtype) when None.
        config: a config string, a ``triton.Config``, :data:`TORCH_GEMM`, or a callable, called as
            ``config(a, b, out)`` in place of the built-in launch (e.g. a launcher of a ``triton.autotune``
            kernel, whose tile ``contextual_autotune`` then chooses in context).

    Returns:
        ``out``.
    """
    if a.dim() not in (2, 3) or b.dim() != 2 or a.shape[-1] != b.shape[0]:
        raise ValueError(f"gemm: incompatible shapes {tuple(a.shape)} @ {tuple(b.shape)}")
    if out is None:
        out = torch.empty(*a.shape[:-1], b.shape[1], dtype=a.dtype, device=a.device)
    if tuple(out.shape) != (*a.shape[:-1], b.shape[1]):
        raise ValueError(f"gemm: out has shape {tuple(out.shape)}, expected {(*a.shape[:-1], b.shape[1])}")
    if a.numel() == 0 or out.numel() == 0:
        return out.zero_() if out.numel() else out
    if is_torch_gemm(config):
        # torch.mm(out=) writes straight into a contiguous 2-D view, with no temporary.
        for a2, o2 in zip(_as_batched(a), _as_batched(out), strict=True):
            if o2.is_contiguous():
                torch.mm(a2, b, out=o2)
            else:
                o2.copy_(a2 @ b)
        return out
    if callable(config):
        return config(a, b, out)
    if a.device.type != "cuda" and not interpreter_enabled():
        raise RuntimeError(
            "gemm: the Triton kernel needs CUDA tensors, or TRITON_INTERPRET=1 set before import"
        )
    cfg = to_triton_config(config)
    a3, o3 = _as_batched(a), _as_batched(out)
    batch, m, k = a3.shape
    n = b.shape[1]
    kw = cfg.kwargs
    grid = (triton.cdiv(m, kw["BLOCK_M"]) * triton.cdiv(n, kw["BLOCK_N"]), batch)
    _gemm_kernel[grid](
        a3, b, o3,
        m, n, k,
        a3.stride(0), a3.stride(1), a3.stride(2),
        b.stride(0), b.stride(1),
        o3.stride(0), o3.stride(1), o3.stride(2),
        EVEN_K=k % kw["BLOCK_K"] == 0,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **kw,
    )  # fmt: skip
    return out
