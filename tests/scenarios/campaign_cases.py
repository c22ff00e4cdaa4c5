"""Multi-rank scenarios of tuning campaigns and of the undecided-key policy, run by tests/test_campaign.py.

Usage: python campaign_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, or under torchrun). Each
rank appends ``key variant`` to ``$CALLS_DIR/rankN`` for every call of the tuned function and prints ``RESULT``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main, spend, use_virtual_clock

import triton_dist_tune as tdt
from triton_dist_tune.group.resolve import resolve_group

SIZES = [8 * (i + 1) for i in range(8)]  # the campaign's keys: x.shape[0]
SPACE = [{"variant": v} for v in range(3)]


def best_variant(size: int) -> int:
    return (size // 8) % 3


def record(rank: int, size: int, variant: int) -> None:
    with open(Path(os.environ["CALLS_DIR"]) / f"rank{rank}", "a") as f:
        f.write(f"{size} {variant}\n")


def slow(size: int, variant: int) -> None:
    """The best variant of a key takes 5 ms, the others 80 ms, spent on the virtual clock too: the cases that call
    it time their samples there (``_cases.use_virtual_clock``), so the choices the tests assert follow from these
    times whatever the load. On the wall clock they were two cold samples a config of 8 keys (4 in ``replicas``),
    a gap of 75 ms at each, and stalls of a loaded machine have closed 35 and 60 ms gaps in other scenarios."""
    ms = 5.0 if variant == best_variant(size) else 80.0
    time.sleep(ms / 1e3)
    spend(ms)


@case
def local():
    """A rank-local function and 8 keys: a campaign, then (policy) a call at a key never tuned."""
    tdt.init_distributed(backend="gloo")
    use_virtual_clock()  # (see slow)
    rank = dist.get_rank()
    kill_at = int(os.environ.get("KILL_AT_BUILD", "0"))  # SIGKILL this rank as it builds its n-th call
    built: list[int] = []

    def make(n: int) -> torch.Tensor:
        built.append(n)
        if len(built) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.ones(n)

    @tdt.autotune(SPACE, key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=2, timing="cold", name="local")
    def kernel(x, *, variant):
        size = x.shape[0]
        record(rank, size, variant)
        slow(size, variant)
        return x * (variant + 1)

    summary = tdt.campaign(kernel, make, SIZES, local=True)
    decided = {str(k): v["variant"] for k, v in kernel.tuner.decided.items()}
    channel = resolve_group(None)
    seq = channel._seq
    os.environ["TRITON_DIST_AUTOTUNE_UNDECIDED"] = "nearest"
    before = len(open(Path(os.environ["CALLS_DIR"]) / f"rank{rank}").read().splitlines())
    out = kernel(torch.ones(12))  # between 8 and 16: a tie, broken by the key's text ("16" < "8")
    out2 = kernel(torch.ones(61))  # nearest: 64
    calls = open(Path(os.environ["CALLS_DIR"]) / f"rank{rank}").read().splitlines()[before:]
    os.environ["TRITON_DIST_AUTOTUNE_UNDECIDED"] = "first"
    out3 = kernel(torch.ones(100))
    emit(rank=rank, decided=decided, summary=summary.to_json(), exchanges=channel._seq - seq, policy_calls=calls,
         nearest=[out[0].item() - 1, out2[0].item() - 1, out3[0].item() - 1], text=summary.text())


@case
def replicas():
    """4 ranks as 2 replicas of a 2-rank group, a collective function and 4 keys."""
    tdt.init_distributed(backend="gloo")
    use_virtual_clock()  # (see slow)
    rank, world = dist.get_rank(), dist.get_world_size()
    tp_groups = [dist.new_group([s, s + 1]) for s in range(0, world, 2)]
    across_groups = [dist.new_group(list(range(p, world, 2))) for p in range(2)]
    tp, across = tp_groups[rank // 2], across_groups[rank % 2]

    @tdt.autotune(SPACE, key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=2, timing="cold", name="collective")
    def layer(x, *, variant):
        record(rank, x.shape[0], variant)
        slow(x.shape[0], variant)
        y = x * (variant + 1)
        dist.all_reduce(y, group=tp)
        return y

    summary = tdt.campaign(layer, lambda n: torch.ones(n), SIZES[:4], pg=tp, replicas=across)
    decided = {str(slot[-1]): v["variant"] for slot, v in layer.tuner.decided_in.items()}
    out = layer(torch.ones(8), autotune_pg=tp, autotune_replicas=across)  # decided: the hot path
    emit(rank=rank, decided=decided, summary=summary.to_json(), out=out[0].item())


@case
def campaign_without_global_rank_0():
    """2 ranks; global rank 1 runs a campaign of 2 keys on the group [1] alone, global rank 0 none."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    alone = dist.new_group([1])

    @tdt.autotune(SPACE, key_fn=lambda x: x.shape[0], n_warmup=0, n_repeat=1, timing="cold", name="elsewhere")
    def f(x, *, variant):
        record(rank, x.shape[0], variant)
        return x * variant

    if rank == 1:
        tdt.campaign(f, lambda n: torch.ones(n), SIZES[:2], pg=alone)
    emit(rank=rank)


