"""Code ported from ``triton.autotune`` to ``autotune`` as docs/autotune.md says (the kernel a plain ``@triton.jit``
one, each ``triton.Config`` a value of ``config_space``, launched with ``**config.all_kwargs()``), run by real
ranks in Triton's interpreter; tests/test_triton_port.py asserts what each rank prints.

Usage: python triton_port_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}``.
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402


@triton.jit
def accumulate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``out += x`` by atomic adds, as a split-K GEMM writes its partial sums: ``out`` must start at zero."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def zero_out(nargs: dict) -> None:
    """The configs' ``pre_hook``, as a split-K kernel's ``triton.Config(..., pre_hook=...)`` zeroes its output."""
    nargs["out_ptr"].zero_()


CONFIGS = [triton.Config({"BLOCK": block}, num_warps=4, pre_hook=zero_out) for block in (64, 128)]


def launch(x: torch.Tensor, out: torch.Tensor, config: triton.Config) -> None:
    n = x.numel()
    accumulate_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, **config.all_kwargs())


@case
def config_pre_hook():
    """A ``triton.Config``'s ``pre_hook`` that the ported function never calls, and one that it calls: the first is
    said when decorating (Triton calls it before every launch; ``**config.all_kwargs()`` leaves it out)."""
    tdt.init_distributed()
    with warnings.catch_warnings(record=True) as unhooked_warnings:
        warnings.simplefilter("always")

        @tdt.autotune([{"config": c} for c in CONFIGS], key_fn=lambda x, out: x.numel(), reset_to_zero=["out"])
        def unhooked(x, out, *, config):
            launch(x, out, config)
            dist.all_reduce(out)
            return out

    with warnings.catch_warnings(record=True) as hooked_warnings:
        warnings.simplefilter("always")

        @tdt.autotune([{"config": c} for c in CONFIGS], key_fn=lambda x, out: x.numel(), reset_to_zero=["out"])
        def hooked(x, out, *, config):
            if config.pre_hook:
                config.pre_hook({"x_ptr": x, "out_ptr": out})
            launch(x, out, config)
            dist.all_reduce(out)
            return out

    x = torch.ones(300)
    values = {}
    for name, fn in (("unhooked", unhooked), ("hooked", hooked)):
        for call in ("tuning", "decided"):
            out = torch.full((300,), 7.0)  # the caller's values, which the config's pre_hook zeroes
            values[f"{name} {call}"] = sorted(set(fn(x, out).tolist()))
    emit(unhooked=[(str(w.message), w.category.__name__, os.path.basename(w.filename)) for w in unhooked_warnings],
         hooked=[str(w.message) for w in hooked_warnings], values=values, ranks=dist.get_world_size())


def call_hook_then_launch(x: torch.Tensor, out: torch.Tensor, config: triton.Config) -> None:
    """The launch with the config's ``pre_hook`` first, read as ``getattr(config, "pre_hook")``."""
    hook = getattr(config, "pre_hook", None)
    if hook is not None:
        hook({"x_ptr": x, "out_ptr": out})
    launch(x, out, config)
    dist.all_reduce(out)


class HookedRun:
    """A callable instance whose ``__call__`` calls the config's ``pre_hook``."""

    def __call__(self, x: torch.Tensor, out: torch.Tensor, *, config: triton.Config) -> torch.Tensor:
        if config.pre_hook:
            config.pre_hook({"x_ptr": x, "out_ptr": out})
        launch(x, out, config)
        dist.all_reduce(out)
        return out


@case
def config_pre_hook_through_layers():
    """Functions that do call the config's ``pre_hook``, each in an ordinary way the decorator's check once missed
    (it read the decorated object's own ``__code__`` names alone): ``getattr(config, "pre_hook")``, a callable
    instance, a ``functools.wraps`` wrapper, a ``functools.partial``; and one that calls it in a helper of its
    module. Each run gives Triton's result (the hook zeroes the caller's 7s), and what each decoration warned."""
    import functools

    tdt.init_distributed()

    def by_getattr(x, out, *, config):
        hook = getattr(config, "pre_hook", None)
        if hook:
            hook({"x_ptr": x, "out_ptr": out})
        launch(x, out, config)
        dist.all_reduce(out)
        return out

    def reader(x, out, scale=1, *, config):
        if config.pre_hook:
            config.pre_hook({"x_ptr": x, "out_ptr": out})
        launch(x, out, config)
        dist.all_reduce(out)
        return out

    @functools.wraps(reader)
    def wrapper(*args, **kwargs):
        return reader(*args, **kwargs)

    def through_helper(x, out, *, config):
        call_hook_then_launch(x, out, config)
        return out

    made = {"getattr": by_getattr, "callable instance": HookedRun(), "wraps wrapper": wrapper,
            "partial": functools.partial(reader, scale=2), "module helper": through_helper}
    warned, values = {}, {}
    x = torch.ones(300)
    for name, fn in made.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tuned = tdt.autotune([{"config": c} for c in CONFIGS], key_fn=lambda x, out: x.numel(),
                                 reset_to_zero=["out"], name=name.replace(" ", "_"))(fn)
        warned[name] = [str(w.message) for w in caught if "pre_hook" in str(w.message)]
        out = torch.full((300,), 7.0)
        values[name] = sorted(set(tuned(x, out).tolist()))
    emit(warned=warned, values=values, ranks=dist.get_world_size())


