"""Triton's own autotuner tests (``python/test/unit/runtime/test_autotuner.py`` in triton-lang/triton), ported to
run through ``contextual_autotune``: each case defines its kernel with ``@triton.autotune`` + ``@triton.jit`` as
Triton's test does, launches it inside a function decorated with ``contextual_autotune(is_dist=True)`` and prints
what Triton's assertions need; tests/test_triton_autotuner.py asserts them, on 1 and on 2 ranks.

Usage: python triton_autotuner_cases.py CASE [CASE ...] (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, or under
torchrun). Each rank prints ``RESULT {json}`` lines.

Each variant of a parametrized Triton test is a case of its own, with kernels of its own (made by the test's
kernel factory) and a problem size of its own: the kernels of two variants have one source, so with one size the
later variant would take the earlier one's decision (this process's, or the shared disk cache's) instead of
tuning with its own way of passing arguments.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.autotuner import contextual_autotune  # noqa: E402

#: one warm-up step and one timed round per config: the contextual counterpart of Triton's test
#: ``do_bench(..., warmup=1, rep=1)``
STEPS = {"n_warmup": 1, "n_repeat": 1}


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def counting_do_bench(calls: list):
    """A ``do_bench`` for ``triton.autotune`` that records each call (the contextual tuner times launches in their
    context and is not expected to call it); it runs the kernel once and reports a flat time."""

    def do_bench(kernel_call, quantiles=None, **kwargs):
        calls.append(1)
        kernel_call()
        return [1.0, 1.0, 1.0] if quantiles else 1.0

    return do_bench


def decisions(tuned) -> list[dict]:
    """The group's decisions of one contextual tuned function: key, chosen config index, how it was decided
    (``tuned``, ``disk cache``, ``only config``), its time and the state of each config, by key text."""
    rows = [{"key": tid[1], "index": d["index"], "how": d["how"], "time_ms": d["time_ms"],
             "states": [r["state"] for r in d["table"]]} for tid, d in tuned.tuner.decisions.items()]
    return sorted(rows, key=lambda r: r["key"])


def failure(exc: Exception) -> dict:
    return {"error": type(exc).__name__, "message": str(exc), "triton_error": isinstance(exc, triton.TritonError),
            "ours": isinstance(exc, tdt.AutotuneError)}


def block_grid(n: int, name: str = "BLOCK_SIZE"):
    return lambda meta: (triton.cdiv(n, meta[name]),)


# -- test_kwargs, test_dtype_cache_results, test_no_do_bench ------------------------------------------------------


@case
def kwargs():
    """test_kwargs (without CUDA graphs): one launch by position, one by keyword in another order with another key;
    two entries in the kernel's cache."""
    tdt.init_distributed()
    M, N = 1024, 16
    benched: list = []
    configs = [triton.Config(kwargs={"BLOCK_SIZE_M": 32}), triton.Config(kwargs={"BLOCK_SIZE_M": 128})]

    @triton.autotune(configs=configs, key=["M"], do_bench=counting_do_bench(benched))
    @triton.jit
    def _kernel(dst, src, stride_m: tl.constexpr, M, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_M: tl.constexpr):
        rows = tl.program_id(0) * stride_m + tl.arange(0, BLOCK_SIZE_M)
        cols = tl.arange(0, BLOCK_SIZE_N)
        where = rows[:, None] * BLOCK_SIZE_N + cols[None, :]
        tl.store(dst + where, tl.load(src + where))

    @contextual_autotune(is_dist=True, **STEPS)
    def layer(dst, src):
        grid = block_grid(N, "BLOCK_SIZE_M")
        _kernel[grid](dst, src, N, M, N)
        _kernel[grid](dst=dst, src=src, M=M // 2, stride_m=N, BLOCK_SIZE_N=N)  # keywords, in another order

    src = torch.randn(M * N)
    dst = torch.zeros(M * N)
    layer(dst, src)
    emit(cache_len=len(_kernel.cache), cache_keys=sorted(repr(k) for k in _kernel.cache),
         copied=bool(torch.equal(dst[:128 * N], src[:128 * N]) or torch.equal(dst[:32 * N], src[:32 * N])),
         decisions=decisions(layer), benched=len(benched))


@case
def dtype_cache_results():
    """test_dtype_cache_results: a tl.dtype in the key, ``cache_results=True``; one entry in the kernel's cache."""
    tdt.init_distributed()
    M, N = 1024, 16
    configs = [triton.Config(kwargs={"BLOCK_SIZE_M": 32}), triton.Config(kwargs={"BLOCK_SIZE_M": 128})]

    @triton.autotune(configs=configs, key=["DTYPE"], cache_results=True)
    @triton.jit
    def _kernel(dst, src, stride_m: tl.constexpr, DTYPE: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                BLOCK_SIZE_M: tl.constexpr):
        rows = tl.program_id(0) * stride_m + tl.arange(0, BLOCK_SIZE_M)
        cols = tl.arange(0, BLOCK_SIZE_N)
        where = rows[:, None] * BLOCK_SIZE_N + cols[None, :]
        tl.store(dst + where, tl.load(src + where).to(DTYPE))

    @contextual_autotune(is_dist=True, **STEPS)
    def layer(dst, src):
        _kernel[block_grid(N, "BLOCK_SIZE_M")](dst, src, N, tl.float32, N)

    src = torch.randn(M * N)
    dst = torch.zeros(M * N)
    layer(dst, src)
    emit(cache_len=len(_kernel.cache), decisions=decisions(layer),
         copied=bool(torch.equal(dst[:32 * N], src[:32 * N])))


@case
def no_do_bench():
    """test_no_do_bench: no ``do_bench`` given; one entry in the kernel's cache."""
    tdt.init_distributed()
    M, N = 1024, 16
    configs = [triton.Config(kwargs={"BLOCK_SIZE_M": 32}), triton.Config(kwargs={"BLOCK_SIZE_M": 128})]

    @triton.autotune(configs=configs, key=["M"])
    @triton.jit
    def _kernel(dst, src, stride_m: tl.constexpr, M, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_M: tl.constexpr):
        rows = tl.program_id(0) * stride_m + tl.arange(0, BLOCK_SIZE_M)
        cols = tl.arange(0, BLOCK_SIZE_N)
        where = rows[:, None] * BLOCK_SIZE_N + cols[None, :]
        tl.store(dst + where, tl.load(src + where))

    @contextual_autotune(is_dist=True, **STEPS)
    def layer(dst, src):
        _kernel[block_grid(N, "BLOCK_SIZE_M")](dst, src, N, M, N)

    src = torch.randn(M * N)
    dst = torch.zeros(M * N)
    layer(dst, src)
    emit(cache_len=len(_kernel.cache), decisions=decisions(layer),
         copied=bool(torch.equal(dst[:32 * N], src[:32 * N])))


# -- test_restore, test_reset_to_zero, test_restore_with_none --------------------------------------------------------


def restore_kernel(benched: list):
    """test_restore's kernel: adds one to ``src`` in place; ``restore_value=['src']``."""
    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}), triton.Config(kwargs={"BLOCK_SIZE": 128})]

    @triton.autotune(configs=configs, key=["N"], restore_value=["src"], do_bench=counting_do_bench(benched))
    @triton.jit
    def _kernel(src, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < N
        tl.store(src + offsets, tl.load(src + offsets, mask=mask) + 1, mask=mask)

    return _kernel


def run_restore(pass_kwargs: bool, N: int) -> None:
    tdt.init_distributed()
    benched: list = []
    kernel = restore_kernel(benched)

    @contextual_autotune(is_dist=True, **STEPS)
    def layer(src):
        if pass_kwargs:
            kernel[block_grid(N)](src=src, N=N)
        else:
            kernel[block_grid(N)](src, N)

    src = torch.zeros(N)
    layer(src)
    emit(ones=bool(torch.equal(src, torch.ones_like(src))), distinct=sorted(set(src.tolist())),
         decisions=decisions(layer), runs=layer.tuner.last_runs)


@case
def restore_positional():
    """test_restore[pass_kwargs_to_kernel=False]: src is 1 after the call, however many runs tuned it."""
    run_restore(False, 1024)


@case
def restore_kwargs():
    """test_restore[pass_kwargs_to_kernel=True]."""
    run_restore(True, 1000)


def none_kernel(option: str):
    """The kernel of test_reset_to_zero and test_restore_with_none: writes 1 into ``src`` when given, else into
    ``dst``; ``src`` is listed in ``reset_to_zero`` or ``restore_value`` (``option``). A decision is keyed by the
    kernel's source, configs and key, not by these lists (as Triton's ``cache_results`` key), so the cases of the
    two tests use sizes of their own: each tunes its own kernel."""
    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}), triton.Config(kwargs={"BLOCK_SIZE": 128})]

    @triton.autotune(configs=configs, key=["N"], **{option: ["src"]})
    @triton.jit
    def _kernel(src, dst, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < N
        if src is not None:
            tl.store(src + offsets, tl.full([BLOCK_SIZE], 1, dtype=src.dtype.element_ty), mask=mask)
        else:
            tl.store(dst + offsets, tl.full([BLOCK_SIZE], 1, dtype=dst.dtype.element_ty), mask=mask)

    return _kernel


def stock_skips_none(kernel) -> bool:
    """Whether the installed Triton's own default hooks of ``kernel`` skip a None ``src`` (the newest Triton does;
    Triton 3.6 calls ``.zero_()`` / ``.clone()`` on it and raises AttributeError)."""
    nargs = {"src": None, "dst": torch.zeros(4), "N": 4, "BLOCK_SIZE": 32}
    try:
        kernel.pre_hook(nargs)
        kernel.post_hook(nargs, exception=None)
    except AttributeError:
        return False
    return True


def run_none_kernel(option: str, pass_kwargs: bool, src_is_none: bool, N: int) -> None:
    """dst starts at 2 (src is dst, or None); afterwards dst must be 1. A failed call is emitted as its error, with
    what the installed Triton's own hooks do with a None ``src`` (``stock_skips_none``)."""
    tdt.init_distributed()
    kernel = none_kernel(option)
    stock = stock_skips_none(none_kernel(option))

    @contextual_autotune(is_dist=True, **STEPS)
    def layer(src, dst):
        if pass_kwargs:
            kernel[block_grid(N)](src=src, dst=dst, N=N)
        else:
            kernel[block_grid(N)](src, dst, N)

    dst = torch.full((N,), 2.0)
    src = None if src_is_none else dst
    try:
        layer(src, dst)
    except Exception as exc:
        emit(**failure(exc), distinct=sorted(set(dst.tolist())), stock_skips_none=stock,
             version=triton.__version__)
        return
    emit(error=None, ones=bool(torch.equal(dst, torch.ones_like(dst))), distinct=sorted(set(dst.tolist())),
         decisions=decisions(layer), stock_skips_none=stock, version=triton.__version__)


@case
def reset_to_zero_positional():
    """test_reset_to_zero[src_is_none=False, pass_kwargs_to_kernel=False]."""
    run_none_kernel("reset_to_zero", False, False, 1024)


@case
def reset_to_zero_kwargs():
    """test_reset_to_zero[src_is_none=False, pass_kwargs_to_kernel=True]."""
    run_none_kernel("reset_to_zero", True, False, 1000)


@case
def reset_to_zero_none_positional():
    """test_reset_to_zero[src_is_none=True, pass_kwargs_to_kernel=False]."""
    run_none_kernel("reset_to_zero", False, True, 1024)


@case
def reset_to_zero_none_kwargs():
    """test_reset_to_zero[src_is_none=True, pass_kwargs_to_kernel=True]."""
    run_none_kernel("reset_to_zero", True, True, 1000)


@case
def restore_with_none_positional():
    """test_restore_with_none[pass_kwargs_to_kernel=False]."""
    run_none_kernel("restore_value", False, True, 768)


@case
def restore_with_none_kwargs():
    """test_restore_with_none[pass_kwargs_to_kernel=True]."""
    run_none_kernel("restore_value", True, True, 700)


# -- test_hooks ----------------------------------------------------------------------------------------------------


@case
def hooks():
    """test_hooks: the autotuner's pre_hook and post_hook are called the same number of times (balanced around
    each benchmarking launch); off CUDA no config raises, so the post_hook never sees an exception."""
    tdt.init_distributed()
    N = 4096
    seen = {"counter": 0, "pre": 0, "post": 0, "resets": 0, "unbalanced": 0, "exceptions": []}

    def _pre_hook(*args, **kwargs):
        seen["counter"] += 1
        seen["pre"] += 1
        if kwargs.get("reset_only"):
            seen["resets"] += 1

    def _post_hook(*args, exception):
        seen["counter"] -= 1
        seen["post"] += 1
        if exception is not None:
            seen["exceptions"].append(repr(exception))
        if seen["counter"] != 0:  # Triton's test asserts this in the hook; recorded here, asserted by the test
            seen["unbalanced"] += 1

    configs = [triton.Config(kwargs={"BLOCK_SIZE": 4096}), triton.Config(kwargs={"BLOCK_SIZE": 32})]

    @triton.autotune(configs=configs, key=["N"], pre_hook=_pre_hook, post_hook=_post_hook)
    @triton.heuristics({"N_STAGES": lambda nargs: 64 if nargs["N"] == 4096 else 4})
    @triton.jit
    def _kernel(src, N, N_STAGES: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        offsets = tl.arange(0, BLOCK_SIZE)
        for _ in tl.range(tl.cdiv(N, BLOCK_SIZE), num_stages=N_STAGES):
            mask = offsets < N
            tl.store(src + offsets, tl.load(src + offsets, mask=mask), mask=mask)
            offsets += BLOCK_SIZE

    @contextual_autotune(is_dist=True, **STEPS)
    def layer(src):
        _kernel[(1,)](src, N)

    src = torch.zeros(N)
    layer(src)
    emit(**seen, decisions=decisions(layer), zeros=bool(torch.equal(src, torch.zeros_like(src))))


# -- pruning ---------------------------------------------------------------------------------------------------------


def copy_kernel(configs, **autotune_kwargs):
    """The copy kernel of Triton's pruning tests (``dst, src, N, BLOCK_SIZE``), autotuned with ``configs``."""

    @triton.autotune(configs=configs, key=["N"], **autotune_kwargs)
    @triton.jit
    def _kernel(dst, src, N, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < N
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)

    return _kernel


def run_copy(kernel, N: int, name: str = "BLOCK_SIZE"):
    """Copy ``src`` to ``dst`` through ``kernel`` in a contextual tuned function; returns (the function, whether
    dst equals src)."""

    @contextual_autotune(is_dist=True, **STEPS)
    def layer(dst, src):
        kernel[block_grid(N, name)](dst, src, N=N)

    src = torch.randn(N)
    dst = torch.empty(N)
    layer(dst, src)
    return layer, bool(torch.equal(src, dst))


def run_prune_configs(with_perf_model: bool, N: int) -> None:
    tdt.init_distributed()
    records: dict = {}

    def early_config_prune(configs, named_args, **kwargs):
        records["run_early_config_prune"] = True
        if "N" in kwargs and kwargs["N"] == N:
            records["capture_kwargs"] = True
        if "dst" in named_args and "src" in named_args and len(named_args) == 2:
            records["capture_named_args"] = True
        return [configs[0]]

    def perf_model(*args, **kwargs):
        records["run_perf_model"] = True
        return kwargs["BLOCK_SIZE"]

    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}), triton.Config(kwargs={"BLOCK_SIZE": 128})]
    prune = {"perf_model": perf_model, "top_k": 1} if with_perf_model else {"early_config_prune": early_config_prune}
    kernel = copy_kernel(configs, prune_configs_by=prune)
    layer, copied = run_copy(kernel, N)
    emit(records=sorted(records), copied=copied, best=kernel.best_config.kwargs, decisions=decisions(layer))


