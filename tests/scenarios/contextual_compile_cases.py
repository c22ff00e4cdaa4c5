"""Scenarios for ``contextual_autotune``'s compiling ahead on the ranks of one node (forced on under Triton's
interpreter, where nothing is compiled otherwise), run as real processes by tests/test_contextual.py.

Usage: python contextual_compile_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import threading  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import before_each_compile, case, contextual_virtual_clock, emit, main  # noqa: E402
from contextual_cases import ADD_BLOCKS, SEQ, add, chosen, configs, launch, rank, runs_of_seq, short  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import compiling, contextual_autotune  # noqa: E402

WIDE_BLOCKS = (16, 32, 64, 128, 256, 512)
#: sleep in ms per n and config, the same on every rank: n=64 chooses config 5, n=128 config 3, each by 5 ms against
#: 200 (both winners run a single program: the interpreter's cost per program only slows the losers). Each config
#: is timed once, so the choice is timed on the virtual clock (the pre_hooks spend these times there): on the wall
#: clock, against 80 ms, a loaded suite (16 workers, 2 busy loops) once read config 3 slower than config 2
WIDE_BY_N = {64: [200, 200, 200, 200, 200, 5], 128: [200, 200, 200, 5, 200, 200]}
#: the config whose compile raises, on whichever rank compiles it
FAILING = 4


@triton.autotune(configs=configs("wide", WIDE_BLOCKS, by_n=WIDE_BY_N), key=["n"])
@triton.jit
def wide_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def count_compiles(force: bool = True) -> list[list]:
    """Force compiling ahead on (``force``), and record each ``warmup`` as [kernel, config index, in the compile
    pool]; the compile of wide's config :data:`FAILING` raises, naming this rank."""
    if force:
        compiling.compiles = lambda: True
    compiled: list[list] = []

    def compile_hook(jitted, kwargs):
        name = jitted.fn.__name__
        index = (WIDE_BLOCKS if name == "wide_kernel" else ADD_BLOCKS).index(kwargs["BLOCK"])
        compiled.append([name, index, threading.current_thread().name.startswith("tdt-precompile")])
        if name == "wide_kernel" and index == FAILING:
            raise RuntimeError(f"ptxas error on rank {rank()}")

    before_each_compile(wide_kernel, compile_hook)
    return compiled


@case
def split_precompile():
    """Four calls: (1) every rank launches wide (n=64), rank 0 also add (n=64), the group tunes; (2) the same, hot;
    (3) rank 0 alone also meets wide n=128 (pending: no exchange); (4) every rank meets wide n=128: the call tunes
    it. Emits what each call compiled here, the launches and the choices."""
    tdt.init_distributed()
    contextual_virtual_clock()  # each config is timed once: see WIDE_BY_N
    compiled = count_compiles()

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def layer(x, extra):
        SEQ.append("run")
        out = torch.empty_like(x)
        launch(wide_kernel, x.numel(), x, out, x.numel())
        if rank() == 0:
            add(x, x)  # met by rank 0 only: it compiles all of add's configs ahead
        if extra is not None:
            launch(wide_kernel, extra.numel(), extra, torch.empty_like(extra), extra.numel())
        return out

    x = torch.arange(64, dtype=torch.float32) + rank()
    wide_128 = torch.arange(128, dtype=torch.float32)
    per_call, ok = [], True
    for extra in (None, None, wide_128 if rank() == 0 else None, wide_128):
        dist.barrier()  # every rank starts each call together: the key of call 4 is settled within the grace
        before = len(compiled)
        ok = ok and bool(torch.equal(layer(x, extra), x))
        per_call.append(compiled[before:])
    tables = {f"{short(k[0])}{k[1]}": [r["error"] for r in d["table"]] for k, d in layer.tuner.decisions.items()
              if short(k[0]) == "wide_kernel"}
    emit(ok=ok, compiled=per_call, seq=runs_of_seq(), chosen=chosen(layer.tuner), errors=tables)


@case
def precompile_not_everywhere():
    """Compiling ahead forced on rank 0 only (the others run Triton's interpreter): the group compiles nothing
    ahead, and no rank waits for the others in a split they do not make."""
    tdt.init_distributed()
    compiled = count_compiles(force=rank() == 0)

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def layer(x):
        SEQ.append("run")
        out = torch.empty_like(x)
        launch(wide_kernel, x.numel(), x, out, x.numel())
        return out

    x = torch.arange(64, dtype=torch.float32)
    ok = bool(torch.equal(layer(x), x))
    emit(ok=ok, compiled=compiled, chosen=chosen(layer.tuner))


if __name__ == "__main__":
    main()
