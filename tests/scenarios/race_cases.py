"""Multi-rank scenarios for the measurement race: drift, early drops, shared rounds, timing modes.

Usage: python race_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Prints ``RESULT {json}``.
Every gap between configs here is 2x or more; the scenarios whose assertions follow from the configs' times time
them on a virtual clock (``_cases.virtual_clock``: each call advances it by its config's cost), so that a loaded
machine's stalls cannot reorder configs.
"""

from __future__ import annotations

import collections
import statistics
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main, spend, virtual_clock, virtual_ms

import triton_dist_tune as tdt


def space(n: int) -> list[dict[str, int]]:
    return [{"variant": v} for v in range(n)]


def outcomes(fn) -> list[dict]:
    ((_, decision),) = fn.tuner.decisions.items()
    return [o.to_json() for o in decision.outcomes]


@case
def drift():
    """The machine drifts while tuning: after the first 3 calls every call costs 4x (a GPU that heats up and clocks
    down). Config 1 is truly 2x faster than config 0, but config 0 is measured first: timed one config after
    another, config 0 (all its runs before the drift) looks 2x faster; interleaved rounds see through it."""
    tdt.init_distributed()
    base_ms = [12.0, 6.0]
    made = [0]
    order = []

    def work(variant: int) -> None:
        made[0] += 1
        ms = base_ms[variant] * (1 if made[0] <= 3 else 4)
        time.sleep(ms / 1e3)
        spend(ms)
        dist.all_reduce(torch.ones(1))

    # the old way, one config after another: 3 runs of config 0, then 3 runs of config 1, read on the same virtual
    # clock as the race (read on the wall clock, a loaded machine's stall in config 0's runs once made it look slower)
    sequential = {}
    for variant in (0, 1):
        runs = []
        for _ in range(3):
            dist.barrier()
            start = virtual_ms()
            work(variant)
            runs.append(virtual_ms() - start)
        sequential[variant] = statistics.median(runs)
    made[0] = 0

    @tdt.autotune(space(2), key_fn=lambda: 0, n_warmup=0, n_repeat=6, batch=1, name="drift")
    def f(*, variant):
        order.append(variant)
        work(variant)

    with virtual_clock():
        f()
    emit(sequential_choice=min(sequential, key=sequential.get), chosen=f.tuner.decided[0]["variant"], order=order)


@case
def race_drops():
    """Four configs, 5/20/40/10 ms: the 4x and 8x slower ones leave the race after the first 3 rounds."""
    tdt.init_distributed()
    sleeps = [0.005, 0.020, 0.040, 0.010]
    order = []

    @tdt.autotune(space(4), key_fn=lambda: 0, n_warmup=1, n_repeat=8, batch=1, name="drops")
    def f(*, variant):
        order.append(variant)
        time.sleep(sleeps[variant])
        spend(sleeps[variant] * 1e3)
        dist.all_reduce(torch.ones(1))

    with virtual_clock():
        f()
    calls = collections.Counter(order)
    emit(calls=[calls[v] for v in range(4)], order=order, chosen=f.tuner.decided[0]["variant"],
         outcomes=outcomes(f))


@case
def early_stop():
    """``early_stop=3``: a config 16x slower than the leader leaves after its first round."""
    tdt.init_distributed()
    calls = collections.Counter()

    @tdt.autotune(space(3), key_fn=lambda: 0, n_warmup=1, n_repeat=8, batch=1, early_stop=3.0, name="early")
    def f(*, variant):
        calls[variant] += 1
        time.sleep([0.005, 0.080, 0.020][variant])
        spend([5.0, 80.0, 20.0][variant])

    with virtual_clock():
        f()
    emit(calls=[calls[v] for v in range(3)], outcomes=outcomes(f), chosen=f.tuner.decided[0]["variant"])


@case
def keep_top():
    """``refine_top=2`` of 5 configs: after 3 rounds at most the two best stay in the race."""
    tdt.init_distributed()

    @tdt.autotune(space(5), key_fn=lambda: 0, n_warmup=1, n_repeat=5, batch=1, refine_top=2, name="top")
    def f(*, variant):
        time.sleep([0.100, 0.005, 0.060, 0.030, 0.120][variant])  # 1 wins by 25 ms, 3 is second by 30
        spend([100.0, 5.0, 60.0, 30.0, 120.0][variant])

    with virtual_clock():
        f()
    emit(outcomes=outcomes(f), chosen=f.tuner.decided[0]["variant"])