@case
def prune_configs_early():
    """test_prune_configs[with_perf_model=False]: early_config_prune sees the launch's keywords and the positional
    arguments by name."""
    run_prune_configs(False, 1024)


@case
def prune_configs_perf_model():
    """test_prune_configs[with_perf_model=True]: only the perf model runs."""
    run_prune_configs(True, 1000)


@case
def prune_configs_fractional_top_k_keeps_one():
    """test_prune_configs_fractional_top_k_keeps_one: top_k=0.3 of 2 configs rounds down to 0; one is kept."""
    tdt.init_distributed()

    def perf_model(*args, **kwargs):
        return kwargs["BLOCK_SIZE"]

    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}), triton.Config(kwargs={"BLOCK_SIZE": 128})]
    kernel = copy_kernel(configs, prune_configs_by={"perf_model": perf_model, "top_k": 0.3})
    try:
        layer, copied = run_copy(kernel, 1024)
    except Exception as exc:
        emit(**failure(exc))
        return
    emit(error=None, copied=copied, best=kernel.best_config.kwargs, decisions=decisions(layer))


@case
def prune_configs_fractional_top_k_after_early_prune():
    """test_prune_configs_fractional_top_k_after_early_prune, on a real kernel instead of Triton's fake one:
    10 configs, early_config_prune keeps 6, the perf model estimates those 6, top_k=0.5 keeps half of them (3).
    Triton's test counts the configs its do_bench ran; here the configs launched (each config's pre_hook)."""
    tdt.init_distributed()
    N = 64
    estimated: list = []
    launched: list = []

    def early_config_prune(configs, named_args, **kwargs):
        return configs[:6]

    def perf_model(*args, **kwargs):
        estimated.append(kwargs["VARIANT"])
        return kwargs["VARIANT"]

    def note(nargs):
        launched.append(nargs["VARIANT"])

    configs = [triton.Config(kwargs={"VARIANT": v}, pre_hook=note) for v in range(1, 11)]

    @triton.autotune(configs=configs, key=["N"], prune_configs_by={"early_config_prune": early_config_prune,
                                                                   "perf_model": perf_model, "top_k": 0.5})
    @triton.jit
    def _kernel(dst, src, N, VARIANT: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < N
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask) * 1 + 0 * VARIANT, mask=mask)

    @contextual_autotune(is_dist=True, **STEPS)
    def layer(dst, src):
        _kernel[(1,)](dst, src, N, BLOCK_SIZE=N)

    src = torch.randn(N)
    dst = torch.empty(N)
    layer(dst, src)
    emit(estimated=estimated, launched=sorted(set(launched)), best=_kernel.best_config.kwargs["VARIANT"],
         copied=bool(torch.equal(src, dst)), decisions=decisions(layer))


