"""Compiling every config's kernels before measuring, in parallel, so that measuring never waits on a compiler.

The tuned function is opaque to the tuner, so the user says how to compile a config: ``precompile_fn(config,
*args, **kwargs)``, typically a call of ``kernel.warmup(*args, grid=..., **meta)`` for each Triton kernel the
config would launch. Triton's compiler spends much of its time outside the interpreter lock (LLVM, ptxas), so a
bounded thread pool overlaps the configs' compilations. A config whose compilation fails on any rank is left out
on every rank.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import settings
from ..errors import describe_error
from ..group.channel import Group


def default_workers() -> int:
    """Threads used to compile: ``TRITON_DIST_AUTOTUNE_COMPILE_THREADS`` or min(8, CPU count); one under Triton's
    interpreter (``TRITON_INTERPRET=1``), which patches ``triton.language`` while it runs and is not thread-safe."""
    env = settings.current()
    if env.interpret:
        return 1
    return env.compile_threads or min(8, os.cpu_count() or 1)


def precompile(group: Group, label: str, precompile_fn: Callable[..., Any], todo: Sequence[tuple[int, dict, str]],
               args: tuple, kwargs: dict[str, Any], workers: int | None, timeout: float) -> dict[int, str]:
    """Compile every config of ``todo`` in a thread pool; returns {index: "rank r: error"} of the configs that
    failed on some rank (identical on every rank)."""

    device = _current_cuda_device()

    def compile_one(item: tuple[int, dict, str]) -> tuple[int, str | None]:
        index, config, _ = item
        try:
            if device is not None:  # a new thread starts on GPU 0: compile for this rank's GPU
                import torch

                torch.cuda.set_device(device)
            precompile_fn(config, *args, **kwargs)
            return index, None
        except Exception as exc:  # a config that does not compile is data
            return index, describe_error(exc)

    threads = 1 if default_workers() == 1 else (workers or default_workers())
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tdt-compile") as pool:
        mine = {i: e for i, e in pool.map(compile_one, todo) if e}
    # every rank compiles len(todo) configs, ``threads`` at a time: allow each wave the full timeout
    waves = -(-len(todo) // threads)
    everyone = group.allgather(mine, f"{label} precompile", timeout=timeout * max(1, waves))
    failed: dict[int, str] = {}
    for rank, errors in enumerate(everyone):
        for index, error in errors.items():
            failed[index] = (failed[index] + "; " if index in failed else "") + f"rank {rank}: compile: {error}"
    return failed


def _current_cuda_device() -> int | None:
    try:
        import torch

        return torch.cuda.current_device() if torch.cuda.is_available() else None
    except Exception:
        return None
