"""Scenarios for Triton's and Triton-distributed's semantics kept to the letter (issue 29): pruning before the
cache, Triton's error text, a bare ``contextual_autotune`` in a multi-rank job, and calls inside CUDA-graph capture
or ``torch.compile``; run as real processes by tests/test_semantics.py.

Usage: python semantics_cases.py CASE [CASE ...] (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set for the multi-rank
cases). Each process prints ``RESULT {json}`` lines.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, contextual_virtual_clock, emit, main, python_calls, spend, virtual_clock  # noqa: E402

from triton_dist_tune.contextual import contextual_autotune  # noqa: E402

BLOCKS = (16, 32, 128)
#: seconds each config's pre_hook sleeps: BLOCK=128 is clearly the fastest. The layers time their launches on the
#: virtual clock, which each launch advances by these (as ms): two samples of a 1 ms launch against 40 ms, the
#: interpreter's run in each, a loaded machine's stall on one of them could swap
SLEEP = {16: 0.060, 32: 0.040, 128: 0.001}
#: BLOCK of every launch (config pre_hooks record them)
LAUNCHED: list[int] = []
#: calls of the perf model
ESTIMATED: list[int] = []


def _hook(block: int):
    def hook(nargs):
        LAUNCHED.append(block)
        time.sleep(SLEEP[block])
        spend(SLEEP[block] * 1e3)

    return hook


def perf_model(x, out, n, BLOCK, **kwargs):  # noqa: N803 - Triton's meta-parameter names
    """Estimates that keep BLOCK 16 and 32 with ``top_k=2``."""
    ESTIMATED.append(BLOCK)
    return float(BLOCK)


def make_kernel(pruning: str):
    """One ``triton.autotune`` wrapper of one jit body (the same name and source every time), with the given
    pruning: "none", "perf" (perf_model, top_k=2: BLOCK 16 and 32) or "env" (:func:`keep_from_env`)."""
    prune = {"none": None, "perf": {"perf_model": perf_model, "top_k": 2},
             "env": {"early_config_prune": keep_from_env}}[pruning]

    @triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=_hook(b)) for b in BLOCKS], key=["n"],
                     prune_configs_by=prune)
    @triton.jit
    def copy_kernel(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)

    return copy_kernel


def keep_from_env(configs, named_args, **kwargs):
    """An ``early_config_prune`` whose kept configs depend on more than the key: ``KEEP_BLOCKS`` (its source, and
    so its digest, is the same whatever it keeps)."""
    keep = {int(b) for b in os.environ["KEEP_BLOCKS"].split(",")}
    return [c for c in configs if c.kwargs["BLOCK"] in keep]


def layer_of(kernel, **options):
    contextual_virtual_clock()  # see SLEEP

    @contextual_autotune(n_warmup=0, n_repeat=2, **options)
    def layer(n: int) -> bool:
        x = torch.arange(n, dtype=torch.float32)
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        return bool(torch.equal(out, x + 1))

    return layer


def _calls(pruning: str, times: int = 2) -> dict:
    kernel = make_kernel(pruning)
    layer = layer_of(kernel)
    LAUNCHED.clear()
    ESTIMATED.clear()
    oks = [layer(64) for _ in range(times)]
    return {"pruning": pruning, "launched": sorted(set(LAUNCHED)), "estimated": sorted(set(ESTIMATED)),
            "ok": all(oks), "chosen": [BLOCKS[d["index"]] for d in layer.tuner.decisions.values()],
            "how": [d["how"] for d in layer.tuner.decisions.values()]}


@case
def prune_by_env():
    """A process whose pruning keeps the BLOCKs ``KEEP_BLOCKS`` names."""
    layer = layer_of(make_kernel("env"))
    LAUNCHED.clear()
    oks = [layer(64) for _ in range(2)]
    decisions = list(layer.tuner.decisions.values())
    emit(launched=sorted(set(LAUNCHED)), ok=all(oks), chosen=[BLOCKS[d["index"]] for d in decisions],
         how=[d["how"] for d in decisions])


@case
def prune_none():
    """A process that tunes without pruning (BLOCK 128 wins)."""
    emit(**_calls("none"))


@case
def prune_perf():
    """A process whose perf model keeps BLOCK 16 and 32."""
    emit(**_calls("perf"))


# -- the function-level autotune: pruning before the cache ---------------------------------------------------------

#: ms each variant sleeps: 3 is the fastest, then 2, then 1 (8x, 4x and 2x apart; the tests choose between 3 and 2
#: and between 2 and 1: at 5 against 20 ms, 15 ms apart, a loaded machine's stall in a sample is as large as the gap).
#: The function also spends them on the virtual clock (``_cases.virtual_clock``), which times its samples: 5
#: against 40 ms on the wall clock is the gap (35 ms) that a loaded machine closed in fault_cases.py
VARIANT_MS = (320.0, 160.0, 40.0, 5.0)


@case
def autotune_prune_by_env():
    """``autotune`` on every rank (RANK/WORLD_SIZE set) or alone, with a ``prune_fn`` that keeps the variants in
    ``KEEP_VARIANTS``: its source is the same in every process, what it keeps is not."""
    import torch.distributed as dist

    import triton_dist_tune as tdt

    tdt.init_distributed()
    keep = {int(v) for v in os.environ["KEEP_VARIANTS"].split(",")}
    launched: list[int] = []

    @tdt.autotune([{"variant": v} for v in range(len(VARIANT_MS))], key_fn=lambda x: x.numel(),
                  prune_fn=lambda config, x: config["variant"] in keep, name="prune_by_env")
    def f(x, *, variant):
        launched.append(variant)
        time.sleep(VARIANT_MS[variant] / 1e3)
        spend(VARIANT_MS[variant])
        dist.all_reduce(x.clone())
        return variant

    with virtual_clock():  # (see VARIANT_MS)
        chosen = f(torch.ones(4))
    ((_, decision),) = f.tuner.decisions.items() if f.tuner.decisions else ((None, None),)
    # a cache hit fills tuner.decisions too, marked cached (issue 34 defect 8)
    how = "tuned" if decision is not None and not decision.cached else "disk cache"
    emit(chosen=chosen, launched=sorted(set(launched)), how=how)


# -- a bare contextual_autotune in a multi-rank job ------------------------------------------------------------

#: seconds each config sleeps on each rank: alone, rank 0 would choose BLOCK 16 and rank 1 BLOCK 128; the group
#: (the MAX over ranks: 40, 20, 40 ms) chooses BLOCK 32
RANK_SLEEP = {0: {16: 0.001, 32: 0.020, 128: 0.040}, 1: {16: 0.040, 32: 0.020, 128: 0.001}}


def _rank_hook(block: int):
    def hook(nargs):
        time.sleep(RANK_SLEEP[int(os.environ.get("RANK", "0")) % 2][block])

    return hook


@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=_rank_hook(b)) for b in BLOCKS], key=["n"])
@triton.jit
def rank_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


def _rank_layer(layer) -> dict:
    x = torch.arange(64, dtype=torch.float32)
    out = layer(x)
    return {"chosen": [BLOCKS[d["index"]] for d in layer.tuner.decisions.values()],
            "group_size": layer.tuner.group().size, "ok": bool(torch.equal(out, x + 1))}


def bare_layer():
    """A function decorated with a bare ``@contextual_autotune`` that launches ``rank_kernel``."""

    @contextual_autotune
    def layer(x):
        out = torch.empty_like(x)
        rank_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out

    return layer


@case
def bare_in_job():
    """``@contextual_autotune`` with no arguments, in a 2-rank job whose ranks' timings differ."""
    import triton_dist_tune as tdt

    tdt.init_distributed()

    emit(**_rank_layer(bare_layer()))


