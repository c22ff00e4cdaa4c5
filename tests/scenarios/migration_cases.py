"""Scenarios of code ported from ``triton.autotune`` and Triton-distributed: an ``early_config_prune`` that returns
configs of its own making inside ``contextual_autotune``, a stock ``@triton.autotune`` kernel launched by an
``autotune`` function under Triton's interpreter, a kernel's own benchmarking, Triton-distributed's call keywords
and its documented ``prune_fn``; run as real processes by tests/test_migration.py.

Usage: python migration_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main, python_calls  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402

#: the BLOCK of every launch of the pruned kernels (a config pre_hook records it)
BLOCKS: list[int] = []


@triton.jit
def add_one(x, out, n, BLOCK: tl.constexpr):
    """``out = x + 1``: the jit body every stock wrapper below tunes."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


def record(nargs):
    BLOCKS.append(int(nargs["BLOCK"]))


def pruned_kernel(prune):
    return triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=record) for b in (32, 64)], key=["n"],
                           prune_configs_by={"early_config_prune": prune})(add_one)


def tune_pruned(prune) -> None:
    """Tune ``pruned_kernel(prune)`` on the default group; emit what happened."""
    tdt.init_distributed()
    kernel = pruned_kernel(prune)

    @tdt.contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x):
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out

    x = torch.arange(300, dtype=torch.float32)
    BLOCKS.clear()
    try:
        ok = bool(torch.equal(layer(x), x + 1))
        emit(ok=ok, launched=sorted(set(BLOCKS)), best=kernel.best_config.kwargs)
    except Exception as exc:
        from triton.runtime.errors import AutotunerError

        emit(error=type(exc).__name__, message=str(exc), bad_input=isinstance(exc, tdt.BadInputError),
             triton_error=isinstance(exc, AutotunerError), launched=sorted(set(BLOCKS)))


@case
def prune_makes_a_config():
    """The pruning keeps the first config and adds one of its own (BLOCK 256), as stock Triton would benchmark."""
    tune_pruned(lambda configs, nargs, **kw: [configs[0], triton.Config({"BLOCK": 256}, pre_hook=record)])


@case
def prune_returns_equal_copies():
    """The pruning returns new Config objects equal to the kernel's own: they are the kernel's configs."""
    tune_pruned(lambda configs, nargs, **kw: [triton.Config(dict(c.kwargs), pre_hook=record) for c in configs])


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
@triton.jit
def stock_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * 2, mask=mask)


@case
def stock_autotune_inside_autotune():
    """A function tuned by ``autotune`` launches a stock ``@triton.autotune`` kernel (2 configs) under the
    interpreter: Triton's own benchmarking asks for a GPU driver on every config."""
    @tdt.autotune([{"chunks": c} for c in (1, 2)], key_fn=lambda x: x.numel())
    def f(x, *, chunks):
        out = torch.empty_like(x)
        stock_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out

    try:
        f(torch.ones(100))
        emit(ok=True)
    except Exception as exc:
        emit(error=type(exc).__name__, message=str(exc), interpret=os.environ.get("TRITON_INTERPRET"),
             ranks=dist.get_world_size() if dist.is_initialized() else 1)


def rank_bench_kernel():
    """A stock ``@triton.autotune`` kernel (BLOCK 32 or 64) whose ``do_bench`` ranks BLOCK 64 first on rank 0 and
    BLOCK 32 first elsewhere: each rank tuning it alone chooses its own (no GPU driver needed)."""
    current: list[int] = []

    def note(nargs):
        current[:] = [int(nargs["BLOCK"])]

    def bench(fn, quantiles=None):
        fn()
        best = 64 if dist.get_rank() == 0 else 32
        return [1.0 if current and current[0] == best else 2.0] * 3

    return triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=note) for b in (32, 64)], key=["n"],
                           do_bench=bench)(add_one)


def launch_one(kernel, x):
    out = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    return out


def stock_warnings(call, kernel, sizes=(200, 300)) -> None:
    """Call ``call`` on one tensor of each size (a key each) with every warning recorded; emit the warnings that
    name the stock kernel, whether each output is right, and the kernel's choice."""
    import warnings

    oks = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for n in sizes:
            x = torch.arange(n, dtype=torch.float32)
            oks.append(bool(torch.equal(call(x), x + 1)))
    said = [str(w.message) for w in seen if "add_one" in str(w.message)]
    emit(ok=all(oks), said=said, best=int(kernel.best_config.kwargs["BLOCK"]))


