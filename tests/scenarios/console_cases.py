"""What the console hears of configs that fail and of a call no config can complete, and how decided configs print,
run by tests/test_console_words.py (a Triton-distributed user's review: a config that raised was said only in the
rank log; ``fn.best_configs`` printed ``<triton.Config object at 0x...>``).

Usage: python console_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, or alone). Each rank prints
``RESULT {json}`` lines; what the tuner says goes to stderr, which the test reads.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.errors import BadInputError  # noqa: E402


@triton.jit
def _scale(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)


#: 8 configs: a real Triton kernel's tile, a launch option, and a mode; BLOCK 64 with mode "strict" raises a
#: ValueError (configs 5 and 7), and mode "typo" with num_warps 2 a TypeError of the function's own (config 3)
SPACE = [{"cfg": triton.Config({"BLOCK": block}, num_warps=warps), "mode": mode}
         for block in (32, 64) for warps in (1, 2) for mode in ("plain", "strict")]


def runs_of(log: list[int]):
    @tdt.autotune(SPACE, key_fn=lambda x, **_: x.numel(), n_warmup=1, n_repeat=3)
    def scale(x, *, cfg, mode):
        log.append(SPACE.index({"cfg": cfg, "mode": mode}))
        block = cfg.kwargs["BLOCK"]
        if mode == "strict" and block == 64:
            raise ValueError(f"BLOCK {block} is too wide for strict mode")
        if mode == "strict" and cfg.num_warps == 2:
            raise TypeError("scale() got an unexpected keyword argument 'strict_warps'")
        out = torch.empty_like(x)
        _scale[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), 2.0, BLOCK=block, num_warps=cfg.num_warps)
        if dist.is_initialized():
            dist.all_reduce(out)
        return out

    return scale


@case
def failing_configs():
    """Two keys of a function whose configs 3, 5 and 7 raise (two distinct errors): rank 0's stderr says them once,
    after the first key's decision; the second key, failing alike, says nothing more; rank 1 says nothing."""
    tdt.init_distributed()
    calls: list[int] = []
    scale = runs_of(calls)
    sys.stderr.write("MARK first key\n")
    y = scale(torch.ones(96))
    sys.stderr.write("MARK second key\n")
    scale(torch.ones(40))
    sys.stderr.write("MARK done\n")
    decisions = {str(key): decision for (_, key), decision in scale.tuner.decisions.items()}
    emit(y0=y[0].item(), decided={str(k): SPACE.index(v) for k, v in scale.tuner.decided.items()},
         failed={k: sorted(o.index for o in d.outcomes if o.state == "failed") for k, d in decisions.items()},
         ran=sorted(set(calls)))


@case
def many_errors():
    """A function whose 12 configs raise 11 distinct errors (all but config 0): one warning of a few lines."""
    @tdt.autotune([{"variant": v} for v in range(12)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2)
    def fragile(x, *, variant):
        if variant:
            raise RuntimeError(f"variant {variant} is not built for this device")
        return x + 1

    fragile(torch.ones(4))
    emit(decided=fragile.tuner.decided[4]["variant"])


@case
def verbose_table():
    """``autotune_verbose=True``: the summary's table lists the failed configs; no warning beside it."""
    scale = runs_of([])
    scale(torch.ones(96), autotune_verbose=True)
    emit(ok=True)


@case
def printed_configs():
    """``fn.tuner.decided``, ``fn.best_configs``, ``fn.tuner.space`` and a decided config as printed, and whether the
    function was given the space's own Config objects."""
    given = []

    @tdt.autotune([{"cfg": triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2)}],
                  key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2)
    def tiled(x, *, cfg):
        given.append(cfg)
        return x * 2

    tiled(torch.ones(4))
    emit(decided=repr(tiled.tuner.decided), best=str(tiled.best_configs), space=repr(tiled.tuner.space),
         one=str(tiled.best_configs[4]), same=all(c is tiled.tuner.space[0]["cfg"] for c in given),
         plain=isinstance(tiled.best_configs[4], dict), triton=str(tiled.tuner.space[0]["cfg"]))


@case
def missing_argument():
    """A call of a function whose every config sets only ``gemm_config`` and which needs ``ctx``: rank 1 leaves
    ``ctx`` out. Every rank raises the same BadInputError naming ``ctx`` before any config runs; a call with it on
    every rank then tunes."""
    tdt.init_distributed()
    runs = []

    @tdt.autotune([{"gemm_config": b} for b in (16, 32)], key_fn=lambda x, **_: x.numel(), n_warmup=1, n_repeat=2)
    def ag_gemm(x, *, ctx, gemm_config):
        runs.append(gemm_config)
        return x * ctx

    x = torch.ones(8)
    try:
        ag_gemm(x, ctx=2.0) if dist.get_rank() == 0 else ag_gemm(x)
        emit(error=None)
    except BadInputError as exc:
        emit(error=str(exc), runs=len(runs))
    out = ag_gemm(x, ctx=2.0)
    emit(second=out[0].item(), runs=len(runs))


@case
def wrapper_supplies_argument():
    """A ``functools.wraps`` wrapper that supplies ``ctx`` itself, around a function that requires it: its calls
    without ``ctx`` tune (the wrapped function's signature is not the one Python checks at the call)."""
    import functools

    def with_context(inner):
        @functools.wraps(inner)
        def wrapper(*args, **kwargs):
            return inner(*args, ctx=3.0, **kwargs)

        return wrapper

    @tdt.autotune([{"gemm_config": b} for b in (16, 32)], key_fn=lambda x, **_: x.numel(), n_warmup=1, n_repeat=2)
    @with_context
    def ag_gemm(x, *, ctx, gemm_config):
        return x * ctx

    emit(out=ag_gemm(torch.ones(4))[0].item())


@case
def overwrite_never_measured():
    """``autotune_allow_arg_overwrite=True`` with ``block=3`` over configs ``{"block": 64}`` and ``{}`` (``block``
    has a default here, so decorating is allowed): what each run was given, the decision and the call's result."""
    given: list[object] = []

    @tdt.autotune([{"block": 64}, {}], key_fn=lambda x, **_: x, n_warmup=1, n_repeat=2)
    def scaled(x, block=None):
        given.append(block)
        if block is None:
            raise ValueError("no block given")
        return x * block

    out = scaled(2, block=3, autotune_allow_arg_overwrite=True)
    emit(out=out, given=[repr(b) for b in given], decided={str(k): dict(v) for k, v in scaled.tuner.decided.items()})


def _refuse_wide(nargs):
    """Config 1's pre_hook (BLOCK 64): a Python error of that config alone."""
    raise ValueError("BLOCK 64 needs an aligned buffer")


@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64}, pre_hook=_refuse_wide),
                          triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def _tiled_scale(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)


@case
def contextual_failing_config():
    """``contextual_autotune`` around a stock ``@triton.autotune`` kernel whose config 1 raises (its pre_hook): rank
    0 says it once, after the (kernel, key)'s decision; rank 1 says nothing; both keep the same choice."""
    tdt.init_distributed()

    @tdt.contextual_autotune(n_warmup=1, n_repeat=2)
    def scaled(x):
        out = torch.empty_like(x)
        _tiled_scale[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel(), 2.0)
        dist.all_reduce(out)
        return out

    y = scaled(torch.ones(200))
    decision = next(iter(scaled.tuner.decisions.values()))
    emit(y0=y[0].item(), chosen=decision["index"], states=[row["state"] for row in decision["table"]])


if __name__ == "__main__":
    main()
