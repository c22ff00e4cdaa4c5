"""Multi-rank scenarios for the search of large spaces: a 600-config collective function on a smooth landscape.

Usage: python search_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Prints ``RESULT {json}``.
Each call spends its config's time on the virtual clock (``_cases.virtual_clock``: 2 ms at the landscape's
bottom, up to 4x that at its rim, so that a loaded machine cannot reorder configs) and all-reduces, so the ranks
stay in step as a collective function's would. ``SEARCH_CALLS`` names a file each rank appends every
call's config to (one line per call, with the attempt), so that a test can count calls across attempts.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import signal
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from _cases import case, emit, host_graphs, in_steady_round, main, spend, virtual_clock

import triton_dist_tune as tdt

#: the space: 10 x 6 x 5 x 2 = 600 configs
SPACE = [{"BLOCK_A": a, "b": b, "c": c, "d": d}
         for a, b, c, d in itertools.product([2**k for k in range(10)], range(6), range(5), (False, True))]
#: where the landscape's bottom is (positions along BLOCK_A, b, c) and its d
BOTTOM = (6, 2, 3)
#: the configs called in a steady sample (the others made warm-up calls alone: screened by their probe alone)
STEADY: list[int] = []
#: each rank's own noise, a fraction of each call's time (rank r: JITTER[r % 4])
JITTER = (0.0, 0.2, 0.1, 0.2)


def landscape_ms(config: dict) -> float:
    """A smooth bowl: 2 ms at the bottom; each step away adds to it, the worst config 8 ms."""
    a = config["BLOCK_A"].bit_length() - 1
    steps = (abs(a - BOTTOM[0]) / 9) ** 2 * 3 + (abs(config["b"] - BOTTOM[1]) / 5) ** 2 * 1.5
    steps += (abs(config["c"] - BOTTOM[2]) / 4) ** 2 * 1.0 + (0.5 if config["d"] else 0.0)
    return 2.0 * (1.0 + steps * 0.5)


def tuned(name: str, calls: list[int], jitter: float, kill_at: int | None = None,
          probe_ms: Callable[[int, float], float] | None = None):
    """The 600-config collective function. ``jitter``: this rank's own noise (a fraction of each call's time);
    ``kill_at``: SIGKILL this rank at the first call of the ``kill_at``-th distinct config it runs; ``probe_ms``:
    what a call outside a steady sample (the warm-up, the probe) takes, from the config's index and its time."""
    noise = random.Random(1000 + dist.get_rank())
    seen: list[int] = []
    log = os.environ.get("SEARCH_CALLS")
    attempt = os.environ.get("SEARCH_ATTEMPT", "1")

    @tdt.autotune(SPACE, key_fn=lambda: 0, name=name, timeout=60)
    def f(*, BLOCK_A, b, c, d):
        index = SPACE.index({"BLOCK_A": BLOCK_A, "b": b, "c": c, "d": d})
        if index not in seen:
            seen.append(index)
            if kill_at is not None and len(seen) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        calls.append(index)
        ms, steady = landscape_ms(SPACE[index]), in_steady_round()
        if log:  # the attempt, the config, and whether the call is part of a steady sample
            with open(f"{log}.rank{dist.get_rank()}", "a") as out:
                out.write(f"{attempt} {index} {int(steady)}\n")
        if steady:
            STEADY.append(index)
        spend(ms * (1.0 + jitter * noise.random()) if probe_ms is None or steady else probe_ms(index, ms))
        dist.all_reduce(torch.ones(1))

    return f


@case
def smooth():
    """Tune the 600-config function; each rank's calls carry noise of their own (:data:`JITTER`), rank 0's none."""
    tdt.init_distributed()
    calls: list[int] = []
    f = tuned("smooth", calls, jitter=JITTER[dist.get_rank() % len(JITTER)])
    started = time.monotonic()
    with virtual_clock():
        f()
    ((_, decision),) = f.tuner.decisions.items()
    chosen = decision.index
    emit(chosen=chosen, chosen_ms=landscape_ms(SPACE[chosen]), best_ms=min(map(landscape_ms, SPACE)),
         calls=len(calls), order=list(dict.fromkeys(calls)), search=decision.search,
         seconds=time.monotonic() - started,
         screened=sorted(o.index for o in decision.outcomes if o.state != "pruned"),
         samples=sorted({o.samples for o in decision.outcomes if o.state == "stopped"}))


@case
def far_behind():
    """One rank tunes the 600-config function on a device-like virtual clock: the configs whose warm-up probe reads
    over 1.5x the fastest probe get no steady sample."""
    tdt.init_distributed()
    calls: list[int] = []
    f = tuned("far_behind", calls, jitter=0.0)
    with virtual_clock(kind="device"):
        f()
    ((_, decision),) = f.tuner.decisions.items()
    emit(chosen=decision.index, chosen_ms=landscape_ms(SPACE[decision.index]), best_ms=min(map(landscape_ms, SPACE)),
         search=decision.search, calls={i: calls.count(i) for i in set(calls)},
         finalists=[o.index for o in decision.outcomes if o.state == "measured"],
         ms={o.index: o.time for o in decision.outcomes if o.time is not None},
         true_ms={o.index: landscape_ms(SPACE[o.index]) for o in decision.outcomes if o.time is not None})


