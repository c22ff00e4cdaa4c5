"""The fused-MoE grouped GEMM of ``examples/moe_gemm.py``, in the style of vLLM / SGLang ``fused_moe``, with its
config space, pruning, routing and problem builders (a library: ``moe_gemm.py`` and the benchmarks import it).

Each token is routed to ``top_k`` of ``E`` experts; expert ``e`` multiplies its tokens by its weight ``W[e]``
(``[N, K]``, as vLLM stores ``w1``). The tokens are sorted by expert and each expert's list padded to a multiple of
``BLOCK_SIZE_M`` (:func:`moe_align_block_size`, plain torch here, no host synchronization); every program of the
Triton kernel then computes one ``BLOCK_SIZE_M x BLOCK_SIZE_N`` tile of one expert's rows, with ``GROUP_SIZE_M``
swizzling of the program order, and scatters the rows back to ``out[token, slot]``.

The config space is the one vLLM's ``benchmark_moe.py`` sweeps (BLOCK_SIZE_M x BLOCK_SIZE_N x BLOCK_SIZE_K x
GROUP_SIZE_M x num_warps x num_stages: 1,920 configs), pruned by shared memory and by the shape
(:func:`moe_prune_for`). Each config is a flat dict of those six keywords.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
import triton.language as tl

import triton_dist_tune as tdt

H100_SHARED_MEMORY_BYTES = 227 * 1024
"""Opt-in shared memory per block on sm_90 (228 KiB per SM, 1 KiB reserved)."""

#: vLLM ``benchmark_moe.py`` ``get_configs_compute_bound`` axes: 5 x 4 x 3 x 4 x 2 x 4 = 1,920 configs
FULL_AXES: dict[str, tuple[int, ...]] = {
    "BLOCK_SIZE_M": (16, 32, 64, 128, 256),
    "BLOCK_SIZE_N": (32, 64, 128, 256),
    "BLOCK_SIZE_K": (64, 128, 256),
    "GROUP_SIZE_M": (1, 16, 32, 64),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}
#: a tiny space for CPU ranks under Triton's interpreter (2 x 1 x 2 x 2 x 1 x 1 = 8 configs)
TINY_AXES: dict[str, tuple[int, ...]] = {
    "BLOCK_SIZE_M": (16, 32),
    "BLOCK_SIZE_N": (32,),
    "BLOCK_SIZE_K": (16, 32),
    "GROUP_SIZE_M": (1, 16),
    "num_warps": (4,),
    "num_stages": (2,),
}

#: Mixtral-8x7B-like w13 at TP 8: E experts, top_k of them per token, out features N (the fused gate and up
#: projections: twice the intermediate size, 1792, that vLLM's and SGLang's files are named by), hidden size K
GPU_PROBLEM = {"experts": 8, "top_k": 2, "n": 3584, "k": 4096}
#: CPU ranks (interpreter): N and K are no multiple of the tiles (masked edges), N within one 32-wide tile (the
#: interpreter pays per program)
CPU_PROBLEM = {"experts": 4, "top_k": 2, "n": 24, "k": 40}


def interpreter_enabled() -> bool:
    """True when Triton's interpreter is on (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


# -- configs ------------------------------------------------------------------------------------------------------


def config_text(config: dict[str, int]) -> str:
    """A short readable name: ``"M64-N128-K64-G16-w4-s3"``."""
    return (f"M{config['BLOCK_SIZE_M']}-N{config['BLOCK_SIZE_N']}-K{config['BLOCK_SIZE_K']}"
            f"-G{config['GROUP_SIZE_M']}-w{config['num_warps']}-s{config['num_stages']}")


def moe_config_space(tiny: bool = False) -> list[dict[str, int]]:
    """Every combination of the axes (:data:`FULL_AXES`: 1,920 configs; ``tiny``: :data:`TINY_AXES`, 8), before
    pruning, in a fixed order. Each config is a plain dict of ints (JSON-friendly, hashable as text)."""
    axes = TINY_AXES if tiny else FULL_AXES
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def moe_shared_memory_bytes(config: dict[str, int], dtype_size: int) -> int:
    """Shared memory the software pipeline needs: stages * (A tile + B tile)."""
    c = config
    return c["num_stages"] * (c["BLOCK_SIZE_M"] + c["BLOCK_SIZE_N"]) * c["BLOCK_SIZE_K"] * dtype_size