def run_pruned_single_config(prune_kind: str, N: int) -> None:
    """test_pruned_single_config_skips_benchmark: pruning keeps configs[1] alone; it is launched, nothing is
    benchmarked (do_bench never called, no timing recorded), no autotuning listener is called."""
    tdt.init_distributed()
    records: dict = {}
    captured: list = []
    launched: list = []

    def note(nargs):
        launched.append(nargs["BLOCK_SIZE"])

    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}, pre_hook=note),
               triton.Config(kwargs={"BLOCK_SIZE": 128}, pre_hook=note)]

    def do_not_bench(kernel_call, quantiles=None, **kwargs):
        records["run_do_bench"] = True
        raise AssertionError("autotune benchmark should be skipped for a single pruned config")

    if prune_kind == "early_config_prune":

        def early_config_prune(configs, named_args, **kwargs):
            records["run_early_config_prune"] = True
            return [configs[1]]

        prune = {"early_config_prune": early_config_prune}
    else:

        def perf_model(*args, **kwargs):
            records["run_perf_model"] = True
            return 0 if kwargs["BLOCK_SIZE"] == 128 else 1

        prune = {"perf_model": perf_model, "top_k": 1}

    knobs = triton.knobs.autotuning
    saved = {name: getattr(knobs, name) for name in ("print", "listener") if hasattr(knobs, name)}
    knobs.print = True
    if "listener" in saved:  # the newest Triton's knob; Triton 3.6 has none
        knobs.listener = lambda **kw: captured.append(sorted(kw))
    try:
        kernel = copy_kernel(configs, prune_configs_by=prune, do_bench=do_not_bench)
        layer, copied = run_copy(kernel, N)
    finally:
        for name, value in saved.items():
            setattr(knobs, name, value)
    emit(records=sorted(records), captured=captured, has_listener="listener" in saved, launched=launched,
         best_is_configs_1=kernel.best_config is configs[1], best=kernel.best_config.kwargs, copied=copied,
         decisions=decisions(layer), runs=layer.tuner.last_runs)


