"""Scenarios for ``contextual_autotune`` with real Triton kernels in the interpreter, run as real processes by
tests/test_contextual.py.

Usage: python contextual_cases.py CASE  (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set for multi-rank cases).
Each rank prints ``RESULT {json}`` lines.

Each config's ``pre_hook`` sleeps a time that depends on (kernel, rank, config), so that the group's choice is
known in advance and differs from what any rank alone would choose: the group time of a config is the maximum
over ranks, and the least of those wins.

The timed span of a launch also holds the interpreter's run of the kernel, about a few ms per program and tens of
ms on a loaded 2-core machine. Every tuned kernel's blocks are therefore at least as large as the sizes the
scenarios launch (one program per config: that cost is the same for every config), and every choice rests on a
winner of about 5 ms against losers of 80 ms or more (4x or more between group times). The cases that time each
config once (``n_repeat=1``) and assert the choice time their launches on the virtual clock
(:func:`~_cases.contextual_virtual_clock`: each pre_hook also spends its sleep there), so that the choice follows
from the table exactly: on the wall clock, beside 3 busy loops (load average 6-21), 6 of 180 runs of two_keys,
rank_keys and nested_repeated chose an 80 ms loser over a 5 ms winner, or a 320 ms one over an 80 ms one.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import before_each_compile, case, contextual_virtual_clock, emit, main, spend
from triton.runtime.autotuner import Autotuner  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import (
    contextual_autotune,  # noqa: E402
    intercept,  # noqa: E402
)

ORIGINAL_RUN = Autotuner.run

#: sleep in ms per (kernel, rank parity) and config index. add: rank 0 alone picks 0, rank 1 picks 1, the group
#: (max over ranks: 320, 320, 80) 2. scale: rank 0 alone picks 0, rank 1 picks 1, the group (320, 80) 1.
#: Every choice wins by 75 ms or more (a rank alone: 5 against 80) or 4x (the group: 80 against 320).
SLEEP_MS = {("add", 0): [5, 320, 80], ("add", 1): [320, 5, 80], ("scale", 0): [5, 80], ("scale", 1): [320, 5]}
#: fail_one_rank's add: config 2 fails on rank 1; of the others the group picks 1 (5 against 320 ms)
FAIL_ONE_RANK_MS = {("add", 0): [80, 5, 5], ("add", 1): [320, 5, 5]}
#: the kernels' blocks: each at least the largest size launched (128), so every config runs one program
ADD_BLOCKS, SCALE_BLOCKS, COPY_BLOCKS = (128, 256, 512), (128, 256), (128, 256, 512)
#: one entry per launch: (kernel, n, config index), and "run" markers from the tuned functions
SEQ: list = []



def rank() -> int:
    if dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))


def sleeper(kernel: str, index: int, by_n: dict[int, list[int]] | None = None):
    def hook(nargs):
        table = by_n.get(nargs["n"]) if by_n else SLEEP_MS[(kernel, rank() % 2)]
        if table is None:
            return  # a size no test tunes
        SEQ.append((kernel, nargs["n"], index))
        time.sleep(table[index] / 1e3)
        spend(table[index])  # the time it takes on the virtual clock, where a case times on it

    return hook


def configs(kernel: str, blocks, **hook_args):
    return [triton.Config({"BLOCK": b}, pre_hook=sleeper(kernel, i, **hook_args)) for i, b in enumerate(blocks)]


@triton.autotune(configs=configs("add", ADD_BLOCKS), key=["n"])
@triton.jit
def add_kernel(x, y, out, n, BAD: tl.constexpr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK != BAD, "BLOCK too large for this rank")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.autotune(configs=configs("scale", SCALE_BLOCKS), key=["n"])
@triton.jit
def scale_kernel(x, out, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * s, mask=mask)


# per n: which config is fastest (sleeps the same on every rank): 5 ms against 80
BY_N = {64: [80, 80, 5], 128: [5, 80, 80]}


@triton.autotune(configs=configs("copy", COPY_BLOCKS, by_n=BY_N), key=["n"])
@triton.jit
def copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


# three configs alike and a slow one: the three are close contenders (closing rounds), the slow one leaves. One
# program each (a block of 128 or more for n=64): the interpreter's cost per program would set the three apart
CLOSE_BY_N = {64: [40, 40, 40, 240]}


@triton.autotune(configs=configs("close", (128, 256, 512, 1024), by_n=CLOSE_BY_N), key=["n"])
@triton.jit
def close_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


# config 0 is launched first; the others are compiled ahead, one after another by one thread (the interpreter):
# reliability_cases.py's contextual_compiles_queued_behind_a_stuck_one makes config 1's compile hang for good.
# Config 2 (queued behind it) is the fastest, 5 ms against 80
QUEUED_BY_N = {64: [80, 80, 5, 80]}


@triton.autotune(configs=configs("queued", (128, 256, 512, 1024), by_n=QUEUED_BY_N), key=["n"])
@triton.jit
def queued_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


#: Triton's interpreter patches triton.language while a kernel runs, so two threads must not run kernels at once
INTERPRETER = threading.Lock()


def launch(kernel, n, *args):
    with INTERPRETER:
        kernel[grid(n)](*args)


def add(x, y, bad=0):
    out = torch.empty_like(x)
    launch(add_kernel, x.numel(), x, y, out, x.numel(), bad)
    return out


def scale(x, s):
    out = torch.empty_like(x)
    launch(scale_kernel, x.numel(), x, out, x.numel(), s)
    return out


def inputs(n=64):
    r = rank()
    return torch.arange(n, dtype=torch.float32) + r, torch.full((n,), 1.0 + r)


def short(track_id: str) -> str:
    """A track id without its module and wrapper digest: ``add_kernel``."""
    return track_id.split(".")[-1].split("@")[0]


def chosen(tuner) -> dict[str, int]:
    return {f"{short(k[0])}{k[1]}": d["index"] for k, d in sorted(tuner.decisions.items())}


def runs_of_seq() -> list[list]:
    """SEQ cut into runs: the launches (kernel, n, config) of each run of a tuned function."""
    out: list[list] = []
    for item in SEQ:
        if item == "run":
            out.append([])
        elif out:
            out[-1].append(list(item))
    return out


def stock_hits(kernel, *args, n: int) -> bool:
    """A stock launch outside any tuning; on CPU stock Triton cannot benchmark (no driver), so success means the
    launch hit the kernel's cache."""
    try:
        kernel[grid(n)](*args)
        return True
    except Exception as exc:
        print("stock launch failed:", exc, file=sys.stderr)
        return False


