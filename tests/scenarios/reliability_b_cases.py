"""Multi-rank scenarios of issue 30 cases 2, 7 and 9, run by tests/test_reliability_b.py.

Usage: python reliability_b_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, or under torchrun).
Each rank prints ``RESULT {json}`` lines.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main, outcome, pid_marker, spend, stopped_then_on, store_gone, virtual_clock, waited_for

import triton_dist_tune as tdt
from triton_dist_tune.errors import GroupTimeoutError

#: the key of the slow unit (rank 1's share of the campaign's two keys)
SLOW_KEY = 16


def leave(**fields: object) -> None:
    """Emit and end at once, with no barrier (the other rank is gone or elsewhere); rank 0 first writes ENDED_AT
    where it is set (a rank stuck until rank 0 has gone waits for it)."""
    emit(**fields)
    sys.stdout.flush()
    if fields.get("rank") == 0 and os.environ.get("ENDED_AT"):
        Path(os.environ["ENDED_AT"]).write_text(repr(time.time()))
    os._exit(0)


@case
def campaign_slow_unit():
    """Two keys, one per rank, T = 2 s: rank 1's key is slow but healthy (its call takes BUILD_S s to build, less
    than the exchange_timeout(2) = 3 s a unit may spend in user code with no deadline; its configs sleep 0.25 s each
    of 1 + 36 runs), longer than the old round deadline (exchange_timeout(2) x (2 configs + 4) = 18 s). Every rank
    must end the campaign normally. The samples are timed on the virtual clock, equal for both configs: the race
    cannot tell them apart and runs all 36 rounds (on the wall clock, a loaded machine's jitter once made one config
    1.6% slower, the race ended after 3 rounds, and the key took 4 s)."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    builds: Counter = Counter()

    def make(n: int) -> torch.Tensor:
        builds[n] += 1
        if n == SLOW_KEY and builds[n] == 2:  # the tuning's own build (the first one only computes the key)
            time.sleep(float(os.environ["BUILD_S"]))
        return torch.ones(n)

    @tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=36,
                  timing="cold", name="slow_unit")
    def kernel(x, *, v):
        seconds = 0.25 if x.shape[0] == SLOW_KEY else 0.001
        time.sleep(seconds)
        spend(seconds * 1e3)
        return x

    started = time.monotonic()
    try:
        with virtual_clock():
            summary = tdt.campaign(kernel, make, [8, SLOW_KEY], local=True, progress=False)
    except GroupTimeoutError as exc:
        leave(rank=rank, ok=False, error=str(exc)[:600], seconds=time.monotonic() - started)
    emit(rank=rank, ok=True, states=[row.state for row in summary.rows], seconds=time.monotonic() - started,
         decided=sorted(kernel.tuner.decided))


