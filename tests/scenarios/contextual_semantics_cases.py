"""Scenarios for ``contextual_autotune`` keeping Triton's autotuner semantics, bookkeeping, ranks that meet
different keys, and faults; run as real processes by tests/test_contextual_semantics.py.

Usage: python contextual_semantics_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set for multi-rank cases,
or under torchrun). Each rank prints ``RESULT {json}`` lines.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, contextual_virtual_clock, emit, main, spend  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune, intercept  # noqa: E402


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def sleeps(ms_by_rank: dict[int, list[float]], log: list | None = None):
    """Config pre_hooks that sleep ``ms_by_rank[rank % 2][index]`` (the tests' way of making one config the fastest),
    and spend it on the virtual clock, which the cases that time each config once use."""

    def make(index: int):
        def hook(nargs):
            if log is not None:
                log.append(index)
            time.sleep(ms_by_rank[rank() % 2][index] / 1e3)
            spend(ms_by_rank[rank() % 2][index])

        return hook

    return make


def grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


# -- Triton's semantics ------------------------------------------------------------------------------------------

# (a 50x gap, and three samples a config below: one load spike of a loaded 2-core CI machine on the fast
# config's one sample of n_repeat=1 once read it the slower, a flake of the suite's triton 3.6 pass)
INC_SLEEP = sleeps({0: [200, 4], 1: [200, 4]})


@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=INC_SLEEP(i)) for i, b in enumerate((16, 64))],
                 key=["n"], restore_value=["src"])
@triton.jit
def inc_kernel(src, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(src + offs, tl.load(src + offs, mask=mask) + 1, mask=mask)


ACC_SLEEP = sleeps({0: [4, 200], 1: [4, 200]})


# blocks of n=64 or more: one program each (the interpreter's cost per program is not set against the winner)
@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=ACC_SLEEP(i)) for i, b in enumerate((64, 128))],
                 key=["n"], reset_to_zero=["acc"])
@triton.jit
def acc_kernel(acc, x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(acc + offs, tl.load(x + offs, mask=mask), mask=mask)


HOOKS = {"pre": 0, "post": 0, "resets": 0, "exceptions": [], "unbalanced": 0}


def user_pre_hook(nargs, reset_only=False):
    if reset_only:  # Triton's call after tuning, before the launch with the chosen config (no post_hook follows)
        HOOKS["resets"] += 1
        return
    HOOKS["pre"] += 1


def user_post_hook(nargs, exception):
    HOOKS["post"] += 1
    if HOOKS["pre"] != HOOKS["post"]:
        HOOKS["unbalanced"] += 1
    if exception is not None:
        HOOKS["exceptions"].append(type(exception).__name__)


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], pre_hook=user_pre_hook,
                 post_hook=user_post_hook)
@triton.jit
def hooked_kernel(x, out, n, BAD: tl.constexpr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK != BAD, "BLOCK refused")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * 2, mask=mask)


@case
def semantics():
    """restore_value, reset_to_zero, the autotuner's hooks (one config fails on rank 1) and the listener, inside a
    contextual tuning on 2 ranks; afterwards everything equals one untuned call."""
    tdt.init_distributed()
    heard = []
    knobs = getattr(triton, "knobs", None)
    has_listener = knobs is not None and hasattr(knobs.autotuning, "listener")
    if has_listener:
        knobs.autotuning.listener = lambda **kw: heard.append(
            {"fn": kw["fn"].__name__, "key": list(kw["key"]), "best": kw["best_config"].kwargs["BLOCK"],
             "cache_hit": kw["cache_hit"], "timings": len(kw["configs_timings"])})
    n = 64
    bad = 32 if rank() == 1 else 0
    runs = []

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3)
    def layer(src, acc, x):
        runs.append(1)
        inc_kernel[grid(n)](src, n)
        acc_kernel[grid(n)](acc=acc, x=x, n=n)  # by keyword, as Triton's test_reset_to_zero also does
        out = torch.empty_like(x)
        hooked_kernel[grid(n)](x, out, n, bad)
        dist.all_reduce(out)
        return src.clone(), acc.clone(), out

    src, acc, x = torch.zeros(n), torch.zeros(n), torch.arange(n, dtype=torch.float32)
    s, a, out = layer(src, acc, x)
    first_runs = len(runs)
    # one untuned call from the same state gives the same values
    src2, acc2 = torch.zeros(n), torch.zeros(n)
    s2, a2, out2 = layer(src2, acc2, x)
    chosen = {k[0].split(".")[-1].split("@")[0]: d["index"] for k, d in layer.tuner.decisions.items()}
    emit(src=s.tolist() == [1.0] * n, src_arg=src.tolist() == [1.0] * n, acc=a.tolist() == x.tolist(),
         acc_arg=acc.tolist() == x.tolist(), out=out.tolist() == (x * 2 * 2).tolist(),
         same_as_untuned=bool(torch.equal(s, s2) and torch.equal(a, a2) and torch.equal(out, out2)
                              and torch.equal(src, src2) and torch.equal(acc, acc2)),
         runs=first_runs, second_runs=len(runs) - first_runs, chosen=chosen, hooks=HOOKS,
         has_listener=has_listener, heard=sorted(heard, key=lambda h: h["fn"]), version=triton.__version__,
         timings={repr(c.kwargs["BLOCK"]): t for c, t in hooked_kernel.configs_timings.items()})


def prune_nothing(configs, named_args, **kwargs):
    return [] if rank() == 1 else configs


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"],
                 prune_configs_by={"early_config_prune": prune_nothing})
@triton.jit
def pruned_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


@case
def listener_raises_on_one_rank():
    """Triton's autotuning listener (a process's own: telemetry, a log file) raises on rank 1 only, as the tuning
    publishes its decision. The function's collective follows the tuned launch: rank 1 must not leave the call
    while rank 0 waits in that collective. Two calls; each rank reports its result or error, its choice and the
    tuner's warnings."""
    import logging

    tdt.init_distributed()
    knobs = getattr(triton, "knobs", None)
    if knobs is None or not hasattr(knobs.autotuning, "listener"):
        emit(rank=rank(), skipped=f"Triton {triton.__version__} has no autotuning listener")
        return
    heard = []
    if rank() == 1:
        def listener(**kw):
            heard.append(kw["best_config"].kwargs["BLOCK"])
            raise RuntimeError("the listener's disk is full")

        knobs.autotuning.listener = listener
    said = []

    class Said(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    logging.getLogger("triton_dist_tune").addHandler(Said(logging.WARNING))
    n = 64

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3)
    def layer(src):
        inc_kernel[grid(n)](src, n)
        out = src.clone()
        dist.all_reduce(out)
        return out

    outs, errors = [], []
    for _ in range(2):
        try:
            outs.append(layer(torch.zeros(n)).tolist() == [2.0] * n)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    emit(rank=rank(), outs=outs, errors=errors, heard=heard,
         chosen={k[1]: v["index"] for k, v in layer.tuner.decisions.items()},
         listener_said=[m for m in said if "listener" in m])