def add_reduce_scale(n_warmup: int, n_repeat: int, is_dist=True, group=None):
    """The layer most cases tune: add (3 configs), all_reduce over ``group``, scale (2 configs)."""

    @contextual_autotune(is_dist=is_dist, n_warmup=n_warmup, n_repeat=n_repeat)
    def layer(x, y):
        SEQ.append("run")
        s = add(x, y)
        dist.all_reduce(s, group=group)
        return scale(s, 0.5)

    return layer


def add_reduce_scale_reference(x, y, group=None):
    """What :func:`add_reduce_scale`'s layer must return."""
    ref = (x + y).clone()
    dist.all_reduce(ref, group=group)
    return ref * 0.5


def untouched_outside() -> bool:
    """Outside a tuned call Triton is untouched: no handler is active, and ``Autotuner.run`` is Triton's own or the
    interception wrapper (installed once, left in place) whose launches outside a tuned call go to Triton's own."""
    return intercept.active_handler() is None and (
        Autotuner.run is ORIGINAL_RUN or (intercept.patched() and intercept.original_run() is ORIGINAL_RUN))


@case
def two_kernels():
    """Two kernels with 3 and 2 configs around an all_reduce; the group must choose add=2, scale=1."""
    tdt.init_distributed()

    layer = add_reduce_scale(n_warmup=1, n_repeat=2)
    x, y = inputs()
    out = layer(x, y)
    expected = add_reduce_scale_reference(x, y)
    ok = bool(torch.equal(out, expected))
    seq = runs_of_seq()
    patched_after = not untouched_outside()
    z = torch.empty_like(x)
    hit = stock_hits(add_kernel, x, y, z, 64, 0, n=64) and bool(torch.equal(z, x + y))
    SEQ.clear()
    again = layer(x, y)
    emit(chosen=chosen(layer.tuner), runs=len(seq), ok=ok, seq=seq,
         patched_after=patched_after, stock_hit=hit, second_runs=len(runs_of_seq()),
         second_ok=bool(torch.equal(again, expected)), cache=add_kernel.cache.get((64, *["torch.float32"] * 3)) is
         add_kernel.configs[2], tables={short(k[0]): d["table"] for k, d in layer.tuner.decisions.items()})


