"""Scenarios for the runs of one ``contextual_autotune`` call: the bound on runs when every key is decided as it is
met, a key finished by a rank that meets it late, the watchdog over run 0, and a late rank's pruning; run as real
processes by tests/test_contextual_semantics.py.

Usage: python contextual_runs_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set for multi-rank cases). Each
rank prints ``RESULT {json}`` lines.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import glob  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, contextual_virtual_clock, emit, main, spend  # noqa: E402
from _kernels import increment  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune  # noqa: E402


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def first_only(configs, nargs, **kwargs):
    """A pruning that keeps the first config alone (a shape rule, a perf model with top_k=1)."""
    return configs[:1]


def first_only_on_rank_1(configs, nargs, **kwargs):
    """Rank 1 may run the first config only (its shapes leave out the others); rank 0 keeps them all. With
    ``PRUNE_RAISES`` set, rank 1's pruning raises instead."""
    if rank() == 1 and os.environ.get("PRUNE_RAISES"):
        raise ValueError("rank 1's pruning cannot read its shapes")
    return configs[:1] if rank() == 1 else configs


def journals_left() -> int:
    return len(glob.glob(os.path.join(os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"], "**", "*.journal"),
                         recursive=True))


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"],
                 prune_configs_by={"early_config_prune": first_only})
@triton.jit
def one_config_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) + 1, mask=offs < n)


@case
def bound_keys_decided_as_met():
    """Alone, max_runs=5: the key grows on every run (a KV-cache length) and pruning leaves one config, so each key
    is decided as it is met. The function gives up (raises) at its 40th run, so that a call the bound does not end
    ends anyway."""
    runs = []

    @contextual_autotune(is_dist=False, n_warmup=1, n_repeat=1, max_runs=5)
    def step(x):
        runs.append(1)
        if len(runs) >= 40:
            raise RuntimeError("40 runs: max_runs did not bound the call")
        n = len(runs)
        out = torch.zeros_like(x)
        one_config_kernel[(triton.cdiv(n, 16),)](x, out, n)
        return out, n

    x = torch.zeros(64)
    try:
        out, n = step(x)
        emit(runs=len(runs), error=None, ok=out.tolist() == [1.0] * n + [0.0] * (x.numel() - n))
    except Exception as exc:
        emit(runs=len(runs), error=f"{type(exc).__name__}: {str(exc)[:300]}", ok=False)


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
@triton.jit
def grown_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) + 1, mask=offs < n)


@case
def bounded_run_raises_on_one_rank():
    """2 ranks, max_runs=3: the key grows on every run, so the bound cuts the first call; the run after the cut
    raises on rank 1 alone, after the function's all_reduce (a check of its data there). Then a second call."""
    tdt.init_distributed()
    runs = []

    @contextual_autotune(n_warmup=1, n_repeat=1, max_runs=3)
    def step(x):
        runs.append(1)
        n = 16 + len(runs)
        out = torch.zeros_like(x)
        grown_kernel[(triton.cdiv(n, 32),)](x, out, n)
        total = out.sum().reshape(1)
        dist.all_reduce(total)
        if rank() == 1 and len(runs) == 4:
            raise RuntimeError("rank 1's check of its data failed")
        return out

    x = torch.zeros(64)
    calls = []
    for _ in range(2):
        try:
            step(x)
            calls.append("ok")
        except Exception as exc:
            calls.append(f"{type(exc).__name__}: {str(exc)[:300]}")
    emit(calls=calls, runs=len(runs))


# -- a rank that meets a key late ------------------------------------------------------------------------------------


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128)], key=["n"], reset_to_zero=["acc"],
                 prune_configs_by={"early_config_prune": first_only_on_rank_1})
@triton.jit
def late_acc_kernel(acc, x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(acc + offs, tl.load(x + offs, mask=mask), mask=mask)


@case
def joined_late_and_done():
    """Config 0 is measured in run 0 (rank 0 alone); rank 1 meets the key in run 1, where rank 0 launches config 1,
    which rank 1's pruning drops: the join fails config 1, the last open one, and so decides the key. The decision
    must be published on every rank (decisions, the listener, the kernel's choice, journals removed), and the final
    run must reset ``acc`` before its real launch: ``acc`` holds one call's worth, in this call and the next."""
    tdt.init_distributed()
    heard = []
    knobs = getattr(triton, "knobs", None)
    has_listener = knobs is not None and hasattr(knobs.autotuning, "listener")
    if has_listener:
        knobs.autotuning.listener = lambda **kw: heard.append(kw["best_config"].kwargs["BLOCK"])
    n, runs = 64, []

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1)
    def layer(acc, x):
        runs.append(1)
        if rank() == 0 or len(runs) > 1:  # rank 1 meets the key one run later
            late_acc_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](acc, x, n)
        dist.barrier()
        return acc.clone()

    x = torch.arange(n, dtype=torch.float32)
    first = layer(torch.zeros(n), x)
    second = layer(torch.zeros(n), x)
    emit(rank=rank(), acc_ok=first.tolist() == x.tolist(), again_ok=second.tolist() == x.tolist(),
         decisions={k[1]: v["index"] for k, v in layer.tuner.decisions.items()}, has_listener=has_listener,
         heard=heard, journals=journals_left())


