"""Scenarios for what Triton and Triton-distributed users expect of ``contextual_autotune`` and ``autotune``: a
new key tuned in the call where every rank meets it, Triton's ``prune_configs_by`` in full, and
``autotune_allow_arg_overwrite`` with a ``prune_fn``; run as real processes by tests/test_triton_compat.py.

Usage: python triton_compat_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main, spend, virtual_clock  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune  # noqa: E402

#: (n, config index) of every launch of ``rec_kernel`` (config pre_hooks record them)
LAUNCHES: list[tuple[int, int]] = []


def recorder(index: int):
    def hook(nargs):
        LAUNCHES.append((int(nargs["n"]), index))
        time.sleep([0.030, 0.002, 0.012][index])  # config 1 is clearly the fastest

    return hook


@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=recorder(i)) for i, b in enumerate((16, 32, 64))],
                 key=["n"])
@triton.jit
def rec_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


def grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def layer_body(ns: list[int]) -> bool:
    ok = True
    for n in ns:
        x = torch.arange(n, dtype=torch.float32)
        out = torch.empty_like(x)
        rec_kernel[grid(n)](x, out, n)
        ok = ok and bool(torch.equal(out, x + 1))
    flag = torch.tensor([float(ok)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)  # the function's own collective (it also aligns the ranks' ends)
    return bool(flag.item())


def calls_of(fn, plan: dict[int, list[int]]) -> list[dict]:
    """Call ``fn`` once per entry of ``plan`` (call number -> the n's this rank launches); what each call did."""
    done = []
    for call, ns in sorted(plan.items()):
        LAUNCHES.clear()
        started = time.monotonic()
        ok = fn(ns)
        done.append({"call": call, "ok": ok, "seconds": time.monotonic() - started, "runs": fn.tuner.last_runs,
                     "launched": {str(n): sorted({i for m, i in LAUNCHES if m == n}) for n in ns},
                     "count": {str(n): sum(1 for m, _ in LAUNCHES if m == n) for n in ns}})
    return done


def chosen(fn) -> dict[str, int]:
    return {k[1].strip("(),").split(",")[0]: d["index"] for k, d in fn.tuner.decisions.items()}


@case
def new_keys():
    """Default group: calls 1-2 n=256 on both ranks, call 3 n=512 on both (tuned in call 3); call 4 rank 1 alone
    also launches n=128, call 5 both do (tuned in call 5). Another group of the same ranks: call 1 n=256, call 2
    n=1024 on both (tuned in call 2)."""
    tdt.init_distributed()
    me = dist.get_rank()

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1)
    def layer(ns):
        return layer_body(ns)

    plan = {1: [256], 2: [256], 3: [512], 4: [256, 128] if me == 1 else [256], 5: [256, 128]}
    default = calls_of(layer, plan)
    default_choice = chosen(layer)
    other_group = dist.new_group([0, 1])

    @contextual_autotune(is_dist=other_group, n_warmup=0, n_repeat=1)
    def other(ns):
        return layer_body(ns)

    others = calls_of(other, {1: [256], 2: [1024]})
    emit(default=default, default_choice=default_choice, agreed=layer.tuner.agreed_calls, other=others,
         other_choice=chosen(other), titles=[layer.tuner.group().title, other.tuner.group().title])


# -- Triton's prune_configs_by ---------------------------------------------------------------------------------------

PERF: list[int] = []


def perf_model(x, out, n, BLOCK, **kwargs):
    """Estimated time: BLOCK 64 < 16 < 128 < 32 (so the top 2 are configs 2 and 0, not the first two)."""
    PERF.append(BLOCK)
    return {16: 2.0, 32: 9.0, 64: 1.0, 128: 5.0}[BLOCK]


def prune_recorder(index: int):
    def hook(nargs):
        LAUNCHES.append((int(nargs["n"]), index))

    return hook


def pruned_kernel(tag, top_k, early=None):
    """A kernel of its own (``TAG`` sets it apart from the others: same body, other configs)."""
    configs = [triton.Config({"BLOCK": b, "TAG": tag}, pre_hook=prune_recorder(i))
               for i, b in enumerate((16, 32, 64, 128))]

    @triton.autotune(configs=configs, key=["n"], prune_configs_by={"perf_model": perf_model, "top_k": top_k,
                                                                   "early_config_prune": early})
    @triton.jit
    def kernel(x, out, n, BLOCK: tl.constexpr, TAG: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)

    return kernel


def drop_rank1_block16(configs, nargs, **kwargs):
    """Rank 1 keeps every config but BLOCK=16; rank 0 keeps all: the group tunes those every rank keeps."""
    return [c for c in configs if not (dist.get_rank() == 1 and c.kwargs["BLOCK"] == 16)]