@case
def subgroups():
    """4 ranks in two groups, {0, 2} and {1, 3}, each tuning over its own group: the even ranks' sleeps make them
    choose add=0, scale=0, the odd ranks' add=1, scale=1 (over the whole world it would be add=2, scale=1). One
    sample per config (``n_repeat=1``), on the virtual clock: on the wall clock a rank descheduled for 75 ms in a
    loaded run made an 80 ms loser win, and 200 ms losers only narrow that."""
    tdt.init_distributed()
    contextual_virtual_clock()
    groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    mine = groups[rank() % 2]

    layer = add_reduce_scale(n_warmup=1, n_repeat=1, is_dist=mine, group=mine)
    x, y = inputs()
    out = layer(x, y)
    ok = bool(torch.equal(out, add_reduce_scale_reference(x, y, group=mine)))
    emit(chosen=chosen(layer.tuner), runs=len(runs_of_seq()), ok=ok)


@case
def fail_one_rank():
    """add's config 2 (as fast as config 1) fails to compile on rank 1 only: left out everywhere, config 1 wins
    (5 ms against config 0's 320 on the odd ranks)."""
    tdt.init_distributed()
    SLEEP_MS.update(FAIL_ONE_RANK_MS)

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x, y):
        SEQ.append("run")
        s = add(x, y, bad=ADD_BLOCKS[2] if rank() == 1 else 0)
        dist.all_reduce(s)
        return s

    x, y = inputs()
    out = layer(x, y)
    ref = (x + y).clone()
    dist.all_reduce(ref)
    decision = next(iter(layer.tuner.decisions.values()))
    emit(chosen=decision["index"], runs=len(runs_of_seq()), ok=bool(torch.equal(out, ref)),
         states=[r["state"] for r in decision["table"]], errors=[r["error"] for r in decision["table"]])


@case
def two_keys():
    """One kernel, two keys in one run (n=64 twice, n=128 once), each launch with its own tensors."""
    tdt.init_distributed()
    contextual_virtual_clock()  # one sample per config: see the module's docstring

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def f(a, b, c):
        SEQ.append("run")
        outs = [torch.empty_like(t) for t in (a, b, c)]
        for t, o in zip((a, b, c), outs, strict=True):
            copy_kernel[grid(t.numel())](t, o, t.numel())
        dist.all_reduce(outs[0])
        return outs

    a, b, c = torch.randn(64), torch.randn(128), torch.randn(64)
    out = f(a, b, c)
    a_sum = a.clone()
    dist.all_reduce(a_sum)
    ok = bool(torch.equal(out[0], a_sum) and torch.equal(out[1], b) and torch.equal(out[2], c))
    seq = runs_of_seq()
    same_config = all(len({i for k, n, i in run if n == 64}) == 1 for run in seq)
    emit(chosen=chosen(f.tuner), runs=len(seq), ok=ok, same_config_per_key=same_config, seq=seq)


