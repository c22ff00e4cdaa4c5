"""Multi-rank scenarios of the race's sift, run by tests/test_sift.py: heavy calls on a device at its power limit,
tuned on real gloo ranks and on replicas tuned as one.

Usage: python sift_cases.py CASE [CASE ...] (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines. The calls' times are a model's, spent on the virtual clock timed as a device's
(``_cases.virtual_clock("device")``): every assertion follows from the model, whatever the machine's load.
"""

from __future__ import annotations

import math
import random

import torch
import torch.distributed as dist
from _cases import case, emit, in_steady_round, main, spend, virtual_clock

import triton_dist_tune as tdt

#: the configs: ``v`` picks a power draw of :data:`POWER`
SPACE = [{"v": v} for v in range(7)]
#: each config's power draw: configs 0-4 draw full power, 5 and 6 60% (alone, 5 and 6 are 5% faster)
POWER = [1.0] * 5 + [0.6] * 2
#: a call's work (ms), its slowdown at full limiter state, the limiter's two stages' time constant (ms), the jitter
WORK_MS, SLOW, TAU_MS, JITTER = 1.5, 0.15, 8.0, 0.02
#: the keys each case tunes (one tensor length each): 16, as tests/test_sift.py's one-process tuning (on 2 ranks,
#: with the sift turned off, 2 of these 16 chose a full-power config)
KEYS = tuple(range(1, 17))
#: the replicas' landscape: 12 configs, 0-9 at full power, 10 and 11 at 60% (alone, 5% faster). Replica ``j`` of 2
#: races configs ``j, j + 2, ...``: each share holds 6 configs, one of them an efficient one (10 and 11), so with
#: the sift turned off a share keeps 3 of its 6 from the screening, where all read alike
WIDE_SPACE = [{"v": v} for v in range(12)]
WIDE_POWER = [1.0] * 10 + [0.6] * 2
#: the bursts' landscape (:class:`Bursts`): 32 configs, 0-30 at full power, 31 at 60% and 3% less work (alone, 8%
#: faster). Replica ``j`` of 2 races configs ``j, j + 2, ...``: 16 each, so each share's screening stops 4 (12
#: leaders settle); config 31 is replica 1's
BURST_SPACE = [{"v": v} for v in range(32)]
BURST_POWER = [1.0] * 31 + [0.6]
BURST_WORK = [1.0] * 31 + [0.97]
#: the work of every call on the faster device of :func:`sift_replicas_unequal` (relative to :data:`WORK_MS`: 0.4-0.45
#: ms a call, under the 0.5 ms from which a race is heavy, where the other device's 1.5-1.7 ms is heavy)
FAST_DEVICE = 0.25


class PowerLimited:
    """A device at its power limit (each config's draw: ``power``, :data:`POWER` unless told): the limiter follows
    the power of the calls it ran (two stages of 8 ms: 13% of the way in 5 ms, 70% in 20 ms, 96% in 40 ms: what one
    H200 showed, ``benchmarks/results/session_h200_45``), and a call's time is its work slowed by it, with 2% of
    jitter (``seed``). Among the others (the screening's samples, 2 ms of settling and 5 of span) configs 0-6 all
    read alike within noise; a settled sample (20 ms of settling) reads 5 and 6 5% faster. The model of
    tests/test_sift.py's one-process tuning."""

    def __init__(self, seed: int = 0, power: list[float] = POWER, work: list[float] | None = None) -> None:
        self.state = [0.8, 0.8]
        self.rng = random.Random(seed)
        self.power = power
        #: each config's work relative to :data:`WORK_MS` (None: 1 for every config)
        self.work = work

    def __call__(self, v: int) -> None:
        """One call of config ``v``: the limiter follows it, and the call spends its time on the virtual clock."""
        work = WORK_MS * (self.work[v] if self.work is not None else 1.0)
        ms = work * (1 + SLOW * self.state[1]) * (1 + JITTER * self.rng.gauss(0, 1))
        decay = math.exp(-ms / TAU_MS)
        self.state[1] = self.state[0] + (self.state[1] - self.state[0]) * decay
        self.state[0] = self.power[v] + (self.state[0] - self.power[v]) * decay
        spend(ms)