@case
def measured_batch():
    """Steady timing with the batch length left to the probes: identical on every rank; the cache entry says how
    sure the choice is."""
    tdt.init_distributed()
    calls = collections.Counter()

    @tdt.autotune(space(2), key_fn=lambda: 0, n_warmup=1, n_repeat=4, name="probe")
    def f(*, variant):
        calls[variant] += 1
        time.sleep([0.003, 0.024][variant] * (1 + 3 * dist.get_rank()))  # 8x between configs, 4x between ranks

    f()
    (entry,) = f.tuner.cache.folder.glob("*.json")
    import json

    data = json.loads(entry.read_text())
    emit(calls=[calls[v] for v in range(2)], chosen=f.tuner.decided[0]["variant"],
         cache={k: data[k] for k in ("format", "timing", "margin", "near_tie", "runner_up", "rounds", "time_ms")},
         outcomes=data["measurements"])


@case
def cold():
    """``timing="cold"``: one call per sample; the choice still agrees (timed on the virtual clock: on the wall
    clock the test's config 1 rested on 4 cold samples of 5 against 80 ms)."""
    tdt.init_distributed()
    calls = collections.Counter()

    @tdt.autotune(space(2), key_fn=lambda: 0, n_warmup=1, n_repeat=4, timing="cold", name="cold")
    def f(*, variant):
        calls[variant] += 1
        time.sleep([0.080, 0.005][variant])
        spend([80.0, 5.0][variant])
        dist.all_reduce(torch.ones(1))

    with virtual_clock():
        f()
    emit(calls=[calls[v] for v in range(2)], chosen=f.tuner.decided[0]["variant"], outcomes=outcomes(f))


@case
def steady_structure():
    """Steady timing, ``batch=3``: every call with the number of exchanges (``Group.combine``) this rank had made
    before it, so that the test sees where the exchanges fall between the calls. (Store requests would also count
    the failure board's watcher, which reads the store from its own thread.)

    The samples are read from a virtual clock that each call advances by its config's cost (8 ms for the three
    equal configs, 64 for the slow one): the structure under test follows from the times, and wall-clock times on a
    loaded machine once made two of three equal configs leave (CI saw it at 2 ms, and again at 8 ms)."""
    from triton_dist_tune.group.resolve import resolve_group

    tdt.init_distributed(backend="gloo")
    group = resolve_group(None)
    exchanges = [0]
    combine = group.combine

    def counted(*args, **kwargs):
        exchanges[0] += 1
        return combine(*args, **kwargs)

    group.combine = counted
    calls = []

    @tdt.autotune(space(4), key_fn=lambda: 0, n_warmup=1, n_repeat=6, batch=3, name="structure")
    def f(*, variant):
        calls.append((variant, exchanges[0]))
        spend([8.0, 8.0, 8.0, 64.0][variant])
        dist.all_reduce(torch.ones(1))

    with virtual_clock():
        f()
    emit(calls=calls, outcomes=outcomes(f))


@case
def mixed_clocks():
    """Rank 0 times with a device-kind clock (a stand-in: this machine has no device, so it reads the host's time
    and cannot hold a device), rank 1 with the host clock, as when one rank's device events fail and it falls back
    alone: the function's collectives must still match, so both ranks make the same calls. Both clocks are
    virtual (``_cases.virtual_clock`` of kind "cuda" on rank 0, "host" on rank 1): on the wall clock the test's
    config 0 rested on 3 samples of 5 against 80 ms."""
    tdt.init_distributed(backend="gloo")
    calls = collections.Counter()

    @tdt.autotune(space(2), key_fn=lambda: 0, n_warmup=1, n_repeat=3, name="mixed_clocks")
    def f(*, variant):
        calls[variant] += 1
        time.sleep([0.005, 0.080][variant])
        spend([5.0, 80.0][variant])
        dist.all_reduce(torch.ones(1))

    with virtual_clock("cuda" if dist.get_rank() == 0 else "host"):  # (it puts the usual clock back after)
        f()
    emit(calls=[calls[v] for v in range(2)], chosen=f.tuner.decided[0]["variant"])


@case
def probe_follows_the_group():
    """Config 0 takes 3 ms per call on rank 0 and 0.2 ms on rank 1; the group's time (3 ms) makes config 1's probe
    one timed call on both ranks (a call of 2 ms or more sizes its samples alone). Were each rank to decide from its
    own time, rank 1 would make 3 probe calls to rank 0's one, and the all_reduce in each call would not match."""
    from triton_dist_tune.measure import timing

    tdt.init_distributed(backend="gloo")
    probes: list[int] = []
    real = timing.probe

    def observed(clock, call, lead=True, calls=timing.PROBE_CALLS):
        probes.append(calls)
        return real(clock, call, lead, calls)

    @tdt.autotune(space(2), key_fn=lambda: 0, n_warmup=1, n_repeat=3, name="probe_follows")
    def f(*, variant):
        time.sleep(0.003 if variant == 0 and dist.get_rank() == 0 else 0.0002)
        dist.all_reduce(torch.ones(1))

    timing.probe = observed
    try:
        f()
    finally:
        timing.probe = real
    emit(probes=probes)

if __name__ == "__main__":
    main()
