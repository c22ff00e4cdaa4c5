"""Helpers shared by the AG-GEMM and GEMM-RS examples: groups, side streams, chunking, symm-mem checks."""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

_SIDE_STREAMS: dict[tuple[int, str], torch.cuda.Stream] = {}
_SYMM_MEM_GROUPS: set[str] = set()
CONFIG_KEYS = ("algo", "splits", "gemm_config")
LAST_CONFIG: dict[str, dict[str, Any]] = {}
"""Function name -> config entries of its most recent call through :func:`recording_config`.

After a tuned call returns, this is the config the tuner chose (its last call is the chosen config)."""


def group_rank_size(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """This process's rank in ``group`` (None: the default group) and the group's size."""
    return dist.get_rank(group), dist.get_world_size(group)


def group_name(group: dist.ProcessGroup | None) -> str:
    """The c10d name of ``group`` (None: the default group), as the ``symm_mem`` ops want it."""
    return (group if group is not None else dist.group.WORLD).group_name


def all_gather_rows(out: torch.Tensor, inp: torch.Tensor, group: dist.ProcessGroup | None = None) -> None:
    """``out = concat over ranks of inp`` by rows: ``all_gather_single`` (torch 2.13 deprecates
    ``all_gather_into_tensor`` for it), or the old name on a torch without it."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, inp, group=group)


def reduce_scatter_rows(out: torch.Tensor, inp: torch.Tensor, group: dist.ProcessGroup | None = None) -> None:
    """``out = this rank's rows of the sum over ranks of inp``, with the collective this torch does not call
    deprecated."""
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    scatter(out, inp, group=group)


def split_rows(rows: int, splits: int) -> list[tuple[int, int]]:
    """Cut ``rows`` into at most ``splits`` near-equal non-empty chunks, as (start, length) pairs."""
    if splits < 1:
        raise ValueError(f"splits must be >= 1, got {splits}")
    base, extra = divmod(rows, splits)
    chunks, start = [], 0
    for i in range(splits):
        length = base + (1 if i < extra else 0)
        if length:
            chunks.append((start, length))
        start += length
    return chunks


def side_stream(device: torch.device, role: str = "comm") -> torch.cuda.Stream:
    """A per-device side stream for ``role`` (e.g. communication), created once and reused."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if (index, role) not in _SIDE_STREAMS:
        _SIDE_STREAMS[(index, role)] = torch.cuda.Stream(device=index)
    return _SIDE_STREAMS[(index, role)]


def symm_mem_available(t: torch.Tensor, group: dist.ProcessGroup | None, op: str) -> bool:
    """True when ``torch.ops.symm_mem.<op>`` can run on ``t`` over ``group`` (CUDA tensors, NCCL group)."""
    if not t.is_cuda or not dist.is_available() or not dist.is_initialized():
        return False
    try:
        if dist.get_backend(group) != "nccl":
            return False
        import torch.distributed._symmetric_memory  # noqa: F401  (registers the symm_mem ops)
    except (ImportError, RuntimeError, ValueError):
        return False
    return hasattr(torch.ops.symm_mem, op)


def enable_symm_mem(group: dist.ProcessGroup | None) -> str:
    """Enable symmetric memory for ``group`` once (a no-op on torch versions where it is automatic)."""
    name = group_name(group)
    if name not in _SYMM_MEM_GROUPS:
        from torch.distributed import _symmetric_memory as symm_mem

        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(name)
        _SYMM_MEM_GROUPS.add(name)
    return name


def tuning_key(A: torch.Tensor, B: torch.Tensor, *args: Any, **kwargs: Any) -> tuple:
    """Tuning key (``key_fn``) of the examples: A's and B's shape/dtype/device and the group size."""
    import triton_dist_tune

    world = dist.get_world_size(kwargs.get("group")) if dist.is_initialized() else 1
    return (triton_dist_tune.to_hashable(A), triton_dist_tune.to_hashable(B), world)


def recording_config(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``fn`` so that each call stores its config entries in ``LAST_CONFIG[fn.__name__]``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        LAST_CONFIG[fn.__name__] = {k: kwargs[k] for k in CONFIG_KEYS if k in kwargs}
        return fn(*args, **kwargs)

    return wrapper


def time_group_ms(
    fn: Callable[[], Any], group: dist.ProcessGroup | None = None, warmup: int = 5, repeat: int = 30
) -> float:
    """Time ``fn()`` on every rank of ``group`` and return the max over ranks of the median in ms.

    Each timed run starts after a ``dist.barrier`` and a device synchronize, and is timed with CUDA
    events around ``fn()`` alone (the host clock without CUDA, for smoke tests).
    """
    cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        dist.barrier(group=group)
        if not cuda:
            start_s = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start_s) * 1e3)
            continue
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    samples.sort()
    median = torch.tensor([samples[len(samples) // 2]], device="cuda" if cuda else "cpu")
    dist.all_reduce(median, op=dist.ReduceOp.MAX, group=group)
    return float(median.item())


_SYMM_BUFFERS: dict[tuple[str, torch.dtype, int], tuple[torch.Tensor, Any]] = {}


def symm_buffer(
    group: dist.ProcessGroup | None, numel: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, Any]:
    """A cached symmetric-memory buffer of at least ``numel`` elements and its rendezvous handle.

    Collective on first use and whenever a larger buffer is needed: every rank of ``group`` must ask
    for the same sizes in the same order (true for calls with the same shapes on every rank).
    """
    name = enable_symm_mem(group)
    key = (name, dtype, device.index if device.index is not None else torch.cuda.current_device())
    cached = _SYMM_BUFFERS.get(key)
    if cached is None or cached[0].numel() < numel:
        from torch.distributed import _symmetric_memory as symm_mem

        if cached is not None:
            torch.cuda.synchronize(device)  # nothing in flight may still use the old buffer
            dist.barrier(group=group)
        buf = symm_mem.empty(numel, dtype=dtype, device=device)
        _SYMM_BUFFERS[key] = (buf, symm_mem.rendezvous(buf, name))
    return _SYMM_BUFFERS[key]


def make_tuned(fn: Callable[..., Any], config_space: list[dict[str, Any]], prune_fn: Callable[..., bool],
               **autotune_kwargs: Any) -> Callable[..., Any]:
    """Wrap ``fn`` (an AG-GEMM or GEMM-RS with ``algo``/``splits``/``gemm_config``) with the tuner.

    Every config's first result is checked against ``fn(..., algo="torch")``; the loose tolerances let bf16
    rounding differences through and catch wrong rows, NaNs and garbage. Measuring uses the tuner's defaults
    (steady timing, a race of interleaved rounds).
    """
    import triton_dist_tune

    options: dict[str, Any] = {
        "ref_prog": functools.partial(fn, algo="torch"),
        "rtol": 2e-2,
        "atol": 2e-2,
        **autotune_kwargs,
    }
    return triton_dist_tune.autotune(config_space=config_space, key_fn=tuning_key, prune_fn=prune_fn,
                                     **options)(recording_config(fn))


def demo_device() -> tuple[torch.device, torch.dtype, float]:
    """The device, dtype and relative tolerance of a demo: a GPU in bf16, else the CPU in float32 (the kernels in
    Triton's interpreter)."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device()), torch.bfloat16, 2e-2
    return torch.device("cpu"), torch.float32, 1e-4


def decided_counts(tuned: Callable[..., Any]) -> tuple[int, int]:
    """How an ``autotune`` function's keys were decided in this process: (tuned here, served from the disk cache),
    from its record of decisions (``tuned.tuner.decisions``, each marked ``cached`` where the cache held it). A key
    served by an ``undecided=`` policy (``TRITON_DIST_AUTOTUNE_UNDECIDED``) is in neither."""
    decisions = list(tuned.tuner.decisions.values())
    cached = sum(1 for decision in decisions if decision.cached)
    return len(decisions) - cached, cached


def contextual_counts(tuned: Callable[..., Any]) -> tuple[int, int]:
    """As :func:`decided_counts`, for a ``contextual_autotune`` function: how its kernels' keys were decided in this
    process, (tuned here, served from the disk cache), from its record of decisions (``tuned.tuner.decisions``, each
    with ``how``: ``disk cache`` where the cache held it)."""
    hows = [decision["how"] for decision in tuned.tuner.decisions.values()]
    cached = hows.count("disk cache")
    return len(hows) - cached, cached


def cache_line(name: str, counts: dict[str, tuple[int, int]], failed: int = 0) -> str:
    """The line an example prints on rank 0 to say how its keys were decided: ``ag_gemm keys: 1 tuned, 0 served from
    the cache`` (a first run), ``ag_gemm keys: 0 tuned, 1 served from the cache (...)`` (a run again on the same
    cache); ``counts``: function name -> (tuned, served from the cache), each named where there are several;
    ``failed``: the keys whose tuning failed (a campaign's), counted at the end (``..., 1 failed``)."""
    parts = [f"{function + ' ' if len(counts) > 1 else ''}{tuned} tuned, {cached} served from the cache"
             for function, (tuned, cached) in counts.items()]
    tuned_all, cached_all = (sum(pair[i] for pair in counts.values()) for i in (0, 1))
    why = ("" if tuned_all or (failed and not cached_all) else
           " (decided by an earlier run; TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1 tunes again)" if cached_all else
           " (none decided: served without tuning by TRITON_DIST_AUTOTUNE_UNDECIDED's policy)")
    return f"{name} keys: {'; '.join(parts)}{f', {failed} failed' if failed else ''}{why}"


def demo_report(name: str, result: torch.Tensor, expected: torch.Tensor, tol: float,
                tuned: Callable[..., Any] | None = None) -> int:
    """Rank 0 prints one line per rank (its error against ``expected`` and the config it ran), then, given the
    ``tuned`` function, one line saying whether its key was tuned or served from the cache (:func:`cache_line`);
    every rank returns the exit status: 1 when some rank's error is above ``tol``. Ends the process group."""
    error = ((result.float() - expected).norm() / expected.norm().clamp_min(1e-30)).item()
    rank, world = dist.get_rank(), dist.get_world_size()
    line = f"{name} rank {rank}/{world}: {'OK' if error <= tol else 'FAIL'} rel err {error:.2e}; {LAST_CONFIG[name]}"
    lines: list[Any] = [None] * world
    dist.all_gather_object(lines, (line, error <= tol))
    if rank == 0:  # in rank order, from one process: ranks printing at once would mix their lines
        print("\n".join(text for text, _ in lines), flush=True)
        if tuned is not None:
            print(cache_line(name, {name: decided_counts(tuned)}), flush=True)
    dist.destroy_process_group()
    return 0 if all(ok for _, ok in lines) else 1
