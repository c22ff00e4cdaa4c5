"""A grouped (MoE) GEMM in the style of vLLM / SGLang ``fused_moe``, tuned over a vLLM-sized config space.

Each token is routed to ``top_k`` of ``E`` experts; expert ``e`` multiplies its tokens by its weight ``W[e]``
(``[N, K]``, as vLLM stores ``w1``). The tokens are sorted by expert and each expert's list padded to a multiple of
``BLOCK_SIZE_M`` (:func:`moe_align_block_size`, plain torch here, no host synchronization); every program of the
Triton kernel then computes one ``BLOCK_SIZE_M x BLOCK_SIZE_N`` tile of one expert's rows, with ``GROUP_SIZE_M``
swizzling of the program order, and scatters the rows back to ``out[token, slot]``.

The config space is the one vLLM's ``benchmark_moe.py`` sweeps (BLOCK_SIZE_M x BLOCK_SIZE_N x BLOCK_SIZE_K x
GROUP_SIZE_M x num_warps x num_stages: 1,920 configs), pruned per key by shared memory and by the shape
(:func:`moe_prune`). Each config is a flat dict of those six keywords, so the tuner's search sees each one as an
axis of its grid. The key is the number of tokens M (with the problem's fixed sizes beside it).

Run::

    bash launch.sh examples/moe_gemm.py                        # GPUs: the full space, M = 256
    bash launch.sh examples/moe_gemm.py --campaign             # GPUs: 16 batch sizes, spread over the ranks
    TRITON_INTERPRET=1 bash launch.sh --cpu --nproc 2 examples/moe_gemm.py --tiny   # CPU ranks, tiny space
    TRITON_INTERPRET=1 bash launch.sh --cpu --nproc 2 examples/moe_gemm.py --tiny --campaign
    bash launch.sh examples/moe_gemm.py --campaign --export-vllm configs/   # and vLLM's / SGLang's config file

``--export-vllm DIR`` (with ``--campaign``) writes the campaign's decisions as the fused-MoE config file vLLM and
SGLang read, ``DIR/E=<E>,N=<N>,device_name=<GPU>[,dtype=float32].json`` (on CPU ranks the device name is the CPU
model's): one entry per batch size tuned (or found in the cache), none for a batch size that failed.

Rank 0 prints one line per rank with the config it chose and its error against the torch reference, then
``RESULT {json}`` (what the tests read).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import itertools
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402

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

#: Mixtral-8x7B-like w13 at TP 8: E experts, top_k of them per token, out features N, hidden size K
GPU_PROBLEM = {"experts": 8, "top_k": 2, "n": 3584, "k": 4096}
CPU_PROBLEM = {"experts": 4, "top_k": 2, "n": 48, "k": 40}
#: the batch sizes of a campaign (16 of them, most small: decode), and of a CPU campaign
CAMPAIGN_BATCHES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 6144, 8192)
CPU_CAMPAIGN_BATCHES = (3, 8, 20)


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
    logits = torch.randn(tokens, experts, generator=generator)
    return Routing(torch.topk(logits, top_k, dim=1).indices.to(torch.int32).to(device), experts)


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
    """The torch reference, in float32: ``[M, top_k, N]``."""
    ids = routing.topk_ids.long()
    return torch.einsum("mk,mjnk->mjn", a.float(), w.float()[ids])


# -- the tuned function -------------------------------------------------------------------------------------------


def moe_key(a: torch.Tensor, w: torch.Tensor, routing: Routing) -> tuple:
    """The tuning key: the number of tokens M first (the only part a model's calls vary), then the fixed sizes
    (experts, N, K, top_k) and the dtype, so that one decision never serves another problem."""
    return (int(a.shape[0]), int(w.shape[0]), int(w.shape[1]), int(w.shape[2]), routing.top_k, str(a.dtype))


@functools.cache
def shared_memory_limit(device_index: int) -> int:
    """Opt-in shared memory per block of CUDA device ``device_index`` (read once)."""
    return int(triton.runtime.driver.active.utils.get_device_properties(device_index)["max_shared_mem"])


def moe_prune(config: dict[str, Any], a: torch.Tensor, w: torch.Tensor, routing: Routing) -> bool:
    """``prune_fn`` of the tuned function (``config`` holds the six tile keywords): :func:`moe_prune_for` at this
    call's sizes."""
    limit = H100_SHARED_MEMORY_BYTES
    if a.device.type == "cuda" and not interpreter_enabled():
        limit = shared_memory_limit(a.device.index or 0)
    return moe_prune_for(config, a.shape[0], routing.top_k, w.shape[0], a.element_size(), limit)


def supports_search() -> bool:
    """Whether this ``triton_dist_tune.autotune`` takes ``search=`` (the search stage of issue 28)."""
    return "search" in inspect.signature(tdt.autotune).parameters


def search_option(search: str | None) -> dict[str, str]:
    """``{"search": search}`` where the tuner has the option; without it, a warning and nothing (the tuner then
    races every kept config: what ``search="exhaustive"`` means)."""
    if search is None:
        return {}
    if supports_search():
        return {"search": search}
    warnings.warn(f"triton_dist_tune.autotune has no search= option yet: search={search!r} ignored (every kept "
                  "config is raced)", stacklevel=3)
    return {}


def make_tuned_moe(space: Sequence[dict[str, int]], name: str = "moe_gemm", search: str | None = None,
                   kernel: Any = None, **options: Any) -> Callable[..., torch.Tensor]:
    """``moe(a, w, routing)`` tuned by ``triton_dist_tune.autotune`` over ``space`` (key: :func:`moe_key`,
    prune: :func:`moe_prune`). ``search`` is passed on where the tuner has it (see :func:`search_option`);
    ``kernel`` is the Triton kernel to launch (default :func:`fused_moe_kernel`); ``options`` go to the decorator."""

    @tdt.autotune([dict(c) for c in space], key_fn=moe_key, prune_fn=moe_prune, name=name,
                  **search_option(search), **options)
    def moe(a: torch.Tensor, w: torch.Tensor, routing: Routing, *, BLOCK_SIZE_M: int, BLOCK_SIZE_N: int,
            BLOCK_SIZE_K: int, GROUP_SIZE_M: int, num_warps: int, num_stages: int) -> torch.Tensor:
        """The MoE grouped GEMM at one config: a new ``[M, top_k, N]`` output (allocated per call, as vLLM's
        ``fused_experts`` allocates its intermediate cache, so no argument is written in place)."""
        config = {"BLOCK_SIZE_M": BLOCK_SIZE_M, "BLOCK_SIZE_N": BLOCK_SIZE_N, "BLOCK_SIZE_K": BLOCK_SIZE_K,
                  "GROUP_SIZE_M": GROUP_SIZE_M, "num_warps": num_warps, "num_stages": num_stages}
        return moe_gemm(a, w, routing, None, config, kernel)

    return moe


@dataclass
class Problem:
    """One call's arguments: hidden states, expert weights (shared by every key) and routing."""

    a: torch.Tensor
    w: torch.Tensor
    routing: Routing

    def call(self) -> tdt.Call:
        return tdt.Call(self.a, self.w, self.routing)


def make_problem(tokens: int, w: torch.Tensor, top_k: int, seed: int = 0) -> Problem:
    """Random hidden states and routing for ``tokens`` tokens (the same on every rank for the same seed)."""
    gen = torch.Generator().manual_seed(seed * 100_003 + tokens)
    a = torch.randn(tokens, w.shape[2], generator=gen).to(w.device, w.dtype)
    routing = random_routing(tokens, w.shape[0], top_k, w.device, gen)
    return Problem(a, w, routing)


def make_weights(problem: dict[str, int], device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
    """Expert weights ``[E, N, K]``, scaled so that outputs stay O(1)."""
    gen = torch.Generator().manual_seed(1234)
    w = torch.randn(problem["experts"], problem["n"], problem["k"], generator=gen) / problem["k"] ** 0.5
    return w.to(device, dtype)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


# -- the script ---------------------------------------------------------------------------------------------------


def export_vllm(folder: Path, moe: Any, w: torch.Tensor, problem: dict[str, int], batches: Sequence[int],
                cuda: bool) -> Path:
    """Write the campaign's decisions as vLLM's fused-MoE config file into ``folder``; returns its path. Every
    batch size the campaign tuned or found in the cache is in it; one that failed is not."""
    from triton_dist_tune.disk import vllm_moe

    decided = []
    for m in batches:  # a batch size whose tuning failed has no decision
        p = make_problem(m, w, problem["top_k"])
        key = moe_key(p.a, p.w, p.routing)
        if key in moe.tuner.decided:
            decided.append((m, moe.tuner.decided[key]))
    return vllm_moe.write(folder, problem["experts"], problem["n"], vllm_moe.device_name(cuda),
                          vllm_moe.table(decided), vllm_moe.dtype_selector(w.dtype))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the tiny space and problem (CPU ranks, interpreter)")
    parser.add_argument("--campaign", action="store_true", help="tune 16 batch sizes as a campaign (3 with --tiny)")
    parser.add_argument("--tokens", type=int, default=None, help="M of the single call (default 256; 20 --tiny)")
    parser.add_argument("--search", default=None, help="search= of the tuner (auto, exhaustive, search)")
    parser.add_argument("--lockstep", action="store_true",
                        help="campaign: the whole group tunes every key together (default: the kernel is rank-local, "
                             "so every rank tunes its share of the keys alone, spread over the job)")
    parser.add_argument("--export-vllm", metavar="DIR", help="campaign: write vLLM's / SGLang's fused-MoE config "
                        "file of the decisions into DIR (rank 0)")
    args = parser.parse_args(argv)
    if args.export_vllm and not args.campaign:
        parser.error("--export-vllm needs --campaign (the file holds one config per batch size)")

    tdt.init_distributed()
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = torch.cuda.is_available() and not interpreter_enabled()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype, tol = (torch.bfloat16, 2e-2) if cuda else (torch.float32, 1e-4)
    tiny = args.tiny or not cuda
    problem = CPU_PROBLEM if tiny else GPU_PROBLEM
    space = moe_config_space(tiny=tiny)
    quick = {} if cuda else {"n_warmup": 1, "n_repeat": 3}  # the interpreter is slow
    moe = make_tuned_moe(space, search=args.search, **quick)
    w = make_weights(problem, device, dtype)
    result: dict[str, Any] = {"world": world, "space": len(space), "search_option": supports_search()}

    if args.campaign:
        batches = CPU_CAMPAIGN_BATCHES if tiny else CAMPAIGN_BATCHES
        started = time.perf_counter()
        summary = tdt.campaign(moe, lambda m: make_problem(m, w, problem["top_k"]).call(), list(batches),
                               local=not args.lockstep)
        seconds = time.perf_counter() - started
        result.update(campaign_s=seconds, failed=len(summary.failed), keys=len(summary.rows))
        checks = {}
        for m in batches:  # every key decided: each call is the hot path
            p = make_problem(m, w, problem["top_k"])
            out = moe(p.a, p.w, p.routing)
            checks[m] = (config_text(moe.tuner.decided[moe_key(p.a, p.w, p.routing)]),
                         relative_error(out, moe_reference(p.a, p.w, p.routing)))
        result["choices"] = {str(m): c for m, (c, _) in checks.items()}
        result["max_error"] = max(e for _, e in checks.values())
        if args.export_vllm and rank == 0:
            result["vllm_file"] = str(export_vllm(Path(args.export_vllm), moe, w, problem, batches, cuda))
    else:
        tokens = args.tokens or (20 if tiny else 256)
        p = make_problem(tokens, w, problem["top_k"])
        kept = sum(moe_prune(c, p.a, p.w, p.routing) for c in space)
        started = time.perf_counter()
        out = moe(p.a, p.w, p.routing, autotune_verbose=not tiny)
        seconds = time.perf_counter() - started
        choice = config_text(moe.tuner.decided[moe_key(p.a, p.w, p.routing)])
        error = relative_error(out, moe_reference(p.a, p.w, p.routing))
        result.update(tokens=tokens, kept=kept, tuning_s=seconds, choices={str(tokens): choice}, max_error=error)
    lines: list[Any] = [None] * world
    dist.all_gather_object(lines, result)
    if rank == 0:
        for r, row in enumerate(lines):
            print(f"moe_gemm rank {r}/{world}: chose {row['choices']}, max relative error {row['max_error']:.2e}",
                  flush=True)
        same = all(row["choices"] == lines[0]["choices"] for row in lines)
        if "vllm_file" in result:
            print(f"vLLM / SGLang fused-MoE config file: {result['vllm_file']} (batch sizes "
                  f"{', '.join(result['choices'])})", flush=True)
        print("RESULT " + json.dumps({**result, "same_on_every_rank": same,
                                      "errors": [row["max_error"] for row in lines]}), flush=True)
    dist.destroy_process_group()
    return 0 if result["max_error"] <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