@case
def pruned_single_config_early_config_prune():
    """test_pruned_single_config_skips_benchmark[early_config_prune]."""
    run_pruned_single_config("early_config_prune", 1024)


@case
def pruned_single_config_perf_model():
    """test_pruned_single_config_skips_benchmark[perf_model]."""
    run_pruned_single_config("perf_model", 1000)


@case
def prune_all_configs():
    """test_prune_all_configs: early_config_prune keeps nothing: Triton's error, with Triton's text."""
    tdt.init_distributed()

    def early_config_prune(configs, named_args, **kwargs):
        return []

    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}), triton.Config(kwargs={"BLOCK_SIZE": 128})]
    kernel = copy_kernel(configs, prune_configs_by={"early_config_prune": early_config_prune})
    try:
        run_copy(kernel, 1024)
    except Exception as exc:
        from triton.runtime.errors import AutotunerError

        emit(**failure(exc), autotuner_error=isinstance(exc, AutotunerError))
        return
    emit(error=None)


@case
def group_still_works():
    """After every case: one more contextual tuning on the group (the failed calls left it usable)."""
    tdt.init_distributed()
    configs = [triton.Config(kwargs={"BLOCK_SIZE": 32}), triton.Config(kwargs={"BLOCK_SIZE": 128})]
    kernel = copy_kernel(configs)
    layer, copied = run_copy(kernel, 512)
    emit(copied=copied, decisions=decisions(layer))


if __name__ == "__main__":
    main()