@case
def prune_top_k():
    """perf_model with top_k=2, with top_k=0.5 (a fraction), with an early_config_prune that differs by rank, and
    top_k as a fraction so small that it rounds to zero (at least one config kept)."""
    tdt.init_distributed()
    results = {}
    for name, kernel in (("top2", pruned_kernel(0, 2)), ("half", pruned_kernel(1, 0.5)),
                         ("early", pruned_kernel(2, 2, drop_rank1_block16)), ("tiny", pruned_kernel(3, 0.1))):

        @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
        def layer(n, kernel=kernel):
            x = torch.arange(n, dtype=torch.float32)
            out = torch.empty_like(x)
            kernel[grid(n)](x, out, n)
            dist.barrier()
            return bool(torch.equal(out, x + 1))

        LAUNCHES.clear()
        ok = layer(64)
        results[name] = {"ok": ok, "launched": sorted({i for _, i in LAUNCHES}),
                         "chosen": [d["index"] for d in layer.tuner.decisions.values()],
                         "tuned": [[row["index"] for row in d["table"]] for d in layer.tuner.decisions.values()]}
    emit(**results)


# -- autotune_allow_arg_overwrite with a prune_fn ----------------------------------------------------------------


@case
def overwrite_prune_fn():
    """Triton-distributed's tune_gemm pattern: the tuned parameter is ``config``, the caller passes it by keyword
    with autotune_allow_arg_overwrite=True, and prune_fn(config, A, B, *args, **kwargs) must see the config under
    test."""
    tdt.init_distributed()
    seen, ran = [], []
    space = [{"config": {"BLOCK": b}} for b in (16, 32, 64)]

    def prune_fn(config, a, b, *args, **kwargs):
        seen.append(config["config"]["BLOCK"])
        return config["config"]["BLOCK"] != 64

    @tdt.autotune(config_space=space, key_fn=lambda a, b, *args, **kwargs: a.shape, prune_fn=prune_fn, n_warmup=1,
                  n_repeat=2)
    def tune_gemm(a, b, config=None):
        ran.append(config["BLOCK"])
        time.sleep(0.002 if config["BLOCK"] == 32 else 0.02)
        return a + b

    a = torch.ones(4)
    try:
        out = tune_gemm(a, a, config={"BLOCK": 128}, autotune_allow_arg_overwrite=True)
        error = None
    except Exception as exc:
        out, error = None, f"{type(exc).__name__}: {exc}"
    emit(error=error, seen=sorted(set(seen)), tuned=sorted(set(ran[:-1])), final=ran[-1] if ran else None,
         ok=out is not None and bool(torch.equal(out, a + a)),
         decided=[d.config for d in tune_gemm.tuner.decisions.values()] if hasattr(tune_gemm, "tuner") else None)


@case
def tp_groups_differ():
    """Two tensor-parallel groups ([0, 1] and [2, 3]) tune one key at once and choose differently; group [2, 3]'s
    configs are 4x slower, so it finishes second (over a second later): they share one cache entry, so it says so
    (and points to autotune_replicas)."""
    tdt.init_distributed()
    me = dist.get_rank()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = groups[me // 2]

    @tdt.autotune(config_space=[{"w": 0}, {"w": 1}], key_fn=lambda x, **kw: x.shape, n_warmup=1, n_repeat=3)
    def f(x, w):
        scale = 1 if me < 2 else 4
        # group 0 is faster with w=0, group 1 with w=1 (5 against 80 ms), spent on the virtual clock that times the
        # samples too: on the wall clock group 0's choice rested on 3 samples of 5 against 80 ms on 4 ranks. The real
        # sleeps stay: group [2, 3] must finish second in real time, to find group [0, 1]'s entry
        ms = scale * (5.0 if w == me // 2 else 80.0)
        time.sleep(ms / 1e3)
        spend(ms)
        return x + 1

    x = torch.zeros(2)
    dist.barrier()
    with virtual_clock():
        f(x, autotune_pg=mine)
    emit(chosen=[d.index for d in f.tuner.decisions.values()])


# -- logs ------------------------------------------------------------------------------------------------------


@case
def small_job():
    """A small tuning in the working directory ``JOB_CWD`` (the rank logs go to ./.autotune_logs there)."""
    os.chdir(os.environ["JOB_CWD"])
    tdt.init_distributed()

    @tdt.autotune(config_space=[{"wait": 0.001}, {"wait": 0.004}], key_fn=lambda x, **kw: x.shape, n_warmup=1,
                  n_repeat=1)
    def f(x, wait):
        time.sleep(wait)
        return x + 1

    emit(ok=bool(torch.equal(f(torch.zeros(2)), torch.ones(2))))


if __name__ == "__main__":
    main()