@case
def prune_empty():
    """The kernel's pruning keeps nothing on rank 1: every rank raises Triton's own AutotunerError."""
    tdt.init_distributed()
    from triton.runtime.errors import AutotunerError

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1)
    def layer(x):
        out = torch.zeros_like(x)
        pruned_kernel[grid(x.numel())](x, out, x.numel())
        dist.all_reduce(out)
        return out

    try:
        layer(torch.ones(32))
        emit(error=None)
    except Exception as exc:
        emit(error=type(exc).__name__, triton_error=isinstance(exc, AutotunerError),
             ours=isinstance(exc, tdt.AutotuneError), message=str(exc), kernel=getattr(exc, "kernel", None),
             details=getattr(exc, "details", None))


def keep_all(configs, named_args, **kwargs):
    return configs


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"],
                 prune_configs_by={"early_config_prune": keep_all, "perf_model": None, "top_k": None})
@triton.jit
def no_top_k_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


@case
def prune_without_top_k():
    """An early pruning beside ``"perf_model": None, "top_k": None`` (a common spelling: stock Triton reads top_k
    only with a perf model): every rank tunes and runs the kernel."""
    tdt.init_distributed()

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1)
    def layer(x):
        out = torch.zeros_like(x)
        no_top_k_kernel[grid(x.numel())](x, out, x.numel())
        dist.all_reduce(out)
        return out

    try:
        emit(ok=bool(torch.equal(layer(torch.ones(32)), 2 * torch.ones(32))), error=None)
    except Exception as exc:
        emit(ok=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")


# -- caller-given meta-parameters --------------------------------------------------------------------------------

# alone: rank 0 picks 1, rank 1 picks 2; the group (200, 160, 40 ms): 2, by 4x
META_SLEEP = sleeps({0: [150, 4, 40], 1: [200, 160, 4]})


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w, pre_hook=META_SLEEP(i))
                          for i, (b, w) in enumerate(((16, 1), (32, 2), (64, 4)))], key=["n"])