@case
def bare_without_init():
    """A bare ``@contextual_autotune`` in a job whose launcher says WORLD_SIZE=2, torch.distributed not
    initialized: each rank tunes alone, with a warning naming ``is_dist``."""

    emit(**_rank_layer(bare_layer()))


@case
def alone_on_purpose():
    """``is_dist=False`` in a 2-rank job: each rank tunes alone, as asked."""
    import triton_dist_tune as tdt

    tdt.init_distributed()

    @contextual_autotune(is_dist=False, n_warmup=0, n_repeat=2)
    def layer(x):
        out = torch.empty_like(x)
        rank_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out

    emit(**_rank_layer(layer))


# -- the decided path's cost ----------------------------------------------------------------------------------


@case
def decided_cost():
    """One decided call of a stock ``triton.autotune`` kernel and of a ``contextual_autotune`` function launching
    one: the Python functions each enters, the result of the fast key against ``Autotuner.run``'s, and whether the
    interception stays installed between calls (no patch and restore per call)."""
    from triton.runtime.autotuner import Autotuner

    from triton_dist_tune.contextual import hot, intercept

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_decided_overhead import StandIn  # the benchmark's own stand-in: this count is its Python part

    configs = [triton.Config({"BLOCK": b}) for b in (128, 256, 512)]
    kernel = StandIn()
    stock, inner = (Autotuner(kernel, kernel.arg_names, configs, ["n"], None, None) for _ in range(2))
    x, y = torch.randn(64), torch.empty(64)
    n = x.numel()
    stock.cache[(n, str(x.dtype), str(y.dtype))] = configs[1]
    meta_grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731

    @contextual_autotune(is_dist=False, n_warmup=0, n_repeat=1)
    def contextual():
        inner[meta_grid](x, y, n)

    def stock_call():
        stock[meta_grid](x, y, n)

    contextual()  # tunes (alone)
    installed = [intercept.patched()]
    for _ in range(3):
        contextual()
        installed.append(intercept.patched())
    stock_call()
    keys = []
    for args, kwargs in [((x, y, n), {}), ((x, y), {"n": n}), ((x, y, n), {"BLOCK": 256})]:
        keys.append(intercept.tuning_key(inner, args, kwargs) == (n, "torch.float32", "torch.float32"))
    emit(stock=python_calls(stock_call) - 1, contextual=python_calls(contextual) - 1, installed=installed, keys=keys,
         runs=contextual.tuner.last_runs, plan=getattr(hot, "PLAN", None) in inner.__dict__)


