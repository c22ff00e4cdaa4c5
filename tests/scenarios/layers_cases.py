"""A tensor-parallel x data-parallel layer on 4 ranks, run by tests/test_layers.py.

Usage: python layers_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, 4 ranks). Tensor-parallel
groups [0, 1] and [2, 3], data-parallel groups [0, 2] and [1, 3] (``dist.new_group``); the tuned functions launch
a Triton kernel (the interpreter) and all-reduce on their group. Each rank prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import threading  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
from _cases import case, emit, main, outcome  # noqa: E402
from _kernels import increment  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.group.store import StoreGroup  # noqa: E402

SPACE = [{"block": b} for b in (16, 32, 64)]
#: Triton's interpreter patches triton.language while a kernel runs: two threads must not run kernels at once
INTERPRETER = threading.Lock()


def groups() -> tuple[Any, Any]:
    """This rank's tensor-parallel and data-parallel groups (every rank creates all four, in one order)."""
    rank = dist.get_rank()
    tps = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dps = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    return tps[rank // 2], dps[rank % 2]


def layer(name: str, group: Any, runs: list[int] | None = None, on_run: Any = None, **options: Any) -> Any:
    """An ``autotune``d layer: ``x += 1`` by a Triton kernel of ``block`` elements per program, then an all-reduce
    on ``group``; ``runs`` counts its runs, ``on_run(count)`` is called at the start of each."""

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), restore_value=["x"], name=name, **options)
    def fn(x: torch.Tensor, *, block: int) -> torch.Tensor:
        if runs is not None:
            runs[0] += 1
            if on_run is not None:
                on_run(runs[0])
        with INTERPRETER:
            increment[(triton.cdiv(x.numel(), block),)](x, x.numel(), BLOCK=block)
        dist.all_reduce(x, group=group)
        return x

    return fn


def decided(fn: Any) -> dict[str, Any]:
    return {str(slot[-1]): config for slot, config in fn.tuner.decided_in.items()}


@case
def tp_and_dp_tuned_on_two_threads() -> None:
    """Each rank tunes its tensor-parallel layer on one thread and its data-parallel layer on another, at once:
    each thread's first exchange waits until both threads of the rank are inside their tunings, so that every
    exchange of either runs while the other thread tunes too."""
    tdt.init_distributed()
    tp, dp = groups()
    both = threading.Barrier(2, timeout=10)
    real, firsts = StoreGroup.combine, set()

    def combine(self: StoreGroup, *args: Any, **kwargs: Any) -> Any:
        me = threading.get_ident()
        if me not in firsts:
            firsts.add(me)
            both.wait()
        return real(self, *args, **kwargs)

    StoreGroup.combine = combine  # type: ignore[method-assign]
    f, g = layer("tp_layer", tp, n_warmup=1, n_repeat=4), layer("dp_layer", dp, n_warmup=1, n_repeat=4)
    results: dict[str, Any] = {}

    def run(name: str, fn: Any, group: Any, n: int) -> None:
        results[name] = outcome(lambda: float(fn(torch.ones(n), autotune_pg=group)[0]))

    threads = [threading.Thread(target=run, args=("tp", f, tp, 64 if dist.get_rank() < 2 else 128)),
               threading.Thread(target=run, args=("dp", g, dp, 32))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    emit(results=results, tp=decided(f), dp=decided(g))


if __name__ == "__main__":
    main()