@triton.jit
def meta_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


@case
def caller_meta():
    """Launches that pass BLOCK / num_warps themselves, and ``**config.all_kwargs()``: tuned over the configs."""
    tdt.init_distributed()
    default = triton.Config({"BLOCK": 128}, num_warps=8)

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x):
        a, b, c = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
        meta_kernel[grid(x.numel())](x, a, x.numel(), BLOCK=128, num_warps=8)
        meta_kernel[grid(x.numel())](x, b, x.numel(), **default.all_kwargs())
        meta_kernel[grid(x.numel())](x, c, x.numel(), 128)  # BLOCK by position
        dist.all_reduce(a)
        return a, b, c

    x = torch.arange(64, dtype=torch.float32)
    a, b, c = layer(x)
    again_a, _, _ = layer(x)
    decision = next(iter(layer.tuner.decisions.values()))
    emit(chosen=decision["index"], states=[r["state"] for r in decision["table"]],
         ok=a.tolist() == ((x + 1) * 2).tolist() and b.tolist() == (x + 1).tolist() and torch.equal(b, c),
         again_ok=bool(torch.equal(again_a, a)))


# -- bookkeeping -------------------------------------------------------------------------------------------------


@triton.jit
def copy_body(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


WIDE_LOG: list = []
NARROW_LOG: list = []
wide = triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=sleeps({0: [80, 80, 80, 4], 1: [80, 80, 80, 4]},
                                                                            WIDE_LOG)(i))
                                for i, b in enumerate((8, 16, 32, 64))], key=["n"])(copy_body)
narrow = triton.autotune(configs=[triton.Config({"BLOCK": b},
                                                pre_hook=sleeps({0: [4, 100], 1: [4, 100]}, NARROW_LOG)(i))
                                  for i, b in enumerate((128, 256))], key=["n"])(copy_body)


@case
def two_wrappers():
    """Two triton.autotune wrappers of one @triton.jit body: each is its own track, over its own configs. Each config
    is timed once, on the virtual clock (4 against 80 or 100 ms, one sample each: a load spike could swap them)."""
    contextual_virtual_clock()

    @contextual_autotune(n_warmup=0, n_repeat=1)
    def f(x):
        a, b = torch.empty_like(x), torch.empty_like(x)
        wide[grid(x.numel())](x, a, x.numel())
        narrow[grid(x.numel())](x, b, x.numel())
        return a, b

    x = torch.randn(64)
    a, b = f(x)
    chosen = sorted((k[0].split(".")[-1], d["index"], len(d["table"])) for k, d in f.tuner.decisions.items())
    emit(chosen=chosen, wide=sorted(set(WIDE_LOG)), narrow=sorted(set(NARROW_LOG)),
         ok=bool(torch.equal(a, x) and torch.equal(b, x)), wide_best=wide.cache[(64, "torch.float32",
                                                                                  "torch.float32")].kwargs,
         narrow_best=narrow.cache[(64, "torch.float32", "torch.float32")].kwargs)


@triton.jit
def factory_double(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * 2, mask=mask)


def factory_kernel(counts: dict[str, int]):
    """A kernel factory: a new ``triton.autotune`` wrapper of :func:`factory_double` at each call (the same kernel
    name, configs and key every time) whose hooks count into ``counts``: the wrapper's ``pre_hook`` (``pre``, and
    ``resets`` for Triton's ``reset_only=True`` call), its ``post_hook`` (``post``) and the configs' ``pre_hook``
    (``config``: one per launch of a chosen config, as Triton calls it)."""

    def pre(nargs, reset_only=False):
        counts["resets" if reset_only else "pre"] += 1

    def post(nargs, exception):
        counts["post"] += 1

    def config_hook(nargs):
        counts["config"] += 1

    return triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=config_hook) for b in (16, 32, 64)],
                           key=["n"], pre_hook=pre, post_hook=post)(factory_double)