@case
def run_0_left_waiting():
    """Rank 1's function raises in run 0, before the all_reduce and before any tuned launch, and rank 1 stays alive:
    rank 0, waiting in the all_reduce, must be ended by its watchdog (exit status 87 once it reads rank 1's report
    on the call's failure board, after the grace; 86 at T without one)."""
    tdt.init_distributed()
    runs = []

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def layer(x):
        runs.append(1)
        if rank() == 1 and len(runs) == 1:
            raise RuntimeError("rank 1 raises before the collective")
        y = x.clone()
        dist.all_reduce(y)  # rank 0 waits here for rank 1
        out = torch.empty_like(y)
        one_config_kernel[(4,)](y, out, y.numel())
        return out

    try:
        layer(torch.zeros(64))
        emit(rank=rank(), error=None)
    except BaseException as exc:
        emit(rank=rank(), error=type(exc).__name__)
    if rank() == 1:
        time.sleep(120)  # alive: rank 0's watchdog, not a closed connection, ends its wait in the all_reduce


# -- a late rank's pruning -------------------------------------------------------------------------------------------

LAUNCHED: list = []
RUNS: list = []


def logging_hook(index: int):
    def hook(nargs):
        LAUNCHED.append([len(RUNS) - 1, index])
        spend([50.0, 1.0][index])  # config 1 is the faster (virtual clock)

    return hook


pruned_late_kernel = triton.autotune(
    configs=[triton.Config({"BLOCK": b}, pre_hook=logging_hook(i)) for i, b in enumerate((64, 128))], key=["n"],
    restore_value=["x_ptr"], prune_configs_by={"early_config_prune": first_only_on_rank_1})(increment)


@case
def late_rank_pruning():
    """Rank 1's pruning keeps config 0 only; it meets the key from run LATE on. LATE=1: run 1 is config 1's step of
    the race; LATE=2: run 2 is the final run, config 1 (the faster) chosen. Rank 1 must never launch config 1, and
    both ranks end with config 0 and ``src`` incremented once (``restore_value``: a run whose launch was a
    benchmarking one is not the call's result)."""
    tdt.init_distributed()
    contextual_virtual_clock()
    late, n = int(os.environ["LATE"]), 64

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1)
    def layer(src):
        RUNS.append(1)
        if rank() == 0 or len(RUNS) > late:
            pruned_late_kernel[(1,)](src, n)
        dist.barrier()
        return src.clone()

    x = torch.arange(n, dtype=torch.float32)
    src = x.clone()
    try:
        out = layer(src)
    except Exception as exc:
        emit(rank=rank(), runs=len(RUNS), launched=LAUNCHED, error=f"{type(exc).__name__}: {exc}")
        return
    emit(rank=rank(), runs=len(RUNS), launched=LAUNCHED, ok=out.tolist() == src.tolist() == (x + 1).tolist(),
         decisions={k[1]: v["index"] for k, v in layer.tuner.decisions.items()})


# -- a key pruned to one config --------------------------------------------------------------------------------------


@triton.jit
def acc_body(acc, x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(acc + offs, tl.load(x + offs, mask=mask), mask=mask)


def bench_once(fn, quantiles=None, **kwargs):
    """A ``do_bench`` that launches once (Triton's own needs a device driver, which the interpreter has not)."""
    fn()
    return [1.0, 1.0, 1.0]


def one_kept_acc():
    return triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128)], key=["n"], reset_to_zero=["acc"],
                           prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: configs[1:]},
                           do_bench=bench_once)(acc_body)


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"])
@triton.jit
def copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


@case
def pruned_to_one_config():
    """A kernel whose pruning keeps one config accumulates into a ``reset_to_zero`` tensor the caller filled, beside
    a kernel tuned over several runs. The call must leave that tensor as one launch of stock Triton does (the same
    wrapper, outside the tuned function): Triton 3.9 launches such a key plainly (no hooks: the caller's values are
    added to), Triton 3.6 benchmarks it and resets it first."""
    tuned_acc, stock_acc = one_kept_acc(), one_kept_acc()
    n, runs = 64, []

    @contextual_autotune(is_dist=False, n_warmup=1, n_repeat=1)
    def f(acc, x):
        runs.append(1)
        tuned_acc[(1,)](acc, x, n)
        out = torch.empty_like(x)
        copy_kernel[(4,)](x, out, n)
        return acc.clone(), out

    x = torch.arange(n, dtype=torch.float32)
    calls = []
    for _ in range(2):  # a tuning call, then a decided one
        acc, stock = torch.full((n,), 5.0), torch.full((n,), 5.0)
        got, out = f(acc, x)
        stock_acc[(1,)](stock, x, n)
        calls.append({"same_as_stock": got.tolist() == acc.tolist() == stock.tolist(),
                      "added_to_caller": stock.tolist() == (x + 5).tolist(), "copied": out.tolist() == x.tolist()})
    emit(runs=len(runs), calls=calls, version=triton.__version__,
         hows=sorted(d["how"] for d in f.tuner.decisions.values()))


if __name__ == "__main__":
    main()