class Bursts(PowerLimited):
    """:class:`PowerLimited` whose limiter relaxes to idle whenever the device switches configs (the host's gap
    between two samples: its synchronize, the round's exchange). A screening sample (2 ms of settling, a span of 5)
    then reads every config near its work alone, and a settled one (20 ms of settling) slowed by its own power: the
    screening reads every full-power config 9% faster in absolute ms than its settled samples do, and faster than
    a 60% config's settled samples (5% faster alone), as on one H200 (``tests/test_sift.py``'s ``RECORDED_H200``:
    configs 8 and 18 read 2.93-2.97 ms in its screening and 3.39 and 3.66 settled, where config 2, the best alone,
    settled at 3.13-3.28)."""

    last: int | None = None

    def __call__(self, v: int) -> None:
        if v != self.last:
            self.state = [0.0, 0.0]
        self.last = v
        super().__call__(v)


def tune_heavy(name: str, group: dist.ProcessGroup | None, space: list[dict] = SPACE, power: list[float] = POWER,
               keys: tuple[int, ...] = KEYS, refine_top: int = 0, limiter: PowerLimited | None = None,
               budget: float | None = None, **layout) -> None:
    """``autotune`` (the default steady timing; ``refine_top``; ``budget``: the option's seconds) of ``space``
    (:data:`SPACE` unless told) over ``keys`` (:data:`KEYS` unless told) on the virtual device clock: each call runs
    this rank's own :class:`PowerLimited` (its jitter seeded by the rank; each config's draw: ``power``), or
    ``limiter``, and all-reduces a small tensor on ``group`` (None: the default group). Prints each key's choice, its
    measured configs' sample counts, whether it is a cut, the configs whose time reads under the choice's, and how
    many configs that left their race in its screening (stopped with no settled sample) read faster than the choice,
    on every rank."""
    limiter = limiter or PowerLimited(seed=dist.get_rank(), power=power)

    @tdt.autotune(space, key_fn=lambda x: x.numel(), n_warmup=1, name=name, timeout=30, refine_top=refine_top,
                  budget=budget)
    def heavy(x, *, v):
        limiter(v)
        dist.all_reduce(torch.ones(4), group=group)
        return x

    with virtual_clock("device"):
        for n in keys:
            heavy(torch.ones(n), **layout)
    decisions = heavy.tuner.decisions.items()
    emit(chosen={str(key): d.index for (_, key), d in decisions},
         measured={str(key): {str(o.index): o.samples for o in d.outcomes if o.state == "measured"}
                   for (_, key), d in decisions},
         cut={str(key): d.cut for (_, key), d in decisions},
         faster={str(key): [o.index for o in d.outcomes if o.usable and o.time < d.time] for (_, key), d in decisions},
         screened_faster={str(key): sum(o.state == "stopped" and not o.settled_time and o.time < d.time
                                        for o in d.outcomes) for (_, key), d in decisions},
         settled_time={str(key): sorted(o.index for o in d.outcomes if o.state == "measured" and o.settled_time)
                       for (_, key), d in decisions},
         statistic={str(key): d.statistic for (_, key), d in decisions})


@case
def sift_ranks():
    """Two ranks (gloo) tune the heavy calls together: every sample is the MAX over both ranks' times."""
    tdt.init_distributed(backend="gloo")
    tune_heavy("sift_ranks", None)


@case
def sift_ranks_wide():
    """Two ranks (gloo) tune :data:`BURST_SPACE` together on :class:`Bursts` devices, one key: more configs than the
    sift's 12, so a group's race screens 2 rounds before its sift (``timing.SIFT_AFTER_GROUP``), where one rank's
    screens 1."""
    tdt.init_distributed(backend="gloo")
    limiter = Bursts(seed=dist.get_rank(), power=BURST_POWER, work=BURST_WORK)
    tune_heavy("sift_ranks_wide", None, BURST_SPACE, keys=KEYS[:1], limiter=limiter)