@case
def kernel_factory():
    """One process: a contextual function tunes a factory's first wrapper; a second function launches a second
    wrapper of the same kernel name, configs and key, made after it (another object, its own cache empty)."""
    first_counts = {"pre": 0, "post": 0, "resets": 0, "config": 0}
    second_counts = dict(first_counts)
    first, second = factory_kernel(first_counts), factory_kernel(second_counts)

    def double(kernel, x):
        out = torch.empty_like(x)
        kernel[grid(x.numel())](x, out, x.numel())
        return out

    @contextual_autotune(n_warmup=0, n_repeat=1)
    def tuned(x):
        return double(first, x)

    @contextual_autotune(n_warmup=0, n_repeat=1)
    def again(x):
        return double(second, x)

    heard: list[str] = []  # Triton's listener (newest Triton): the keys it was called for
    knobs = getattr(triton, "knobs", None)
    if knobs is not None and hasattr(knobs.autotuning, "listener"):
        knobs.autotuning.listener = lambda **kw: heard.append(repr(kw["key"]))
    x = torch.arange(64, dtype=torch.float32)
    out_first = tuned(x)
    heard_first = len(heard)
    out_second = again(x)
    key = (64, "torch.float32", "torch.float32")
    emit(ok=bool(torch.equal(out_first, 2 * x) and torch.equal(out_second, 2 * x)), first=first_counts,
         second=second_counts, first_best=first.cache[key].kwargs,
         second_best=second.cache[key].kwargs if key in second.cache else None,
         tuned_decisions=len(tuned.tuner.decisions), again_decisions=len(again.tuner.decisions),
         again_runs=again.tuner.last_runs, same_track=intercept.track_id(first) == intercept.track_id(second),
         listened=[heard_first, len(heard)] if knobs is not None and hasattr(knobs.autotuning, "listener") else None)


@case
def max_runs():
    """A function whose key changes on every run: the bound ends the call with the best configs so far."""
    runs = []

    @contextual_autotune(n_warmup=0, n_repeat=1, max_runs=5)
    def f(x):
        runs.append(1)
        n = 16 + len(runs)  # a new key on every run (a growing KV cache)
        out = torch.zeros_like(x)
        meta_kernel[grid(n)](x, out, n)
        return out, n

    x = torch.arange(64, dtype=torch.float32)
    out, n = f(x)
    ok = out[:n].tolist() == (x[:n] + 1).tolist()
    emit(runs=len(runs), ok=ok, hows=sorted({d["how"] for d in f.tuner.decisions.values()}),
         decided=len(f.tuner.decisions))


# -- ranks that meet different keys ------------------------------------------------------------------------------


@case
def keys_differ():
    """Call 1: both ranks n=64. Call 2: rank 1 also launches n=32, rank 0 does not. Call 3: both launch n=32.
    Call 4: rank 1 alone launches n=48; call 5: again (the group tunes it from rank 1); call 6: rank 0 launches
    n=48 and uses the group's choice."""
    tdt.init_distributed()
    me = rank()
    seen: list = []
    plan = {1: [64], 2: [64, 32] if me == 1 else [64], 3: [64, 32], 4: [64, 48] if me == 1 else [64],
            5: [64, 48] if me == 1 else [64], 6: [64, 48]}

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1, sync_every=1)
    def layer(call):
        outs = []
        for n in plan[call]:
            x = torch.arange(n, dtype=torch.float32) + me
            out = torch.empty_like(x)
            meta_kernel[grid(n)](x, out, n)
            seen.append((call, n, meta_kernel.best_config.kwargs["BLOCK"]))
            outs.append(bool(torch.equal(out, x + 1)))
        total = torch.tensor([float(len(outs))])
        dist.all_reduce(total)
        return all(outs), float(total)

    per_call = []
    for call in range(1, 7):
        seen.clear()
        t0 = time.monotonic()
        ok, total = layer(call)
        per_call.append({"call": call, "ok": ok, "total": total, "seconds": time.monotonic() - t0,
                         "runs": layer.tuner.last_runs, "last": {str(n): b for c, n, b in seen}})
    decisions = {k[1].split(",")[0].strip("("): {"index": d["index"], "ranks": len(d["table"][0]["per_rank"] or [])}
                 for k, d in layer.tuner.decisions.items()}
    emit(calls=per_call, agreed=layer.tuner.agreed_calls, decisions=decisions,
         pending=sum(len(p) for p in layer.tuner.pending.values()))