# -- torch.compile --------------------------------------------------------------------------------------------

#: (n, scale) of every run of the function-level tuned function
SCALED: list[tuple[int, int]] = []


def _rank_log_lines(text: str) -> list[str]:
    folder = os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"]
    path = os.path.join(folder, "rank-0.log")
    return [line for line in open(path).read().splitlines() if text in line] if os.path.exists(path) else []


def _package_frames() -> list[str]:
    """The frames of this package that Dynamo has processed (``convert_frame.input_codes``; [] where that
    internal is missing)."""
    try:
        from torch._dynamo.convert_frame import input_codes
    except ImportError:
        return []
    codes = [ref() for ref in getattr(input_codes, "seen", [])]
    return sorted({f"{os.path.basename(c.co_filename)}:{c.co_name}" for c in codes
                   if c is not None and f"{os.sep}triton_dist_tune{os.sep}" in c.co_filename})


@case
def compiled_autotune():
    """A model under ``torch.compile`` calling an ``autotune`` function: shapes that make Dynamo recompile, then
    ``torch._dynamo.reset()`` and the same shapes again."""
    import torch._dynamo

    import triton_dist_tune as tdt

    @tdt.autotune([{"scale": 1}, {"scale": 2}], key_fn=lambda x: x.shape[0], n_warmup=0, n_repeat=2,
                  name="scaled")
    def scaled(x, *, scale):
        SCALED.append((x.shape[0], scale))
        return x * scale

    def model(x):
        return scaled(x + 1) - 1

    compiled = torch.compile(model, backend=os.environ.get("SEM_BACKEND", "eager"))
    ok = True
    for n in (8, 8, 16, 8, 16):
        ok = ok and bool(torch.equal(compiled(torch.ones(n)), model(torch.ones(n))))
    frames = _package_frames()
    torch._dynamo.reset()  # every compiled frame dropped: recompiled at the next call
    SCALED.clear()
    for n in (8, 16):
        ok = ok and bool(torch.equal(compiled(torch.ones(n)), model(torch.ones(n))))
    after_reset = sorted(set(SCALED))
    tuned = [line.split("key=", 1)[1].split("]", 1)[0] for line in _rank_log_lines(" tuning ")]
    from torch._dynamo.utils import counters

    emit(ok=ok, tuned=sorted(tuned), decided=sorted(scaled.tuner.decided), after_reset=after_reset,
         frames=counters["frames"]["total"], package_frames=sorted(set(frames + _package_frames())))


@case
def compiled_contextual():
    """A model under ``torch.compile`` calling a ``contextual_autotune`` function (a Triton kernel inside)."""
    import torch._dynamo

    kernel = make_kernel("none")

    @contextual_autotune(n_warmup=0, n_repeat=2)
    def layer(x):
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out

    def model(x):
        return layer(x * 1) - 1

    compiled = torch.compile(model, backend=os.environ.get("SEM_BACKEND", "eager"))
    ok, per_call = True, []
    for n in (64, 64, 32, 64, 32):
        LAUNCHED.clear()
        x = torch.arange(n, dtype=torch.float32)
        ok = ok and bool(torch.equal(compiled(x), x))
        per_call.append(sorted(set(LAUNCHED)))
    frames = _package_frames()
    torch._dynamo.reset()
    LAUNCHED.clear()
    ok = ok and bool(torch.equal(compiled(torch.arange(64, dtype=torch.float32)), torch.arange(64.0)))
    emit(ok=ok, per_call=per_call, after_reset=sorted(set(LAUNCHED)), package_frames=sorted(set(frames +
                                                                                                _package_frames())),
         decisions={k[1].split(",")[0].strip("("): d["how"] for k, d in layer.tuner.decisions.items()})


if __name__ == "__main__":
    main()