def padded_rows(tokens: int, top_k: int, experts: int, block_m: int) -> int:
    """Rows of the sorted, padded token list (its worst case, which the launch grid covers): every expert's list
    padded up to a multiple of ``block_m``."""
    return tokens * top_k + experts * (block_m - 1)


def moe_prune_for(config: dict[str, int], tokens: int, top_k: int, experts: int, dtype_size: int,
                  smem_limit: int = H100_SHARED_MEMORY_BYTES) -> bool:
    """Keep ``config`` for a call of ``tokens`` tokens? Shape-aware, and the same on every rank:

    - its pipeline fits ``smem_limit`` bytes of shared memory;
    - ``BLOCK_SIZE_M`` is not larger than needed: at most ``max(16, next_pow2(2 * tokens * top_k / experts))``
      (twice an expert's mean share of the routed rows: padding rows cost compute and load nothing useful);
    - ``GROUP_SIZE_M`` values that order the programs identically are kept once: when the grid has at most
      ``g`` row blocks, every ``GROUP_SIZE_M >= g`` gives the same order, so only the smallest such value stays.
    """
    if moe_shared_memory_bytes(config, dtype_size) > smem_limit:
        return False
    block_m = config["BLOCK_SIZE_M"]
    share = -(-tokens * top_k // experts)
    if block_m > max(16, triton.next_power_of_2(max(1, 2 * share))):
        return False
    group = config["GROUP_SIZE_M"]
    row_blocks = -(-padded_rows(tokens, top_k, experts, block_m) // block_m)
    groups = sorted({c for c in (FULL_AXES["GROUP_SIZE_M"] + TINY_AXES["GROUP_SIZE_M"])})
    covering = [g for g in groups if g >= row_blocks]
    return not (covering and group > covering[0])


# -- routing and alignment ----------------------------------------------------------------------------------------


@dataclass
class Aligned:
    """The tokens of a routing sorted by expert, each expert's list padded to a multiple of ``block_m``.

    ``sorted_token_ids[i]`` is a flat (token * top_k + slot) index, or ``numel`` (a padding row);
    ``expert_ids[b]`` is the expert of row block ``b``; ``num_tokens_post_padded`` (one int32 on the device) is the
    number of rows in use, so the kernel's programs past it return at once."""

    sorted_token_ids: torch.Tensor
    expert_ids: torch.Tensor
    num_tokens_post_padded: torch.Tensor


def moe_align_block_size(topk_ids: torch.Tensor, block_m: int, experts: int) -> Aligned:
    """vLLM's ``moe_align_block_size`` in plain torch, without a host synchronization (the sizes are the worst
    case: ``numel + experts * (block_m - 1)`` rows)."""
    flat = topk_ids.reshape(-1).to(torch.int64)
    numel, device = flat.numel(), flat.device
    # scatter_add, not bincount: bincount on CUDA reads the input's max on the host (a synchronize), which a
    # CUDA graph capture forbids
    counts = torch.zeros(experts, dtype=torch.int64, device=device).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)
    starts = ends - padded
    order = torch.sort(flat, stable=True).indices
    expert_of = flat[order]
    first_of_expert = torch.cumsum(counts, 0) - counts
    dest = starts[expert_of] + torch.arange(numel, device=device) - first_of_expert[expert_of]
    rows = padded_rows(numel, 1, experts, block_m)
    sorted_ids = torch.full((rows,), numel, dtype=torch.int32, device=device)
    sorted_ids[dest] = order.to(torch.int32)
    block_starts = torch.arange(0, rows, block_m, device=device)
    expert_ids = torch.searchsorted(ends, block_starts, right=True).clamp_(max=experts - 1).to(torch.int32)
    return Aligned(sorted_ids, expert_ids, ends[-1:].to(torch.int32))


@dataclass
class Routing:
    """Which experts each token goes to, with the alignment for each ``BLOCK_SIZE_M`` computed once and kept
    (the serving engines align once per forward; a tuning runs many calls of the same routing)."""

    topk_ids: torch.Tensor
    experts: int
    _aligned: dict[int, Aligned] = field(default_factory=dict, repr=False)

    @property
    def top_k(self) -> int:
        return int(self.topk_ids.shape[1])

    def aligned(self, block_m: int) -> Aligned:
        found = self._aligned.get(block_m)
        if found is None:
            found = self._aligned[block_m] = moe_align_block_size(self.topk_ids, block_m, self.experts)
        return found


def random_routing(tokens: int, experts: int, top_k: int, device: torch.device | str,
                   generator: torch.Generator | None = None) -> Routing:
    """Each token's ``top_k`` experts, the top of random logits (distinct experts per token)."""
    logits = torch.randn(tokens, experts, generator=generator, device=device)
    return Routing(torch.topk(logits, top_k, dim=1).indices.to(torch.int32), experts)


# -- the kernel ---------------------------------------------------------------------------------------------------


@triton.jit
def fused_moe_kernel(
    a_ptr, b_ptr, c_ptr,
    sorted_token_ids_ptr, expert_ids_ptr, num_tokens_post_padded_ptr,
    N, K, EM, num_valid_tokens,
    stride_am, stride_ak,
    stride_be, stride_bn, stride_bk,
    stride_cm, stride_cn,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr, top_k: tl.constexpr,
):  # fmt: skip
    """One (BLOCK_SIZE_M, BLOCK_SIZE_N) tile of ``C[sorted rows] = A[rows // top_k] @ B[expert].T``."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    # GROUP_SIZE_M row blocks share each column block of B while it is hot in L2
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    num_tokens_post_padded = tl.load(num_tokens_post_padded_ptr)
    if pid_m * BLOCK_SIZE_M >= num_tokens_post_padded:
        return
    offs_token_id = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M).to(tl.int64)
    offs_token = tl.load(sorted_token_ids_ptr + offs_token_id).to(tl.int64)
    token_mask = offs_token < num_valid_tokens
    off_expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)

    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N).to(tl.int64)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_token[:, None] // top_k * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + off_expert * stride_be + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        k_left = K - k * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk

    c = acc.to(c_ptr.dtype.element_ty)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_token[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=token_mask[:, None] & (offs_cn[None, :] < N))


def kernel_args(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor, aligned: Aligned, top_k: int) -> tuple:
    """The positional arguments of :func:`fused_moe_kernel` for one call (``out`` is ``[M, top_k, N]``)."""
    out2 = out.view(-1, out.shape[-1])
    return (a, w, out2, aligned.sorted_token_ids, aligned.expert_ids, aligned.num_tokens_post_padded,
            w.shape[1], w.shape[2], aligned.sorted_token_ids.shape[0], a.shape[0] * top_k,
            a.stride(0), a.stride(1), w.stride(0), w.stride(1), w.stride(2), out2.stride(0), out2.stride(1))


def moe_gemm(a: torch.Tensor, w: torch.Tensor, routing: Routing, out: torch.Tensor | None = None,
             config: dict[str, int] | None = None, kernel: Any = None) -> torch.Tensor:
    """``out[t, j] = a[t] @ w[routing.topk_ids[t, j]].T`` for every token ``t`` and slot ``j``.

    Args:
        a: ``[M, K]`` hidden states.
        w: ``[E, N, K]`` expert weights.
        routing: the tokens' experts (``[M, top_k]``).
        out: ``[M, top_k, N]`` contiguous (allocated when None).
        config: a config of :func:`moe_config_space` (default: its first, tiny one).
        kernel: the ``@triton.jit`` kernel to launch (default :func:`fused_moe_kernel`; a benchmark passes its own
            copy). The alignment depends on ``BLOCK_SIZE_M``, so the tile is chosen by the caller, never by a
            ``triton.autotune`` around the kernel (vLLM's tuning script does the same).
    """
    m, k = a.shape
    experts, n, k_w = w.shape
    if k_w != k or routing.topk_ids.shape[0] != m or routing.experts != experts:
        raise ValueError(f"moe_gemm: a {tuple(a.shape)}, w {tuple(w.shape)}, topk_ids "
                         f"{tuple(routing.topk_ids.shape)} with {routing.experts} experts do not match")
    top_k = routing.top_k
    if out is None:
        out = torch.empty(m, top_k, n, dtype=a.dtype, device=a.device)
    if a.device.type != "cuda" and not interpreter_enabled():
        raise RuntimeError("moe_gemm needs CUDA tensors, or TRITON_INTERPRET=1 set before Triton is imported")
    kernel = fused_moe_kernel if kernel is None else kernel
    config = config or moe_config_space(tiny=True)[0]
    aligned = routing.aligned(config["BLOCK_SIZE_M"])
    rows = aligned.sorted_token_ids.shape[0]
    grid = (triton.cdiv(rows, config["BLOCK_SIZE_M"]) * triton.cdiv(n, config["BLOCK_SIZE_N"]),)
    meta = {key: value for key, value in config.items() if key.startswith(("BLOCK", "GROUP"))}
    kernel[grid](*kernel_args(a, w, out, aligned, top_k), top_k=top_k, num_warps=config["num_warps"],
                 num_stages=config["num_stages"], **meta)
    return out


def moe_reference(a: torch.Tensor, w: torch.Tensor, routing: Routing) -> torch.Tensor:
    """The torch reference, in float32: ``[M, top_k, N]``, computed expert by expert (each expert's tokens times its
    weights), so that it fits any batch size on any GPU.

    Peak memory beyond the arguments: the float32 result (``M top_k N`` x 4 bytes) plus, for one expert at a time,
    its tokens' rows (at most ``M`` rows of ``K``, in the input dtype and in float32), its weights in float32
    (``N K`` x 4) and their product (at most ``M N`` x 4). At the largest campaign batch on a GPU (M = 8192,
    :data:`GPU_PROBLEM`: top 2 of 8 experts, N = 3584, K = 4096, bf16) that is 235 + 67 + 134 + 59 + 117 MB, about
    0.6 GB, and the example's check (:func:`relative_error`: two more ``[M, top_k, N]`` float32 tensors) about
    0.7 GB. Before, one einsum over ``w[topk_ids]`` gathered a ``[M, top_k, N, K]`` float32 tensor: 224 GiB at
    M = 8192, which no GPU holds."""
    flat_ids = routing.topk_ids.reshape(-1)
    top_k = routing.top_k
    out = torch.zeros(flat_ids.numel(), w.shape[1], dtype=torch.float32, device=a.device)
    for expert in range(w.shape[0]):
        slots = (flat_ids == expert).nonzero().reshape(-1)  # (token, choice) pairs routed to this expert
        if slots.numel():
            out[slots] = a[slots // top_k].float() @ w[expert].float().T
    return out.view(a.shape[0], top_k, w.shape[1])


@dataclass
class Problem:
    """One call's arguments: hidden states, expert weights (shared by every key) and routing."""

    a: torch.Tensor
    w: torch.Tensor
    routing: Routing

    def call(self) -> tdt.Call:
        """The call of the tuned function on these arguments."""
        return tdt.Call(self.a, self.w, self.routing)


def make_problem(tokens: int, w: torch.Tensor, top_k: int, seed: int = 0) -> Problem:
    """Random hidden states and routing for ``tokens`` tokens (the same on every rank for the same seed), drawn on
    ``w``'s device: a campaign builds each call three times (its key, its tuning, the next key's compiles ahead), and
    drawn on the host and copied, the calls of the README's MoE campaign took 2.3-2.5 s of its time on an H200 host
    (benchmarks/results/session_h200_16)."""
    gen = torch.Generator(device=w.device).manual_seed(seed * 100_003 + tokens)
    a = torch.randn(tokens, w.shape[2], generator=gen, device=w.device).to(w.dtype)
    routing = random_routing(tokens, w.shape[0], top_k, w.device, gen)
    return Problem(a, w, routing)


def config_file_n(problem: dict[str, int]) -> int:
    """The N that vLLM's and SGLang's config files name a problem by: its intermediate size per expert (the down
    projection's in features, ``w2.shape[2]``, which both engines look the file up by), half the out features of the
    fused gate and up weight (w13) that this example's GEMM multiplies by: 1792 for :data:`GPU_PROBLEM`."""
    return problem["n"] // 2


def make_weights(problem: dict[str, int], device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
    """Expert weights ``[E, N, K]``, scaled so that outputs stay O(1): drawn on ``device`` from a seeded generator
    of its own (the GPU problem's 117 M draws took 0.8 s on the host's CPU)."""
    gen = torch.Generator(device=device).manual_seed(1234)
    w = torch.randn(problem["experts"], problem["n"], problem["k"], generator=gen, device=device)
    return (w / problem["k"] ** 0.5).to(dtype)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``|out - ref| / |ref|`` (Frobenius norms, ``out`` in float32)."""
    return ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