def _no_resources_from(smallest_n: int):
    """A pre_hook standing for a config this device cannot run (out of resources) at ``n >= smallest_n``."""

    def hook(nargs):
        if nargs["n"] >= smallest_n:
            raise RuntimeError("out of resources: config 0")
    return hook


def _stand_in_layer(smallest_n: int):
    @triton.autotune(configs=[triton.Config({"BLOCK": 512}, pre_hook=_no_resources_from(smallest_n)),
                              triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["n"])
    @triton.jit
    def copy_kernel(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def layer(x):
        out = torch.empty_like(x)
        copy_kernel[grid(x.numel())](x, out, x.numel())
        dist.all_reduce(out)
        return out

    return layer


@case
def stand_in_for_a_new_key():
    """Config 0 cannot run at n >= SMALLEST (out of resources, a pre_hook says so). Call 1 tunes n=64; calls 2 and 3
    are hot and meet n=128, a key no rank has decided, run with a stand-in config until the group tunes it. With
    SMALLEST=0 config 0 failed in call 1's tuning already; with SMALLEST=100 it ran there, and fails first as the
    stand-in. Every call must return the right sum on every rank."""
    tdt.init_distributed()
    layer = _stand_in_layer(int(os.environ["SMALLEST"]))
    calls = []
    for n in (64, 128, 128):
        x = torch.arange(n, dtype=torch.float32)
        try:
            calls.append(bool(torch.equal(layer(x), 2 * x)))
        except Exception as exc:
            calls.append(f"{type(exc).__name__}: {str(exc)[:200]}")
    emit(rank=rank(), calls=calls)


@triton.jit
def add_one_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs, mask=offs < n) + 1, mask=offs < n)


def block_64_or_128(hook, **autotune_options):
    """A ``triton.autotune`` kernel adding 1 to ``x[:n]``, keyed by ``n``, of 2 configs: BLOCK 64 and 128, each with
    the pre-hook ``hook(i)`` (its index); a kernel of its own per call, as each scenario's decisions are its own."""
    return triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=hook(i)) for i, b in enumerate((64, 128))],
                           key=["n"], **autotune_options)(add_one_kernel)


def _rank_1_keeps_only_64(configs, nargs, **kwargs):
    return configs[:1] if rank() == 1 else configs


@case
def pruned_choice_met_later():
    """The group tunes n=64 in call 1 from rank 0 alone (rank 1 does not launch it) and chooses BLOCK=128 (the
    faster); rank 1's early pruning keeps only BLOCK=64. In hot calls 2-4 rank 1 meets the key: it must run BLOCK=64
    (never the 128 it prunes) and not settle the key again and again (the group never tunes a key it decided). The
    choice rests on one sample of each config (1 against 50 ms): timed on the virtual clock."""
    tdt.init_distributed()
    contextual_virtual_clock()
    seen: list[tuple[int, int]] = []
    call = [0]

    def hook(i):
        def h(nargs):
            seen.append((call[0], nargs["BLOCK"]))
            time.sleep([0.05, 0.001][i])
            spend([50.0, 1.0][i])
        return h

    kern = block_64_or_128(hook, prune_configs_by={"early_config_prune": _rank_1_keeps_only_64})

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1, sync_every=1)
    def layer(x):
        if rank() == 0 or call[0] >= 2:
            kern[(1,)](x, x.numel())
        dist.barrier()
        return x.clone()

    outs = []
    for c in range(1, 5):
        call[0] = c
        outs.append(float(layer(torch.zeros(64)).sum()))
    emit(rank=rank(), launches=[b for c, b in seen if c >= 2], outs=outs,
         decisions=[d["index"] for d in layer.tuner.decisions.values()])


