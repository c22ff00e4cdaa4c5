"""Contextual tuning on a real GPU, run as real ranks by tests/test_contextual_cuda.py (skipped without CUDA): two
gloo ranks share one GPU, so that compiling ahead (GPUs only, never under Triton's interpreter) splits the configs
between them.

- ``killed_compiling``: two kernels of 64 configs each (not searched: every config is compiled ahead) under
  ``contextual_autotune``; after run 1 the ranks compile the configs not launched yet, half each, and rank 1 is
  SIGKILLed as its first compile starts (the time written to ``$FAULT_DIR/killed``). Rank 0 ends its share and
  waits at the exchange of compile failures, whose deadline is ``T`` times the waves of compiles (ceil(63 / 16) per
  kernel on a host of 16 CPUs or more: 8); it reports its error, its message and when it ended (``ended``, the
  clock of the file).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import triton
import triton.language as tl
from _cases import case, emit, main

import triton_dist_tune as tdt
from triton_dist_tune.contextual import contextual_autotune

#: 64 configs: the most a space holds without being searched (``SEARCH_ABOVE``), so all are compiled ahead at once
CONFIGS = [triton.Config({"BLOCK": block}, num_warps=warps, num_stages=stages)
           for block in (64, 128, 256, 512, 1024, 2048, 4096, 8192) for warps in (1, 2, 4, 8) for stages in (1, 2)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def double_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, 2 * tl.load(x + offs, mask=mask), mask=mask)


def kill_at_first_compile() -> None:
    """Rank 1 is SIGKILLed as its first compile ahead starts (``fn.warmup`` compiles without launching)."""
    first = threading.Lock()  # the compile threads start at once: one writes the time and kills, the rest wait

    for kernel in (copy_kernel, double_kernel):
        warmup = kernel.fn.warmup

        def dying(*args, warmup=warmup, **kwargs):
            with first:
                Path(os.environ["FAULT_DIR"], "killed").write_text(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            return warmup(*args, **kwargs)

        kernel.fn.warmup = dying


@case
def killed_compiling():
    tdt.init_distributed(backend="gloo")  # two ranks on one GPU: NCCL takes one GPU per rank
    me = dist.get_rank()
    if me == 1:
        kill_at_first_compile()

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def layer(x):
        copied, doubled = torch.empty_like(x), torch.empty_like(x)
        grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)  # noqa: E731
        copy_kernel[grid](x, copied, x.numel())
        double_kernel[grid](copied, doubled, x.numel())
        total = doubled.cpu()
        dist.all_reduce(total)
        return total

    x = torch.arange(4096, dtype=torch.float32, device="cuda")
    try:
        layer(x)
        emit(rank=me, error=None)
    except Exception as exc:
        emit(rank=me, error=type(exc).__name__, message=str(exc), ended=time.time())
    os._exit(0)  # the store's host (rank 0) does not wait for the dead rank at exit


if __name__ == "__main__":
    main()