@case
def unsteady_build():
    """A build that is not deterministic: its second build of key 16 (the one that tunes) gives 17 rows, on every
    rank; key 8 builds alike every time. Collective (LOCAL unset) or rank-local (LOCAL=1), 2 ranks."""
    tdt.init_distributed(backend="gloo")
    use_virtual_clock()  # (see slow)
    rank = dist.get_rank()
    built: list[int] = []

    def make(n: int) -> torch.Tensor:
        built.append(n)
        return torch.ones(n + 1 if n == 16 and built.count(16) > 1 else n)

    @tdt.autotune(SPACE, key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=2, timing="cold", name="unsteady")
    def kernel(x, *, variant):
        record(rank, x.shape[0], variant)
        slow(x.shape[0], variant)
        return x

    summary = tdt.campaign(kernel, make, [8, 16], local=bool(os.environ.get("LOCAL")), progress=False)
    emit(rank=rank, decided=sorted(str(k) for k in kernel.tuner.decided), summary=summary.to_json())


@case
def errors_name_their_rank():
    """A rank-local function, 2 ranks, keys 8, 16, 24, 32 (unit 1 tunes 16 and 32, alone): prune_fn raises for 16's
    call and ref_prog for 32's, on every rank (only the unit that tunes the key meets it in a tuning)."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()

    def prune(config, x):
        if x.shape[0] == 16:
            raise ValueError("no pruning for 16")
        return True

    def reference(x):
        if x.shape[0] == 32:
            raise ValueError("no reference for 32")
        return x

    @tdt.autotune(SPACE, key_fn=lambda x: x.shape[0], prune_fn=prune, ref_prog=reference, n_warmup=0, n_repeat=1,
                  timing="cold", name="named")
    def kernel(x, *, variant):
        return x

    summary = tdt.campaign(kernel, lambda n: torch.ones(n), [8, 16, 24, 32], local=True, progress=False)
    emit(rank=rank, summary=summary.to_json())


@case
def build_raises_on_one_rank():
    """2 ranks, a rank-local function; rank 1's build of key 24 raises, so its list of keys ends before it."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()

    def make(n: int) -> torch.Tensor:
        if rank == 1 and n == 24:
            raise ValueError("no memory for 24 rows")
        return torch.ones(n)

    @tdt.autotune(SPACE, key_fn=lambda x: x.shape[0], n_warmup=0, n_repeat=1, timing="cold", name="onerank")
    def kernel(x, *, variant):
        return x

    try:
        tdt.campaign(kernel, make, [8, 16, 24, 32], local=True, progress=False)
    except tdt.BadInputError as exc:
        emit(rank=rank, error=str(exc))


@tdt.autotune(SPACE, key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=2, timing="cold", name="cli")
def cli_kernel(x, *, variant):
    record(int(os.environ["RANK"]), x.shape[0], variant)
    slow(x.shape[0], variant)
    return x


def cli_build(n: int) -> torch.Tensor:
    return torch.ones(n)


@case
def cli():
    """``triton-dist-tune campaign`` on this module's rank-local function, 4 keys."""
    from triton_dist_tune.cli.commands import main as command

    use_virtual_clock()  # (see slow)
    rc = command(["campaign", "campaign_cases:cli_kernel", "--calls", "campaign_cases:cli_build", "--keys", "8", "16",
                  "24", "32", "--local", "--backend", "gloo", "--json", os.environ["SUMMARY"]])
    emit(rank=int(os.environ["RANK"]), rc=rc)  # (the command destroyed the group it started)


@case
def learned_write_paused():
    """2 ranks on two "nodes" (a cache folder each, both local rank 0), a rank-local campaign of 2 keys: each rank
    tunes one and writes the other's decision into its folder as it learns it, where its folder has none. The rank
    given ``$MARKS`` pauses where it is about to write such a learned decision (its folder has no file of it): it
    writes the entry's name to ``$MARKS/entry`` and waits (at most 60 s) for ``$MARKS/go``."""
    import sys

    from triton_dist_tune.disk.cache import DiskCache

    marks = Path(os.environ["MARKS"]) if os.environ.get("MARKS") else None

    def paused(write):
        def pausing(self, entry, *args, **kwargs):
            if marks is not None and sys._getframe(1).f_code.co_name == "_learn" and not self.path(entry).exists():
                (marks / "entry.tmp").write_text(entry)
                (marks / "entry.tmp").rename(marks / "entry")
                deadline = time.monotonic() + 60
                while not (marks / "go").exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
            return write(self, entry, *args, **kwargs)
        return pausing

    for name in ("store", "add"):  # (the campaign wrote with ``store`` after its check; with ``add`` now)
        if hasattr(DiskCache, name):
            setattr(DiskCache, name, paused(getattr(DiskCache, name)))
    tdt.init_distributed(backend="gloo")

    @tdt.autotune(SPACE[:2], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=1, timing="cold", name="learned")
    def kernel(x, *, variant):
        return x * (variant + 1)

    summary = tdt.campaign(kernel, lambda n: torch.ones(n), [8, 16], local=True)
    emit(rank=dist.get_rank(), states=[row.state for row in summary.rows])


if __name__ == "__main__":
    main()