@case
def nested_repeated():
    """Nesting on the same group (the inner joins), on another group (the inner tunes on its own), repeated calls,
    a new key on a later call, and a thread that launches stock Triton during a tuning."""
    tdt.init_distributed()
    contextual_virtual_clock()  # one sample per config: see the module's docstring
    other = dist.new_group([0, 1])
    inner_runs = []

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def inner(s):
        inner_runs.append(1)
        return scale(s, 2.0)

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def outer(x, y):
        SEQ.append("run")
        s = add(x, y)
        dist.all_reduce(s)
        return inner(s)

    x, y = inputs()
    ref = (x + y).clone()
    dist.all_reduce(ref)
    # a thread launching copy_kernel, whose key n=32 is in its stock cache, all through the tuning
    copy_kernel.cache[(32, "torch.float32", "torch.float32")] = copy_kernel.configs[1]
    stop, thread_errors, thread_launches = threading.Event(), [], []

    def stock_launches():
        t, o = torch.randn(32), torch.empty(32)
        while not stop.is_set():
            try:
                launch(copy_kernel, 32, t, o, 32)
                thread_launches.append(bool(torch.equal(t, o)))
            except Exception as exc:
                thread_errors.append(repr(exc))
            time.sleep(0.002)

    thread = threading.Thread(target=stock_launches)
    thread.start()
    out1 = outer(x, y)
    stop.set()
    thread.join()
    result = {"joined": {"outer_runs": len(runs_of_seq()), "inner_runs": len(inner_runs),
                         "ok": bool(torch.equal(out1, 2 * ref)), "outer": chosen(outer.tuner),
                         "inner": chosen(inner.tuner)},
              "thread_errors": thread_errors, "thread_launches": len(thread_launches),
              "thread_ok": all(thread_launches), "thread_key_untouched":
              copy_kernel.cache[(32, "torch.float32", "torch.float32")] is copy_kernel.configs[1]}
    SEQ.clear()
    inner_runs.clear()
    out2 = outer(x, y)
    result["repeat"] = {"outer_runs": len(runs_of_seq()), "inner_runs": len(inner_runs),
                        "ok": bool(torch.equal(out2, 2 * ref))}

    # the inner on another group: tunes in its own loop, inside the outer's first run
    @contextual_autotune(is_dist=other, n_warmup=1, n_repeat=1)
    def inner2(s):
        inner_runs.append(1)
        return scale(s, 3.0)

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def outer2(x, y):
        SEQ.append("run")
        return inner2(add(x, y))

    SEQ.clear()
    inner_runs.clear()
    x3, y3 = inputs(96)
    out3 = outer2(x3, y3)
    result["other_group"] = {"outer_runs": len(runs_of_seq()), "inner_runs": len(inner_runs),
                             "ok": bool(torch.equal(out3, 3 * (x3 + y3))), "outer": chosen(outer2.tuner),
                             "inner": chosen(inner2.tuner)}

    # a choice made by each rank alone is not taken for the group's: the group tunes again and agrees
    @contextual_autotune(is_dist=False, n_warmup=0, n_repeat=1)
    def alone(x, y):
        return add(x, y)

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1)
    def together(x, y):
        return add(x, y)

    x4, y4 = inputs(48)
    alone(x4, y4)
    together(x4, y4)
    result["alone_then_group"] = [next(iter(alone.tuner.decisions.values()))["index"],
                                  next(iter(together.tuner.decisions.values()))["index"]]
    result["patched_after"] = not untouched_outside()
    emit(**result)


@case
def disk():
    """Run twice as two jobs with one cache folder: the second loads every choice (group rank 0 reads)."""
    tdt.init_distributed()
    contextual_virtual_clock()  # one sample per config: see the module's docstring

    layer = add_reduce_scale(n_warmup=1, n_repeat=1)
    x, y = inputs()
    out = layer(x, y)
    ok = bool(torch.equal(out, add_reduce_scale_reference(x, y)))
    # each kernel's configs_timings, by BLOCK, as stock Triton's: [group ms, 20th, 80th percentile]
    timings = {name: {str(c.kwargs["BLOCK"]): t for c, t in kernel.configs_timings.items()}
               for name, kernel in (("add", add_kernel), ("scale", scale_kernel))}
    from examples._dist_common import cache_line, contextual_counts

    emit(chosen=chosen(layer.tuner), runs=len(runs_of_seq()), seq=runs_of_seq(),
         how=sorted({d["how"] for d in layer.tuner.decisions.values()}), ok=ok, timings=timings,
         cache_line=cache_line("layer", {"layer": contextual_counts(layer)}))


@case
def rank_keys():
    """Each rank launches the kernel with a key of its own: each key is tuned from the ranks that launch it."""
    tdt.init_distributed()
    contextual_virtual_clock()  # one sample per config: see the module's docstring

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def layer(x, y):
        SEQ.append("run")
        s = add(x, y)
        total = s.sum().reshape(1)
        dist.all_reduce(total)
        return s, total

    x, y = inputs(64 * (rank() + 1))
    s, total = layer(x, y)
    emit(chosen=chosen(layer.tuner), runs=len(runs_of_seq()), ok=bool(torch.equal(s, x + y)))


def raising_on_rank_1(count: list) -> Callable:
    """A contextual layer (an add, then an all-reduce) that raises on rank 1 in its 4th run (tuning run 3, after its
    collective); ``count`` gets one item per run."""

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def layer(x, y):
        count.append(1)
        s = add(x, y)
        dist.all_reduce(s)
        if rank() == 1 and len(count) == 4:
            raise ValueError("boom on rank 1")
        return s

    return layer


