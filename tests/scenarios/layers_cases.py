"""A tensor-parallel x data-parallel layer on 4 ranks, run by tests/test_layers.py.

Usage: python layers_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, 4 ranks). Tensor-parallel
groups [0, 1] and [2, 3], data-parallel groups [0, 2] and [1, 3] (``dist.new_group``); the tuned functions launch
a Triton kernel (the interpreter) and all-reduce on their group. Each rank prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
from _cases import case, emit, main, outcome, waited_for  # noqa: E402
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


@case
def dp_started_while_tp_waits() -> None:
    """Thread A of every rank tunes its tensor-parallel layer, thread B its data-parallel layer. Global ranks 0 and
    2 start A at once, and B only once A waits in the store at its first exchange (its tensor-parallel peer has not
    come); ranks 1 and 3 start A only once their peer's B has ended its first exchange (a file). So the wait of A on
    ranks 0 and 2 can end only after B's first store requests there: a B held behind A's blocking wait (the job
    store's one client) holds it until that wait runs out, and torch prints its store warnings. A store wait's
    first slice is 10 s here, not 1 s: a B that is not held ends its exchange, and rank 1 sends its message, well
    inside it on a loaded machine. Prints how each of A's waits ended."""
    from triton_dist_tune.group import store as store_module

    store_module.BOARD_SLICE_S = 10.0
    tdt.init_distributed()
    tp, dp = groups()
    rank, folder = dist.get_rank(), Path(os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    early = rank in (0, 2)
    parked, a_thread, a_waits = threading.Event(), [0], []
    plain_wait, plain_combine, firsts = store_module.quiet_store_wait, StoreGroup.combine, set()

    def wait(store: Any, keys: list[str], seconds: float, **kwargs: Any) -> None:
        if threading.get_ident() != a_thread[0]:
            return plain_wait(store, keys, seconds, **kwargs)
        if kwargs.get("block"):
            parked.set()
        try:
            plain_wait(store, keys, seconds, **kwargs)
            a_waits.append("returned")
        except Exception as exc:
            a_waits.append(f"{type(exc).__name__}")
            raise

    def combine(self: StoreGroup, *args: Any, **kwargs: Any) -> Any:
        result = plain_combine(self, *args, **kwargs)
        me = threading.get_ident()
        if me != a_thread[0] and me not in firsts:
            firsts.add(me)
            (folder / f"dp_exchanged.rank{rank}").touch()
        return result

    store_module.quiet_store_wait = wait
    StoreGroup.combine = combine  # type: ignore[method-assign]
    f, g = layer("tp_layer", tp, n_warmup=1, n_repeat=2), layer("dp_layer", dp, n_warmup=1, n_repeat=2)
    results: dict[str, Any] = {}

    def run_tp() -> None:
        a_thread[0] = threading.get_ident()
        if not early:
            waited_for([folder / f"dp_exchanged.rank{rank - 1}"], 60)
        results["tp"] = outcome(lambda: float(f(torch.ones(64), autotune_pg=tp)[0]))

    def run_dp() -> None:
        if early:
            parked.wait(30)
            time.sleep(0.3)  # (A enters the store's wait: a few bytecodes after the event)
        results["dp"] = outcome(lambda: float(g(torch.ones(32), autotune_pg=dp)[0]))

    threads = [threading.Thread(target=run_tp), threading.Thread(target=run_dp)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    emit(results=results, a_waits=a_waits, tp=decided(f), dp=decided(g))


def _killed_in_tp(store_gone: bool) -> None:
    """Global rank 3 is SIGKILLed in its 6th run of its tensor-parallel group's tuning. ``store_gone``: ranks 0
    and 1 end as soon as their own group's tuning has (rank 0 hosts the store), and rank 3 is killed only once
    rank 0's process is gone; else rank 0 stays until rank 2 has printed its result."""
    tdt.init_distributed()
    tp, _ = groups()
    rank, folder = dist.get_rank(), Path(os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"])
    store = dist.distributed_c10d._get_default_store()
    store.set(f"layers/pid{rank}", str(os.getpid()))
    host_pid = int(store.get("layers/pid0"))

    def on_run(count: int) -> None:
        if rank == 3 and count == 6:
            if store_gone:
                deadline = time.monotonic() + 60
                while Path(f"/proc/{host_pid}").exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)

    f = layer("tp_layer", tp, [0], on_run, n_warmup=2, n_repeat=4, timing="cold")
    began = time.monotonic()
    result = outcome(lambda: float(f(torch.ones(64), autotune_pg=tp)[0]))
    emit(result=result, seconds=round(time.monotonic() - began, 1), decided=decided(f))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"done.rank{rank}").touch()
    if rank == 0 and not store_gone:
        waited_for([folder / "done.rank2"], 120)
    os._exit(0)


@case
def killed_in_tp() -> None:
    """Global rank 3 killed mid-tuning; the store's host lives."""
    _killed_in_tp(store_gone=False)


@case
def killed_in_tp_store_gone() -> None:
    """Global rank 3 killed mid-tuning after the store's host (global rank 0, of the other group) has ended."""
    _killed_in_tp(store_gone=True)


if __name__ == "__main__":
    main()