def averaged(launch):
    """An ``autotune`` function of ``launch(x)``'s output averaged over the ranks, its 2 configs the all-reduce in
    1 or 2 chunks."""
    @tdt.autotune([{"chunks": c} for c in (1, 2)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2)
    def f(x, *, chunks):
        out = launch(x)
        for part in out.chunk(chunks):
            dist.all_reduce(part)
            part /= dist.get_world_size()
        return out

    return f


@case
def stock_kernel_tunes_itself_inside_autotune():
    """An ``autotune`` function launches a stock ``@triton.autotune`` kernel: each rank tunes it alone (here they
    choose apart), which is said once per function and kernel, on every rank."""
    tdt.init_distributed()
    kernel = rank_bench_kernel()
    stock_warnings(averaged(lambda x: launch_one(kernel, x)), kernel)


@case
def stock_kernel_tunes_itself_in_a_decided_call():
    """The stock kernel first launched in a decided call: the function's one key is tuned by a call that launches
    nothing, then a call of the same key launches the kernel, which tunes itself on each rank alone."""
    tdt.init_distributed()
    kernel = rank_bench_kernel()

    @tdt.autotune([{"chunks": c} for c in (1, 2)], key_fn=lambda x, launch: 0, n_warmup=1, n_repeat=2)
    def f(x, launch, *, chunks):
        out = launch_one(kernel, x) if launch else x + 1
        for part in out.chunk(chunks):
            dist.all_reduce(part)
            part /= dist.get_world_size()
        return out

    f(torch.arange(100, dtype=torch.float32), False)
    stock_warnings(lambda x: f(x, True), kernel)


@case
def stock_kernel_in_a_nested_contextual_function():
    """The same kernel launched from a ``contextual_autotune`` function that the ``autotune`` function calls: the
    group tunes it (one choice on every rank), and nothing is said."""
    tdt.init_distributed()
    kernel = rank_bench_kernel()

    @tdt.contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x):
        return launch_one(kernel, x)

    stock_warnings(averaged(layer), kernel)


@case
def autotune_function_inside_a_contextual_function():
    """An ``autotune`` function called inside a ``contextual_autotune`` function launches the kernel: the
    contextual function's handler still receives the launch (the group tunes the kernel), and nothing is said."""
    tdt.init_distributed()
    kernel = rank_bench_kernel()
    f = averaged(lambda x: launch_one(kernel, x))

    @tdt.contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def outer(x):
        return f(x)

    stock_warnings(outer, kernel)


@case
def stock_kernel_warning_uncaught():
    """As ``stock_kernel_tunes_itself_inside_autotune``, with Python's default warning filters: what reaches the
    rank's stderr."""
    tdt.init_distributed()
    kernel = rank_bench_kernel()
    x = torch.arange(200, dtype=torch.float32)
    emit(ok=bool(torch.equal(averaged(lambda t: launch_one(kernel, t))(x), x + 1)))


@case
def tensor_in_a_kernels_key():
    """A stock kernel keyed by a tensor argument (``key=["x", "n"]``), tuned by a ``contextual_autotune`` function
    over two calls with the same values on every rank."""
    import warnings

    tdt.init_distributed()

    keyed_by_x = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["x", "n"])(add_one)

    @tdt.contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x):
        return launch_one(keyed_by_x, x)

    oks = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            x = torch.arange(100, dtype=torch.float32)
            oks.append(bool(torch.equal(layer(x), x + 1)))
    emit(ok=all(oks), said=[str(w.message) for w in seen if "tensor among its key" in str(w.message)])


@case
def untuned_with_a_rank_dependent_prune():
    """``autotune=False`` (Triton-distributed's: config 0, unpruned) with a prune_fn that drops config 0 on rank 0
    alone: each rank runs the first config its own prune_fn keeps, which is said on the rank that pruned."""
    import warnings

    tdt.init_distributed()
    rank, ran = dist.get_rank(), []

    @tdt.autotune([{"chunks": c} for c in (1, 2, 4)], key_fn=lambda x: x.numel(),
                  prune_fn=lambda config, x: not (rank == 0 and config["chunks"] == 1))
    def f(x, *, chunks):
        ran.append(chunks)
        return x * chunks

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            f(torch.ones(8), autotune=False)
    emit(ran=ran, said=[str(w.message) for w in seen if "autotune=False" in str(w.message)])


def weights_missing(x, *, c):
    raise KeyError("missing weight 'w1'")