def clear_kernel_caches(kernel) -> list[str]:
    """Clear what a user (or a library between graph captures) clears of a ``triton.autotune`` kernel: its
    ``cache`` (key -> chosen config) and its JIT function's compiled kernels (``device_caches`` in Triton 3.6 and
    3.9; the interpreter's function has none). Returns what was cleared."""
    cleared = ["cache"]
    kernel.cache.clear()
    jit = kernel.fn
    if hasattr(jit, "device_caches"):
        jit.device_caches.clear()
        cleared.append("device_caches")
    return cleared


@case
def caches_cleared_after_a_decision():
    """A kernel of 2 configs (BLOCK 128 the faster, on the virtual clock) decided for n=64 in call 1; its caches
    are cleared (:func:`clear_kernel_caches`) before call 2 and again before call 4. Calls 2 and 3 launch n=64 alone
    (hot calls), calls 4 and 5 n=32, a key met after the clears, then n=64 (call 4 tunes n=32: n=64 is launched in
    its session). Then the kernel is launched outside the layer with n=64 (a stock launch: Triton's own ``run``,
    which benchmarks on this rank alone a key its cache lacks). Prints the launches of each call (``n:BLOCK``; call
    6: the stock launch, or its error), the kernel's cache size after each call, its cache at the end, the
    decisions, the layer's outputs and what was cleared."""
    tdt.init_distributed()
    contextual_virtual_clock()
    seen: list[tuple[int, str]] = []
    call = [0]

    def hook(i):
        def h(nargs):
            seen.append((call[0], f"{nargs['n']}:{nargs['BLOCK']}"))
            spend([50.0, 1.0][i])
        return h

    kern = block_64_or_128(hook)

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1, sync_every=1)
    def layer(sizes):
        outs = []
        for n in sizes:
            x = torch.zeros(n)
            kern[(1,)](x, n)
            outs.append(float(x.sum()))
        dist.barrier()
        return outs

    outs, cleared, sizes = [], [], []
    for c, ns in enumerate(((64,), (64,), (64,), (32, 64), (32, 64)), start=1):
        call[0] = c
        if c in (2, 4):
            cleared = clear_kernel_caches(kern)
        outs.append(layer(ns))
        sizes.append(len(kern.cache))
    call[0] = 6
    try:
        kern[(1,)](torch.zeros(64), 64)
        stock: list = [b for cc, b in seen if cc == 6]
    except Exception as exc:  # noqa: BLE001 - Triton's own benchmarking, which has no driver on a CPU machine
        stock = [f"{type(exc).__name__}: {exc}"[:300]]
    emit(rank=rank(), launches={str(c): [b for cc, b in seen if cc == c] for c in range(1, 6)}, stock=stock, outs=outs,
         cleared=cleared, sizes=sizes, cache={str(k[0]): v.kwargs["BLOCK"] for k, v in kern.cache.items()},
         decisions={k[1]: d["index"] for k, d in layer.tuner.decisions.items()})


# -- faults ------------------------------------------------------------------------------------------------------


def calls_file() -> Path:
    return Path(os.environ["FAULT_DIR"]) / f"calls.rank{rank()}"


def recording_hook(index: int):
    def hook(nargs):
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        with open(calls_file(), "a") as f:
            f.write(f"{attempt} {index}\n")
        if index == 1 and rank() == 1:
            time.sleep(3600)  # config 1 blocks rank 1 forever: only the watchdog ends it
        time.sleep([100, 4, 15][index] / 1e3)

    return hook


@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=recording_hook(i)) for i, b in enumerate((16, 32, 64))],
                 key=["n"])
@triton.jit
def hang_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


@case
def hang():
    """Under torchrun --max-restarts=1: config 1 blocks rank 1 forever in attempt 0; attempt 1 leaves it out."""
    tdt.init_distributed()
    Path(os.environ["FAULT_DIR"]).mkdir(parents=True, exist_ok=True)

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def layer(x):
        out = torch.empty_like(x)
        hang_kernel[grid(x.numel())](x, out, x.numel())
        dist.all_reduce(out)
        return out

    x = torch.arange(64, dtype=torch.float32)
    out = layer(x)
    decision = next(iter(layer.tuner.decisions.values()))
    emit(rank=rank(), attempt=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"), chosen=decision["index"],
         states=[r["state"] for r in decision["table"]], errors=[r["error"] for r in decision["table"]],
         ok=bool(torch.equal(out, 2 * x)))


if __name__ == "__main__":
    main()