@case
def far_behind_host_probe():
    """``far_behind`` where the probe is host-bound, as a function of many launches is on a GPU (the MoE example:
    its probes read 1.4-8x its graphs' device time): every call outside a steady sample takes 4 ms more than its
    config's time, and 8 ms more on one call in six (the host stalled), so that a probe's ratio to the fastest
    says more about the host than about the config. Emits the configs screened by their probe alone (no steady
    call) with their times."""
    tdt.init_distributed()
    calls: list[int] = []
    stalls = random.Random(7)
    f = tuned("far_behind_host_probe", calls, jitter=0.0,
              probe_ms=lambda index, ms: ms + 4.0 * (2.0 if stalls.random() < 1 / 6 else 1.0))
    with virtual_clock(kind="device"):
        f()
    ((_, decision),) = f.tuner.decisions.items()
    emit(chosen_ms=landscape_ms(SPACE[decision.index]), best_ms=min(map(landscape_ms, SPACE)), search=decision.search,
         stand_ins={i: landscape_ms(SPACE[i]) for i in sorted(set(calls) - set(STEADY))})


@case
def far_behind_killed():
    """``far_behind`` where the probes of some configs near the best read 1.7x their time (so that stand-ins lie
    near the best as well as far from it), killed at the ``SEARCH_KILL``-th distinct config of its first attempt and
    resumed in the second (``SEARCH_ATTEMPT=2``). With ``SEARCH_GRAPHS=1`` the calls replay from stand-in CUDA
    graphs (``_cases.host_graphs``) where the tuning times on the device, and the first attempt's own first race
    says to time on the device (its fastest call reads under the bound) where the second's says to time eagerly
    (as a resumed search's first race, near the best configs, can read faster or slower than the first's). With
    ``SEARCH_UNCAPTURABLE=1`` too, no capture of the second attempt works (out of device memory)."""
    tdt.init_distributed()
    calls: list[int] = []
    attempt = os.environ.get("SEARCH_ATTEMPT", "1")
    if os.environ.get("SEARCH_GRAPHS") == "1":
        from triton_dist_tune.measure import graphs, sampling

        uncapturable = os.environ.get("SEARCH_UNCAPTURABLE") == "1" and attempt == "2"
        host_graphs(frozenset(range(len(SPACE))) if uncapturable else frozenset(), oom=True)

        def applies(cold: bool, size: int, device: str, fastest: float, *journaled: str | None) -> bool:
            return graphs.device_time_applies(cold, size, "cuda", 0.5 if attempt == "1" else 50.0, *journaled)

        sampling.device_time_applies = applies
    misread = {i for i, c in enumerate(SPACE) if landscape_ms(c) <= 2.6 and i % 3 == 0}
    kill = int(os.environ.get("SEARCH_KILL", "0")) or None
    f = tuned("far_behind_killed", calls, jitter=0.0, kill_at=kill if attempt == "1" else None,
              probe_ms=lambda index, ms: ms * (1.7 if index in misread else 1.0))
    with virtual_clock(kind="device"):
        f()
    ((_, decision),) = f.tuner.decisions.items()
    emit(chosen_ms=landscape_ms(SPACE[decision.index]), best_ms=min(map(landscape_ms, SPACE)), search=decision.search,
         clock=decision.clock, calls=len(calls))


class _SlowAfterTheFinalRace(logging.Handler):
    """A log handler that takes ``seconds`` over the record of the finalists' race (a slow log shipper): on the rank
    that has it, the search's own seconds run on past the group's last exchange of the search."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds, self.finalists = seconds, False

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.finalists = self.finalists or "search finalists:" in message
        if self.finalists and "] race: " in message:
            time.sleep(self.seconds)


@case
def slow_log():
    """Tune the 600-config function where rank 1's rank log has a handler that takes 0.3 s over the finalists' race
    record: the ranks' own seconds of the search differ, its summary must not."""
    tdt.init_distributed()
    if dist.get_rank() == 1:
        logging.getLogger(f"triton_dist_tune.rank{dist.get_rank()}").addHandler(_SlowAfterTheFinalRace(0.3))
    f = tuned("slow_log", [], jitter=0.0)
    with virtual_clock():
        f()
    ((_, decision),) = f.tuner.decisions.items()
    emit(chosen=decision.index, search=decision.search)


@case
def killed():
    """The first attempt: every rank kills itself at the first call of the 45th distinct config (mid-search: the
    first look has 37); run again (``SEARCH_ATTEMPT=2``) it resumes."""
    tdt.init_distributed()
    calls: list[int] = []
    attempt = os.environ.get("SEARCH_ATTEMPT", "1")
    f = tuned("killed", calls, jitter=0.0, kill_at=45 if attempt == "1" else None)
    with virtual_clock():
        f()
    ((_, decision),) = f.tuner.decisions.items()
    finalists = sorted(o.index for o in decision.outcomes if o.state == "measured")
    screened = {o.index: o.samples for o in decision.outcomes if o.state == "stopped"}
    emit(chosen=decision.index, search=decision.search, finalists=finalists, screened=screened)


@case
def mismatch():
    """The ranks disagree on the search mode (the environment differs): the same clear error on every rank."""
    tdt.init_distributed()

    @tdt.autotune(SPACE[:80], key_fn=lambda: 0, name="mismatch", timeout=30)
    def f(*, BLOCK_A, b, c, d):
        dist.all_reduce(torch.ones(1))

    try:
        f()
        emit(error=None)
    except Exception as exc:
        emit(error=f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