@case
def every_config_raises_the_users_error():
    """Every config of an ``autotune`` function raises the user's own ``KeyError`` on every rank."""
    tdt.init_distributed()
    f = tdt.autotune([{"c": c} for c in (1, 2)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2)(weights_missing)
    try:
        f(torch.ones(4))
    except tdt.AllConfigsFailedError as exc:
        emit(error=type(exc).__name__, cause=type(exc.__cause__).__name__, cause_text=str(exc.__cause__))


@case
def decided_calls_with_the_tuner_keywords_set_to_their_defaults():
    """Triton-distributed's callers pass ``autotune=args.autotune`` (True), ``autotune_pg=None`` (or their
    group) and ``autotune_verbose=...`` on every call. A decided call with them: the Python calls it makes, against
    the same call without them; a flag that is no bool is still the caller's mistake on a decided key."""
    tdt.init_distributed()
    group = dist.new_group([0, 1])

    @tdt.autotune([{"chunks": c} for c in (1, 2)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2)
    def f(x, *, chunks):
        out = x.clone()
        for part in out.chunk(chunks):
            dist.all_reduce(part)
        return out

    x = torch.ones(8)
    tuned = f(x, autotune=True, autotune_pg=None, autotune_verbose=False)  # undecided: tuned (on every rank)
    f(x, autotune_pg=group, autotune=True)  # the group's own key: tuned too
    forms = {"none": {}, "autotune": {"autotune": True}, "pg_none": {"autotune_pg": None},
             "verbose": {"autotune_verbose": True}, "all": {"autotune": True, "autotune_pg": None,
                                                            "autotune_verbose": False,
                                                            "autotune_allow_arg_overwrite": False,
                                                            "autotune_replicas": None},
             "group": {"autotune_pg": group}, "group_autotune": {"autotune_pg": group, "autotune": True}}
    for kwargs in forms.values():  # each form once, so that a first sight of a keyword costs nothing below
        f(x, **kwargs)
    calls = {name: python_calls(lambda kwargs=kwargs: f(x, **kwargs)) for name, kwargs in forms.items()}
    # a DP x TP layer's call: one-rank TP groups (its all-reduce on its own), the two ranks replicas of each other
    tp = [dist.new_group([r]) for r in range(2)][dist.get_rank()]
    layout = {"autotune_pg": tp, "autotune_replicas": dist.group.WORLD}

    @tdt.autotune([{"chunks": c} for c in (1, 2)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2)
    def g(x, *, chunks):
        out = x.clone()
        for part in out.chunk(chunks):
            dist.all_reduce(part, group=tp)
        return out

    g(x, **layout)  # tuned across the replicas
    for form in ("layout", "layout_autotune"):
        kwargs = layout if form == "layout" else {**layout, "autotune": True, "autotune_verbose": False}
        g(x, **kwargs)
        calls[form] = python_calls(lambda kwargs=kwargs: g(x, **kwargs))
    try:
        f(x, autotune=1)
        mistake = None
    except tdt.BadInputError as exc:
        mistake = str(exc)
    emit(ok=bool(torch.equal(tuned, x * dist.get_world_size())), decided=len(f.tuner.decided),
         decided_in=len(f.tuner.decided_in), calls=calls, mistake=mistake)


@case
def prune_fn_reading_the_config_as_the_triton_config():
    """A prune_fn as Triton-distributed's documentation writes it for ``[{"gemm_config": c} for c in configs]``:
    it reads ``config["BLOCK_SIZE_M"]``, where ``config`` is the entry (its one key ``gemm_config``). Tuned, then
    with ``autotune=False``; and a prune_fn's own KeyError (a name no value of the entry holds) as it is."""
    tdt.init_distributed()
    space = [{"gemm_config": triton.Config({"BLOCK_SIZE_M": m, "BLOCK_SIZE_K": 32}, num_warps=4)} for m in (64, 128)]

    def doc_prune(config, a, b, *args, **kwargs):
        return config["BLOCK_SIZE_M"] * config["BLOCK_SIZE_K"] * a.element_size() < 48 * 1024

    def own_error(config, a, b):
        return {"fp16": 1}[str(a.dtype)] > 0

    said = {}
    for name, prune, kwargs in (("tuned", doc_prune, {}), ("untuned", doc_prune, {"autotune": False}),
                                ("own", own_error, {"autotune": False})):
        f = tdt.autotune(space, key_fn=lambda a, b: (tdt.to_hashable(a), tdt.to_hashable(b)), prune_fn=prune,
                         n_warmup=1, n_repeat=2)(lambda a, b, *, gemm_config: a @ b)
        try:
            f(torch.ones(4, 4), torch.ones(4, 4), **kwargs)
            said[name] = "ran"
        except Exception as exc:
            said[name] = f"{type(exc).__name__}: {exc}"
    emit(said=said)


@case
def own_benchmarking_in_context():
    """Two stock kernels ported with their own benchmarking, ``do_bench=`` and the deprecated ``warmup=``/``rep=``,
    tuned by a ``contextual_autotune`` function: neither is called (the tuner times the launches itself); what the
    rank says of it."""
    import warnings

    tdt.init_distributed()
    calls = []

    def bench(fn, quantiles=None):
        calls.append(1)
        fn()
        return [1.0, 1.0, 1.0]

    with warnings.catch_warnings():  # (configs of their own: wrappers alike in configs and key are one track)
        warnings.simplefilter("ignore")  # Triton's own deprecation warning for warmup=/rep=
        own = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"],
                              do_bench=bench)(add_one)
        deprecated = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"], warmup=10,
                                     rep=100)(add_one)

    @tdt.contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x):
        return launch_one(deprecated, launch_one(own, x))

    x = torch.arange(100, dtype=torch.float32)
    emit(ok=bool(torch.equal(layer(x), x + 2)), bench_calls=len(calls))


if __name__ == "__main__":
    main()
