"""Issue 40's rank cases, run by tests/test_edges.py: a cache file nested deeper than the exchanges carry, and a
``triton.autotune`` kernel whose config list depends on the rank; and a tuning on a full disk, run by
tests/test_cache_folder_edges.py.

Usage: python edges_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main, spend, virtual_clock  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune  # noqa: E402

#: ms slept per config: config 1 is the fastest on every rank by 10x; the tuned functions also spend them on the
#: virtual clock (``_cases.virtual_clock``), which times their samples: on the wall clock, 2 against 20 ms is a
#: gap of 18 ms, which a loaded machine's stalls (tens of ms) can close
SLEEP_MS = [20, 2, 40]


def make_tuned():
    @tdt.autotune(config_space=[{"variant": v} for v in range(3)], key_fn=lambda x, **_: tuple(x.shape),
                  n_warmup=1, n_repeat=3)
    def edge_sleepy(x, *, variant):
        time.sleep(SLEEP_MS[variant] / 1e3)
        spend(SLEEP_MS[variant])
        y = x * (variant + 1)
        dist.all_reduce(y)
        return y

    return edge_sleepy


@case
def deep_cache():
    """Tune key (4,); rank 0 then adds a field nested 100 levels deep to a measurement of the cache file (as an
    imported bundle could); a fresh tuned function (the same entry) looks the key up: a warning and a re-tune, on
    every rank."""
    tdt.init_distributed()
    with virtual_clock():  # (see SLEEP_MS)
        make_tuned()(torch.ones(4))
    dist.barrier()
    if dist.get_rank() == 0:
        value: object = 1
        for _ in range(100):
            value = [value]
        files = list((Path(os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]) / "edge_sleepy").glob("*.json"))
        assert len(files) == 1, files
        data = json.loads(files[0].read_text())
        data["measurements"][0]["deep"] = value  # a field of a measurement: the lookup broadcasts the rows
        files[0].write_text(json.dumps(data))
    dist.barrier()
    again = make_tuned()
    with virtual_clock():
        again(torch.ones(4))
    emit(chosen=again.tuner.decided[(4,)]["variant"])


#: a config list that depends on the rank: the second config differs
RANK_BLOCKS = (128, 256) if int(os.environ.get("RANK", "0")) == 0 else (128, 512)


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in RANK_BLOCKS], key=["n"])
@triton.jit
def rank_scaled(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


@case
def rank_configs():
    """A contextual tuning of a kernel whose configs differ between the ranks: the error every rank raises."""
    tdt.init_distributed()

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x):
        rank_scaled[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
        return x

    try:
        layer(torch.ones(128))
        emit(type=None, message="", decided=len(layer.tuner.decisions))
    except tdt.AutotuneError as exc:
        emit(type=type(exc).__name__, message=str(exc), decided=len(layer.tuner.decisions))


@case
def full_disk():
    """Tune key 8 over three configs; with ``CUT`` set, rank 1's process ends inside config 2 (the journals stay for
    the next attempt)."""
    tdt.init_distributed()
    rank, cut = dist.get_rank(), bool(os.environ.get("CUT"))

    @tdt.autotune([{"variant": v} for v in range(3)], key_fn=lambda n: n, n_warmup=1, n_repeat=2, name="full_disk")
    def full_disk(n, *, variant):
        if cut and rank == 1 and variant == 2:
            os._exit(3)
        time.sleep(SLEEP_MS[variant] / 1e3)
        spend(SLEEP_MS[variant])
        return n + variant

    try:
        with virtual_clock():  # (see SLEEP_MS)
            out = full_disk(8)
        emit(out=out, error="", chosen=[c["variant"] for c in full_disk.tuner.decided.values()])
    except tdt.AutotuneError as exc:
        emit(out=None, error=f"{type(exc).__name__}: {exc}", chosen=[])


if __name__ == "__main__":
    main()