@case
def campaign_killed_unit():
    """Two keys, one per rank, T = 2 s, 6 configs (old round deadline: 3 x 10 = 30 s): rank 1 SIGKILLs itself at
    its third call while rank 0 (a fast key) waits at the round. Rank 0 must end within T + grace of the kill."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    calls = [0]

    @tdt.autotune([{"v": v} for v in range(6)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=3,
                  timing="cold", name="killed_unit")
    def kernel(x, *, v):
        if rank == 1:
            calls[0] += 1
            if calls[0] == 3:
                Path(os.environ["KILLED_AT"]).write_text(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.01)
        return x

    started = time.monotonic()
    try:
        tdt.campaign(kernel, lambda n: torch.ones(n), [8, SLOW_KEY], local=True, progress=False)
    except GroupTimeoutError as exc:
        leave(rank=rank, ok=False, error=str(exc)[:600], ended=time.time(), seconds=time.monotonic() - started)
    leave(rank=rank, ok=True, ended=time.time(), seconds=time.monotonic() - started)


@case
def campaign_paused_together():
    """Two keys, one per rank, T = 3 s (the round's window and the limit of user code with no deadline:
    exchange_timeout(3) = 4 s): rank 0 writes its pid to ``$FAULT_DIR/stop-me.rank0`` at once and tunes its key,
    then marks the round finished (and writes ``at-the-round.rank0``) and waits there; rank 1 begins its key's tuning
    only then (it waits for that file outside user code, beating), and its build of the tuning call (user code)
    writes its pid to ``stop-me.rank1`` and goes on 1.5 s after it is continued (``_cases.stopped_then_on``). The
    test stops both together for longer than the window and continues them. Every rank must end the campaign
    normally. (Before, rank 1's build slept 1.5 s, so that rank 0 would be at the round by then: a loaded rank 0
    could still be tuning its key; a wait inside the build would count against the user code's 4 s.)"""
    from triton_dist_tune.faults.progress import RoundWatch
    from triton_dist_tune.function import campaign

    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    folder, builds = Path(os.environ["FAULT_DIR"]), Counter()
    at_the_round = folder / "at-the-round.rank0"
    if rank == 0:
        pid_marker(folder / "stop-me.rank0")
        finished = RoundWatch.finished

        def finishing(self: RoundWatch, round_: int) -> None:
            finished(self, round_)
            at_the_round.touch()

        RoundWatch.finished = finishing  # type: ignore[method-assign]
    else:
        tune_one = campaign._tune_one

        def once_rank_0_waits(*args: object, **kwargs: object) -> object:
            waited_for([at_the_round])
            return tune_one(*args, **kwargs)

        campaign._tune_one = once_rank_0_waits

    def make(n: int) -> torch.Tensor:
        builds[n] += 1
        if n == SLOW_KEY and builds[n] == 2:  # the tuning's own build (the first one only computes the key)
            stopped_then_on(folder / "stop-me.rank1")
        return torch.ones(n)

    @tdt.autotune([{"v": v} for v in range(4)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=3,
                  timing="cold", name="paused_units")
    def kernel(x, *, v):
        time.sleep(0.01)
        return x

    started = time.monotonic()
    try:
        summary = tdt.campaign(kernel, make, [8, SLOW_KEY], local=True, progress=False)
    except GroupTimeoutError as exc:
        leave(rank=rank, ok=False, error=str(exc)[:600], seconds=time.monotonic() - started)
    # (a normal exit: rank 0, the store's host, waits at its exit for rank 1 to leave the round's exchange)
    emit(rank=rank, ok=True, states=[row.state for row in summary.rows], seconds=time.monotonic() - started)


@case
def campaign_interrupted_unit():
    """Two keys, one per rank, T = TRITON_DIST_AUTOTUNE_TIMEOUT (60 s in the test): rank 1 leaves the campaign by
    SIGTERM (STOP_IN=``tuning``: inside its key's 3rd call; ``waiting``: 1.5 s in, when its fast key is done and it
    waits at the round for rank 0's slow key), after writing when to KILLED_AT. Its process is alive until the
    SystemExit has unwound: it says in the store that it leaves, and rank 0 must end with a RankFailedError naming
    it well before exchange_timeout(T) (66 s), the wait for a unit that says nothing."""
    import threading

    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    where, calls = os.environ["STOP_IN"], [0]

    def stop() -> None:
        Path(os.environ["KILLED_AT"]).write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGTERM)

    @tdt.autotune([{"v": v} for v in range(6)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=3,
                  timing="cold", name="interrupted_unit")
    def kernel(x, *, v):
        if rank == 1:
            calls[0] += 1
            if where == "tuning" and calls[0] == 3:
                stop()
        time.sleep(0.1 if x.shape[0] == 8 else 0.005)  # rank 0's key (8) is the slow one
        return x

    if rank == 1 and where == "waiting":
        threading.Timer(1.5, stop).start()
    started = time.monotonic()
    try:
        tdt.campaign(kernel, lambda n: torch.ones(n), [8, SLOW_KEY], local=True, progress=False)
    except GroupTimeoutError as exc:
        leave(rank=rank, ok=False, error=str(exc)[:800], kind=type(exc).__name__, ended=time.time(),
              seconds=time.monotonic() - started)
    except SystemExit:
        leave(rank=rank, ok=False, error="SystemExit", ended=time.time(), seconds=time.monotonic() - started)
    leave(rank=rank, ok=True, ended=time.time(), seconds=time.monotonic() - started)


@case
def campaign_stuck_unit():
    """Two keys, one per rank, T = TRITON_DIST_AUTOTUNE_TIMEOUT (4 s in the tests): rank 1 gets stuck for good in user
    code the tuner has no deadline for (STUCK_IN: ``build``, its build of its key's call, or ``ref_prog``), after
    writing when to STUCK_AT; its process stays alive and its beat thread runs. Rank 0 (a fast key) waits at the
    round and must end with a GroupTimeoutError naming rank 1 as stuck there (the test then kills rank 1). With
    STUCK_FOR, rank 1 comes back after that many seconds, or once rank 0 has ended (whichever is first): once rank
    0 has written ENDED_AT as it ends and the store's port refuses connections (a fixed second after ENDED_AT let a
    loaded rank 0 still be there), it must end with a GroupTimeoutError too."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    where = os.environ["STUCK_IN"]
    builds: Counter = Counter()

    def stuck() -> None:
        Path(os.environ["STUCK_AT"]).write_text(repr(time.time()))
        until = time.monotonic() + float(os.environ.get("STUCK_FOR", 3600))
        ended = Path(os.environ.get("ENDED_AT", "/nonexistent/ended_at"))  # rank 0 writes it as it ends
        while time.monotonic() < until and not ended.exists():
            time.sleep(0.2)
        if ended.exists():  # rank 0 writes it just before its os._exit: back once its store is gone with it
            store_gone()

    def make(n: int) -> torch.Tensor:
        builds[n] += 1
        if where == "build" and rank == 1 and builds[n] == 2:  # the tuning's own build (the first: the key only)
            stuck()
        return torch.ones(n)

    def reference(x):
        if where == "ref_prog" and rank == 1:
            stuck()
        return x

    @tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=3,
                  timing="cold", name="stuck_unit", ref_prog=reference)
    def kernel(x, *, v):
        time.sleep(0.01)
        return x

    started = time.monotonic()
    try:
        tdt.campaign(kernel, make, [8, SLOW_KEY], local=True, progress=False)
    except GroupTimeoutError as exc:
        leave(rank=rank, ok=False, error=str(exc)[:800], ended=time.time(), seconds=time.monotonic() - started)
    leave(rank=rank, ok=True, ended=time.time(), seconds=time.monotonic() - started)


TILES = [{"tile": t} for t in (16, 32, 64)]
#: seconds each tile sleeps: the wider the faster, 6x and 10x apart (M = 32 chooses between 16 and 32: at 40 against
#: 20 ms, 2x, its 3 samples could be swapped by a loaded machine's stalls). The campaigns time their samples on the
#: virtual clock (``_cases.virtual_clock``), where :func:`tile_nap` spends them too: on the wall clock, M = 64's
#: tile 64 rested on 3 samples of 4 against 40 ms, the gap (36 ms) a loaded machine closed in fault_cases.py
TILE_S = {16: 0.240, 32: 0.040, 64: 0.004}


def tile_nap(tile: int) -> None:
    """Sleep ``tile``'s time and spend it on the virtual clock."""
    time.sleep(TILE_S[tile])
    spend(TILE_S[tile] * 1e3)


@case
def nearest_pruned():
    """A collective function, a shape-based ``prune_fn`` (a tile wider than the rows or than the second input
    would read out of bounds) and ``undecided="nearest"``: a campaign decides M = 32 and 64 (tile 32 and 64), then
    calls at M = 60: the nearest key's tile 64 is pruned, the next-nearest's tile 32 is kept on rank 0, but rank 1's
    second input is 24 long, so only tile 16 is kept on every rank: every rank serves tile 16, agreed in one
    exchange; the next call at M = 60 serves it again with none."""
    from triton_dist_tune.group.resolve import resolve_group

    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    ran: list[tuple[int, int, int]] = []

    def prune(config, x, y):
        return config["tile"] <= x.shape[0] and config["tile"] <= y.shape[0]

    @tdt.autotune(TILES, key_fn=lambda x, y: x.shape[0], prune_fn=prune, n_warmup=1, n_repeat=3, timing="cold",
                  name="tiles", undecided="nearest")
    def kernel(x, y, *, tile):
        ran.append((x.shape[0], y.shape[0], tile))
        tile_nap(tile)
        y = x * tile
        dist.all_reduce(y)
        return y

    with virtual_clock():  # (see TILE_S)
        tdt.campaign(kernel, lambda m: (torch.ones(m), torch.ones(m)), [32, 64], progress=False)
    decided = {str(k): v["tile"] for k, v in kernel.tuner.decided.items()}
    channel = resolve_group(None)
    ran.clear()
    seq = channel._seq
    out = kernel(torch.ones(60), torch.ones(60 if rank == 0 else 24))
    first_exchanges = channel._seq - seq
    out2 = kernel(torch.ones(60), torch.ones(60 if rank == 0 else 24))
    emit(rank=rank, decided=decided, served=[t for _, _, t in ran], exchanges=[first_exchanges,
         channel._seq - seq - first_exchanges], out=[out[0].item(), out2[0].item()],
         out_of_bounds=[r for r in ran if r[2] > min(r[0], r[1])])


@case
def local_learned_pruned():
    """A rank-local function and a local campaign over M = 32 and 64 (rank 0 tunes 32, rank 1 tunes 64); rank 1
    builds its calls with a second input 16 long, so its ``prune_fn`` keeps only tile 16: rank 0's decision for
    M = 32 (tile 32) must not be applied on rank 1, and rank 1's own (tile 16) applies everywhere."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()

    def prune(config, x, y):
        return config["tile"] <= x.shape[0] and config["tile"] <= y.shape[0]

    @tdt.autotune(TILES, key_fn=lambda x, y: x.shape[0], prune_fn=prune, n_warmup=1, n_repeat=3, timing="cold",
                  name="local_tiles")
    def kernel(x, y, *, tile):
        tile_nap(tile)
        return x * tile

    with virtual_clock():  # (see TILE_S)
        tdt.campaign(kernel, lambda m: (torch.ones(m), torch.ones(m if rank == 0 else 16)), [32, 64], local=True,
                     progress=False)
    emit(rank=rank, decided={str(k): v["tile"] for k, v in kernel.tuner.decided.items()})


@case
def replicas_learned_pruned():
    """2 one-rank replicas (each rank's own group, linked by the default group) and a replicas campaign over M = 32
    and 64 (replica 0 tunes 32, replica 1 tunes 64); rank 1 builds its calls with a second input 16 long, so its
    ``prune_fn`` keeps only tile 16 and takes back replica 0's decision for M = 32 (tile 32). Then every rank calls
    at M = 32 with the replicas: emits what each rank decided after the campaign and what the call gave (or its
    error)."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    own = [dist.new_group([r]) for r in range(dist.get_world_size())][rank]
    across = dist.group.WORLD

    def prune(config, x, y):
        return config["tile"] <= x.shape[0] and config["tile"] <= y.shape[0]

    @tdt.autotune(TILES, key_fn=lambda x, y: x.shape[0], prune_fn=prune, n_warmup=1, n_repeat=3, timing="cold",
                  name="replica_tiles")
    def kernel(x, y, *, tile):
        tile_nap(tile)
        return x * tile

    def build(m: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.ones(m), torch.ones(m if rank == 0 else 16)

    with virtual_clock():  # (see TILE_S)
        tdt.campaign(kernel, build, [32, 64], pg=own, replicas=across, progress=False)
    decided = {str(slot[-1]): v["tile"] for slot, v in kernel.tuner.decided_in.items()}
    started = time.monotonic()
    out = outcome(lambda: kernel(*build(32), autotune_pg=own, autotune_replicas=across)[0].item())
    emit(rank=rank, decided=decided, out=out, seconds=time.monotonic() - started)


@case
def contextual_off_agreement():
    """Case 9: ``contextual_autotune`` on 2 ranks with ``sync_every=4``, 12 calls: both ranks launch n = 64 in
    every call; rank 1 also launches n = 32 in the calls that are not agreement points (2, 3, 5, 6, 7, 9, 10, 11).
    The n = 32 key must get decided, and rank 1 must settle it (wait the new-key grace) once, not in every call."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import triton
    import triton.language as tl

    from triton_dist_tune.contextual import contextual_autotune

    def nap(index: int):
        def hook(nargs):
            time.sleep((0.004, 0.040)[index])
        return hook

    @triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=nap(i)) for i, b in enumerate((128, 256))],
                     key=["n"])
    @triton.jit
    def inc(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)

    tdt.init_distributed(backend="gloo")
    me = dist.get_rank()

    @contextual_autotune(is_dist=True, n_warmup=0, n_repeat=1, sync_every=4)
    def layer(call):
        sizes = [64, 32] if me == 1 and call >= 2 and call % 4 else [64]
        ok = True
        for n in sizes:
            x = torch.arange(n, dtype=torch.float32)
            out = torch.empty_like(x)
            inc[(triton.cdiv(n, 128),)](x, out, n)
            ok = ok and bool(torch.equal(out, x + 1))
        total = torch.tensor([1.0])
        dist.all_reduce(total)
        return ok

    oks = [layer(call) for call in range(1, 13)]
    from triton_dist_tune.contextual.tracks import group_choice

    group = layer.tuner.group()
    decided = sorted(tid[1].split(",")[0].strip("(") for tid in layer.tuner.decisions)
    choices = {str(n): group_choice(group, (tid[0], tid[1])) for tid in layer.tuner.decisions
               for n in [tid[1].split(",")[0].strip("(")]}
    emit(rank=me, ok=all(oks), decided=decided, choices=choices, agreed=layer.tuner.agreed_calls)


if __name__ == "__main__":
    main()
