"""What every part of ``bench_search.py`` shares: whether a GPU is timed, progress lines, the device sync, and
one shape's tensors (:class:`State`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import _search_env  # noqa: F401  (fresh HOME and caches before Triton is imported)
import torch

GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"


def say(text: str) -> None:
    """A progress line (rank 0 of a job only), flushed at once."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"[bench_search {time.strftime('%H:%M:%S')}] {text}", flush=True)


def sync() -> None:
    """Wait for the device (GPU only)."""
    if GPU:
        torch.cuda.synchronize()


def gpu_name() -> str:
    """The GPU's name, or ``"cpu-smoke"``."""
    return torch.cuda.get_device_name() if GPU else "cpu-smoke"


@dataclass
class State:
    """One shape's tensors: the call's arguments for the tuned function, and a preallocated output for the
    oracle's launches (graphs must not allocate)."""

    m: int
    args: tuple
    out: torch.Tensor