@case
def sift_replicas():
    """Every rank a replica of its own (one-rank tensor-parallel groups linked by the world,
    ``autotune_replicas``) tune :data:`WIDE_SPACE`: replica ``j`` races configs ``j, j + 2, ...`` (6 each), then
    both race the leaders again."""
    from reliability_c_cases import one_rank_replicas

    layout = one_rank_replicas()
    tune_heavy("sift_replicas", layout["autotune_pg"], WIDE_SPACE, WIDE_POWER, **layout)


@case
def sift_replicas_top1():
    """:func:`sift_replicas` with ``refine_top=1`` over 4 keys: the replicas still race 2 leaders again
    (``leaders.MIN_LEADERS``), and ``refine_top`` does not cut that race to one."""
    from reliability_c_cases import one_rank_replicas

    layout = one_rank_replicas()
    tune_heavy("sift_replicas_top1", layout["autotune_pg"], WIDE_SPACE, WIDE_POWER, keys=KEYS[:4], refine_top=1,
               **layout)


@case
def sift_replicas_top4():
    """:func:`sift_replicas` with ``refine_top=4`` over 2 keys: each share's sift keeps 3, and the replicas race the
    4 best survivors again, all 4 to the end (no sift of the leaders' race)."""
    from reliability_c_cases import one_rank_replicas

    layout = one_rank_replicas()
    tune_heavy("sift_replicas_top4", layout["autotune_pg"], WIDE_SPACE, WIDE_POWER, keys=KEYS[:2], refine_top=4,
               **layout)


@case
def sift_replicas_bursts():
    """Two one-rank replicas tune :data:`BURST_SPACE` on a :class:`Bursts` device, 8 keys: each share's screening
    stops 4 of its 16 configs, and reads them faster than config 31's settled samples; each share settles 12, sifts
    them to 3, and replica 1's ends on config 31, the best alone."""
    from reliability_c_cases import one_rank_replicas

    layout = one_rank_replicas()
    limiter = Bursts(seed=dist.get_rank(), power=BURST_POWER, work=BURST_WORK)
    tune_heavy("sift_replicas_bursts", layout["autotune_pg"], BURST_SPACE, keys=KEYS[:8], limiter=limiter, **layout)


@case
def sift_replicas_cut():
    """:func:`sift_replicas_bursts` over 4 keys with ``budget=1000`` (s), whose clock reads spent on replica 0 once
    its race runs: replica 0 warms its 16 configs up and races them one screening round, a cut (its survivors keep
    their screening samples' times); replica 1 settles its share (config 31 its settled winner). The first pass
    decides, a cut."""
    from reliability_c_cases import one_rank_replicas

    from triton_dist_tune.measure.budget import Budget

    layout = one_rank_replicas()
    limiter = Bursts(seed=dist.get_rank(), power=BURST_POWER, work=BURST_WORK)
    now = Budget.now
    if dist.get_rank() == 0:
        Budget.now = lambda self: 1e6 if in_steady_round() else now(self)  # type: ignore[method-assign]
    try:
        tune_heavy("sift_replicas_cut", layout["autotune_pg"], BURST_SPACE, keys=KEYS[:4], limiter=limiter,
                   budget=1000.0, **layout)
    finally:
        Budget.now = now  # type: ignore[method-assign]


@case
def sift_replicas_unequal():
    """:func:`sift_replicas` over 2 keys on devices of unequal speed: replica 1's does every call's work in a quarter
    of the time (:data:`FAST_DEVICE`: 0.4 ms calls, a light race on its own), replica 0's in 1.5 ms (heavy)."""
    from reliability_c_cases import one_rank_replicas

    layout = one_rank_replicas()
    rank = dist.get_rank()
    limiter = PowerLimited(seed=rank, power=WIDE_POWER, work=[FAST_DEVICE if rank else 1.0] * len(WIDE_SPACE))
    tune_heavy("sift_replicas_unequal", layout["autotune_pg"], WIDE_SPACE, keys=KEYS[:2], limiter=limiter, **layout)


if __name__ == "__main__":
    main()