@case
def user_raises():
    """The function raises on rank 1 in tuning run 3 (after its collective): every rank raises the same error."""
    tdt.init_distributed()
    count: list = []
    layer = raising_on_rank_1(count)
    try:
        layer(*inputs())
        emit(error=None)
    except tdt.AutotuneError as exc:
        emit(error=type(exc).__name__, message=str(exc), runs=len(count),
             cause=type(exc.__cause__).__name__ if exc.__cause__ else None, patched_after=not untouched_outside())


@case
def single():
    """No torch.distributed: is_dist=True tunes alone; nesting on the same (single) group joins."""
    inner_runs = []

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1)
    def inner(s):
        inner_runs.append(1)
        return scale(s, 2.0)

    @contextual_autotune
    def outer(x, y):
        SEQ.append("run")
        return inner(add(x, y))

    x, y = inputs()
    out = outer(x, y)
    emit(ok=bool(torch.equal(out, 2 * (x + y))), runs=len(runs_of_seq()), inner_runs=len(inner_runs),
         chosen=chosen(outer.tuner), patched_after=not untouched_outside())


@case
def precompile():
    """Precompiling (forced on under the interpreter, where warmup compiles nothing): a config that does not
    compile is never launched, and is left out."""
    from triton_dist_tune.contextual import compiling as contextual

    contextual.compiles = lambda: True
    compiled = []

    def compile_hook(_, kwargs):
        compiled.append((kwargs["BLOCK"], threading.current_thread().name.startswith("tdt-precompile")))
        if kwargs["BLOCK"] == ADD_BLOCKS[1]:
            raise RuntimeError("ptxas error")

    before_each_compile(add_kernel, compile_hook)

    @contextual_autotune(n_warmup=1, n_repeat=1)
    def f(x, y):
        SEQ.append("run")
        return add(x, y)

    x, y = inputs()
    out = f(x, y)
    decision = next(iter(f.tuner.decisions.values()))
    emit(ok=bool(torch.equal(out, x + y)), compiled=sorted(compiled), seq=runs_of_seq(),
         states=[r["state"] for r in decision["table"]], errors=[r["error"] for r in decision["table"]],
         chosen=decision["index"])


@case
def mpi_two_kernels():
    """Under mpiexec, with an mpi4py communicator and no torch.distributed at all."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    contextual_virtual_clock()  # one sample per config: see the module's docstring

    @contextual_autotune(is_dist=comm, n_warmup=1, n_repeat=1)
    def layer(x, y):
        SEQ.append("run")
        s = add(x, y)
        total = comm.allreduce(float(s.sum()))
        return scale(s, 0.5), total

    x, y = inputs()
    out, total = layer(x, y)
    emit(chosen=chosen(layer.tuner), runs=len(runs_of_seq()), ok=bool(torch.equal(out, (x + y) * 0.5)),
         total=total)


@case
def keys():
    """Our key equals the key stock Triton caches under (stock benchmarking made possible with do_bench)."""

    @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n", "s"],
                     do_bench=lambda fn, quantiles: [1.0, 1.0, 1.0])
    @triton.jit
    def k(x, out, n, s, y, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) * s + tl.load(y + offs, mask=mask), mask=mask)

    results = []
    for n, dtype in ((40, torch.float32), (50, torch.float16)):
        x, out, y = torch.randn(n).to(dtype), torch.empty(n, dtype=dtype), torch.randn(n)
        args, kwargs = (x, out, n), {"s": 2.0, "y": y}
        ours = intercept.tuning_key(k, args, {"grid": grid(n), "warmup": False, **kwargs})
        k[grid(n)](*args, **kwargs)
        results.append(ours in k.cache and len(k.cache) == len(results) + 1)
    emit(keys_match=results, version=triton.__version__)


@case
def closing():
    """One kernel of 4 configs (three alike, one 6x slower), n_warmup=1, n_repeat=2: the launches of every run."""
    tdt.init_distributed()

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x):
        SEQ.append("run")
        out = torch.empty_like(x)
        launch(close_kernel, x.numel(), x, out, x.numel())
        return out

    x, _ = inputs()
    ok = bool(torch.equal(layer(x), x))
    emit(ok=ok, seq=runs_of_seq(), chosen=chosen(layer.tuner))


if __name__ == "__main__":
    main()