@case
def package_style_hook_named_exception():
    """A ``post_hook`` and a ``pre_hook`` in this package's style, ``hook(config, x, out, exception=None)`` /
    ``hook(config, x, out, reset_only=False)``, on ``f(x, out, *, config)``: the call gives no third positional
    argument, so the parameter named as Triton's keeps its default. What each hook was given, per run."""
    tdt.init_distributed()
    seen: list[tuple[str, bool, object]] = []

    def pre(config, x, out, reset_only=False):
        seen.append(("pre", isinstance(config, dict) and "config" in config, reset_only))

    def post(config, x, out, exception=None):
        seen.append(("post", isinstance(config, dict) and "config" in config, exception))

    @tdt.autotune([{"config": c} for c in CONFIGS], key_fn=lambda x, out: x.numel(), pre_hook=pre, post_hook=post)
    def accumulate(x, out, *, config):
        launch(x, out, config)
        dist.all_reduce(out)
        return out

    out = accumulate(torch.ones(300), torch.zeros(300))
    emit(seen=sorted({(kind, given, repr(marker)) for kind, given, marker in seen}), calls=len(seen),
         finite=bool(torch.isfinite(out).all()))


# -- a split-K GEMM as triton.autotune users write it, inside contextual_autotune ---------------------------------


def zero_c(nargs: dict) -> None:
    """The split configs' own ``pre_hook``: their atomic adds need a zeroed output."""
    HOOKS["config pre_hook"] += 1
    nargs["c_ptr"].zero_()


def early_prune(configs: list, named_args: dict, **kwargs: object) -> list:
    HOOKS["early_config_prune"] += 1
    return [c for c in configs if named_args["K"] % (c.kwargs["BLOCK_K"] * c.kwargs["SPLIT_K"]) == 0]


def perf_model(M: int, K: int, BLOCK_M: int, SPLIT_K: int, **kwargs: object) -> float:
    HOOKS["perf_model"] += 1
    return (M / BLOCK_M) * (K / SPLIT_K)


HOOKS = dict.fromkeys(("config pre_hook", "early_config_prune", "perf_model"), 0)
#: BLOCK_M 16 or 32, SPLIT_K 1, 2, 4 or 8 (8 x BLOCK_K 16 does not divide K = 64: pruned early); the perf model's
#: top 3 are (32, 4), (16, 4) and (32, 2): indices 6, 2 and 5
SPLIT_CONFIGS = [triton.Config({"BLOCK_M": m, "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": k}, num_warps=4, num_ctas=1,
                               maxnreg=128 if k == 2 else None, pre_hook=zero_c if k > 1 else None)
                 for m in (16, 32) for k in (1, 2, 4, 8)]


@triton.autotune(configs=SPLIT_CONFIGS, key=["M", "N", "K"], reset_to_zero=["c_ptr"],
                 prune_configs_by={"early_config_prune": early_prune, "perf_model": perf_model, "top_k": 3})
@triton.heuristics({"EVEN_K": lambda args: args["K"] % (args["BLOCK_K"] * args["SPLIT_K"]) == 0})
@triton.heuristics({"ATOMIC": lambda args: args["SPLIT_K"] > 1})
@triton.jit
def split_k_gemm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, ATOMIC: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K * SPLIT_K)):
        rk = (k * SPLIT_K + tl.program_id(2)) * BLOCK_K + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    where, mask = rm[:, None] * N + rn[None, :], (rm[:, None] < M) & (rn[None, :] < N)
    if ATOMIC:
        tl.atomic_add(c_ptr + where, acc, mask=mask)
    else:
        tl.store(c_ptr + where, acc, mask=mask)


@case
def split_k():
    """The split-K GEMM above, its output all-reduced, tuned in context: every rank gets one GEMM's result (the
    caller's 5s zeroed by ``reset_to_zero`` and the configs' ``pre_hook``), in the tuning call and a decided one."""
    tdt.init_distributed()

    @tdt.contextual_autotune(n_warmup=1, n_repeat=2)
    def tp_gemm(a, b, c):
        (M, K), N = a.shape, b.shape[1]
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]), meta["SPLIT_K"])  # noqa: E731
        split_k_gemm[grid](a, b, c, M, N, K)
        dist.all_reduce(c)
        return c

    torch.manual_seed(0)
    a, b = torch.randn(32, 64), torch.randn(64, 16)
    want = dist.get_world_size() * (a @ b)
    right = [bool(torch.allclose(tp_gemm(a, b, torch.full((32, 16), 5.0)), want, atol=1e-3)) for _ in range(2)]
    (decision,) = tp_gemm.tuner.decisions.values()
    emit(right=right, tuned=sorted(row["index"] for row in decision["table"]), index=decision["index"],
         best=str(split_k_gemm.best_config), timings=len(split_k_gemm.configs_timings),
         hooks={name: count > 0 for name, count in HOOKS.items()})


if __name__ == "__main__":
    main()
