"""Multi-rank scenarios of replicas tuned as one (``autotune_replicas``) on devices of unequal speed, run by
tests/test_replicas.py.

Usage: python replicas_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines. The calls' times are a model's, spent on the virtual clock: every assertion follows from
the model, whatever the machine's load.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, killed_with_peers, main, spend, virtual_clock, waited_for

import triton_dist_tune as tdt

#: configs per replica's share
SHARE = 3
#: a call's work (ms): config 0 is 5% lighter than the others, on every device
WORK_MS, LIGHTER = 1.0, 0.95
#: the last replica's device runs every call this much faster than the others' (a cooler or faster part)
FAST_DEVICE = 0.85


@case
def unequal_devices():
    """Every rank a replica of its own (one-rank groups linked by the world), ``SHARE`` configs each: replica ``j``
    races configs ``j, j + R, ...``; config 0, in replica 0's share, is the best on every device, and the last
    replica's device runs everything :data:`FAST_DEVICE` times faster, so its share's survivors read faster than
    config 0 there. Prints the choice and the configs measured to the end on this replica."""
    from reliability_c_cases import one_rank_replicas

    layout = one_rank_replicas()
    rank, world = dist.get_rank(), dist.get_world_size()
    speed = FAST_DEVICE if rank == world - 1 else 1.0

    @tdt.autotune([{"v": v} for v in range(SHARE * world)], key_fn=lambda x: x.numel(), n_warmup=1,
                  name="unequal_devices", timeout=30)
    def f(x, *, v):
        spend(WORK_MS * (LIGHTER if v == 0 else 1.0) * speed)
        return x

    with virtual_clock("host"):
        f(torch.ones(4), **layout)
    (_, decision), = f.tuner.decisions.items()
    emit(chosen=decision.index, measured=sorted(o.index for o in decision.outcomes if o.state == "measured"))


#: the leaders' cut landscape (:func:`leaders_cut`), on a device that cools between samples (``sift_cases.Bursts``):
#: config 0 draws 40% power (alone, the best once a device has run it long enough: a settled sample), config 1 full
#: power with 5% less work (the least in a screening's short samples, which the limiter has not caught up with), the
#: others full power and full work. Replica 0 races the even configs, replica 1 the odd ones: configs 0 and 1 lead
CUT_POWER = [0.4] + [1.0] * 11
CUT_WORK = [1.0, 0.95] + [1.0] * 10
#: replica 1's device does every call's work this much slower (its screening samples read over replica 0's settled
#: ones, so a leader's MAX over replicas is that replica's)
SLOW_DEVICE = 1.25


def in_leaders_round() -> bool:
    """Whether the tuner runs this call in a steady round of the replicas' leaders' race (``replicas._settle`` and
    ``Measurer._steady_rounds`` on the stack; the first pass runs before ``_settle``)."""
    names = set()
    frame = sys._getframe(1)
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return {"_settle", "_steady_rounds"} <= names


@case
def leaders_cut():
    """Two one-rank replicas tune :data:`CUT_POWER` over 2 keys with ``budget=1000`` (s), whose clock reads spent on
    replica 1 once its leaders' race runs a round: both settle their shares (configs 0 and 1 their winners), and race
    the two leaders again; replica 0 runs that race to the end (1 screening round, 6 settled), replica 1's is cut
    after its screening round (the leaders hold one short sample each). Prints ``sift_cases.tune_heavy``'s fields."""
    from reliability_c_cases import one_rank_replicas
    from sift_cases import Bursts, tune_heavy

    from triton_dist_tune.measure.budget import Budget

    layout = one_rank_replicas()
    rank = dist.get_rank()
    limiter = Bursts(seed=rank, power=CUT_POWER, work=[w * (SLOW_DEVICE if rank else 1.0) for w in CUT_WORK])
    now = Budget.now
    if rank == 1:
        Budget.now = lambda self: 1e6 if in_leaders_round() else now(self)  # type: ignore[method-assign]
    try:
        tune_heavy("leaders_cut", layout["autotune_pg"], [{"v": v} for v in range(len(CUT_POWER))], CUT_POWER,
                   keys=(1, 2), limiter=limiter, budget=1000.0, **layout)
    finally:
        Budget.now = now  # type: ignore[method-assign]


def recorded(tuned) -> dict:
    """The one decision of ``tuned`` (an ``autotune``'d function) as the ranks compare it: the choice, its
    runner-up, margin, near-tie flag, rounds and statistic, and each usable config's state, time, samples and
    spread."""
    (_, decision), = tuned.tuner.decisions.items()
    return dict(chosen=decision.index, runner_up=decision.runner_up, margin=decision.margin,
                near_tie=decision.near_tie, rounds=decision.rounds, statistic=decision.statistic,
                outcomes={str(o.index): [o.state, o.time, o.samples, o.spread] for o in decision.outcomes
                          if o.usable})


#: the stopped leader's landscape (:func:`leader_stopped_steady`, :func:`leader_stopped_cold`): each call's ms on
#: each replica's device, by config. On replica 0 both configs take alike; on replica 1 config 0 takes 2.5 times
#: config 1: far behind it there (its probe and its sample, ``timing.FAR_BEHIND_RACE``), and clearly slower
STOP_MS = {0: (0.3, 0.3), 1: (0.75, 0.3)}


def leader_stopped(timing: str) -> None:
    """Two one-rank replicas tune configs 0 (replica 0's share) and 1 (replica 1's) in ``timing`` on the virtual
    device clock (:data:`STOP_MS`): both are their share's winners, so both are raced again on both replicas, and
    on replica 1 alone config 0 is far behind and clearly slower. Prints :func:`recorded`."""
    from reliability_c_cases import one_rank_replicas

    layout = one_rank_replicas()
    ms = STOP_MS[dist.get_rank()]

    @tdt.autotune([{"v": 0}, {"v": 1}], key_fn=lambda x: x.numel(), n_warmup=1, name=f"leader_stopped_{timing}",
                  timeout=30, timing=timing)
    def f(x, *, v):
        spend(ms[v])
        return x

    with virtual_clock("device"):
        f(torch.ones(4), **layout)
    emit(**recorded(f))


@case
def leader_stopped_steady():
    """:func:`leader_stopped` in steady timing: config 0 is far behind on replica 1 after the leaders' first
    round."""
    leader_stopped("steady")


@case
def leader_stopped_cold():
    """:func:`leader_stopped` in cold timing: config 0 is clearly slower on replica 1 after two rounds."""
    leader_stopped("cold")


class Uneven:
    """A device whose speed changes from one sample to the next: each time it switches configs (a new sample), it
    draws a factor in ``[1 - swing, 1 + swing]`` (``seed``) that every call of that sample takes."""

    def __init__(self, ms: tuple[float, ...], swing: float, seed: int) -> None:
        self.ms, self.swing, self.rng = ms, swing, random.Random(seed)
        self.last: int | None = None
        self.factor = 1.0

    def __call__(self, v: int) -> None:
        if v != self.last:
            self.factor = 1 + self.swing * (2 * self.rng.random() - 1)
        self.last = v
        spend(self.ms[v] * self.factor)


#: the near tie's landscape (:func:`near_tie`): replica 0's device runs config 0 in 0.3 ms and config 1 5% slower,
#: the same every sample (its spreads are 0: no near tie at a 5% margin); replica 1's runs both in half the time,
#: each sample 20% faster or slower than the last (its spreads hold a 5% margin: a near tie)
TIE_MS = {0: (0.3, 0.315), 1: (0.15, 0.15)}
TIE_SWING = {0: 0.0, 1: 0.2}


@case
def near_tie():
    """Two one-rank replicas tune configs 0 (replica 0's share) and 1 (replica 1's) in steady timing on the virtual
    device clock (:data:`TIE_MS`): both are raced again on both replicas, and every leader's MAX over replicas is
    replica 0's (config 1 5% over config 0). Prints :func:`recorded`."""
    from reliability_c_cases import one_rank_replicas

    layout = one_rank_replicas()
    rank = dist.get_rank()
    device = Uneven(TIE_MS[rank], TIE_SWING[rank], seed=rank)

    @tdt.autotune([{"v": 0}, {"v": 1}], key_fn=lambda x: x.numel(), n_warmup=1, name="near_tie", timeout=30)
    def f(x, *, v):
        device(v)
        return x

    with virtual_clock("device"):
        f(torch.ones(4), **layout)
    emit(**recorded(f))




#: the failing leader's landscape (:func:`leader_fails`): each call's ms on every device, by config; config 1, replica
#: 1's share, is the faster, and raises on replica 0 (which runs it in the leaders' race alone)
FAIL_MS = (0.3, 0.2)
#: the heavy landscape (:func:`leader_fails_heavy`): :data:`FAIL_MS` 5 times over, every call over the 0.5 ms from
#: which a race is heavy (``timing.POWER_SETTLE_ABOVE_MS``) on the device clock: the leaders' race settles after one
#: screening round into ``timing.HEAVY_CYCLES`` settled rounds (the sift's path; 2 leaders: nothing to sift)
HEAVY_FAIL_MS = (1.5, 1.0)


def leaders_phase() -> str | None:
    """Where in the replicas' leaders' race the tuner runs this call (``replicas._settle`` on the stack; the first
    pass runs before it): "warm-up", then in steady timing "screening" or "settled" (the race's settled rounds), in
    cold timing (``_cold_sample`` on the stack: no settled rounds) "first round" or "later rounds"; None outside
    it."""
    names, race = set(), None
    frame = sys._getframe(1)
    while frame is not None:
        names.add(frame.f_code.co_name)
        if race is None and frame.f_code.co_name == "_race_warmed":
            race = frame.f_locals.get("race")
        frame = frame.f_back
    if "_settle" not in names:
        return None
    if race is None or not names & {"_steady_rounds", "_cold_sample"}:
        return "warm-up"
    if "_cold_sample" in names:
        return "first round" if race.rounds == 0 else "later rounds"
    return "screening" if race.settled_from is None else "settled"


def recorded_table(tuned) -> dict:
    """:func:`recorded`, with every config of the table (failed ones too): state, time, samples, spread, the
    number of its round times and its error."""
    (_, decision), = tuned.tuner.decisions.items()
    return dict(chosen=decision.index, runner_up=decision.runner_up, near_tie=decision.near_tie,
                rounds=decision.rounds, statistic=decision.statistic,
                outcomes={str(o.index): [o.state, o.time, o.samples, o.spread, len(o.round_times or ()), o.error]
                          for o in decision.outcomes})


def leader_fails(phase: str | None, timing: str = "steady", ms: tuple[float, ...] = FAIL_MS,
                 failing: tuple[int, ...] = (1,), name: str | None = None, budget: float | None = None,
                 timeout: float = 30, before: Callable[[int], None] | None = None) -> None:
    """Two one-rank replicas tune configs 0 (replica 0's share) and 1 (replica 1's, the faster: ``ms``, each call's
    time on every device) in ``timing`` on the virtual device clock: both are their share's winners, so both are
    raced again on both replicas; on replica 0 alone the configs of ``failing`` (config 1 unless told) raise (a
    launch failure) in the leaders' race's ``phase`` (:func:`leaders_phase`), where replica 1 races them to the end.
    Prints :func:`recorded_table` (or the error every rank raised: its type and message) and the phases in which a
    config raised here. ``budget``: ``autotune``'s, whose clock reads spent on this rank once a config raised here.
    ``timeout``: ``autotune``'s; ``before(v)``: called first in every call of config ``v``."""
    from reliability_c_cases import one_rank_replicas

    layout = one_rank_replicas()
    rank = dist.get_rank()
    raised: list[str] = []

    @tdt.autotune([{"v": v} for v in range(len(ms))], key_fn=lambda x: x.numel(), n_warmup=1,
                  name=name or f"leader_fails_{phase}", timeout=timeout, timing=timing, budget=budget)
    def f(x, *, v):
        if before is not None:
            before(v)
        if rank == 0 and v in failing and leaders_phase() == phase:
            raised.append(phase)
            raise RuntimeError(f"CUDA error: launch failure of config {v} on replica 0 in its {phase} (injected)")
        spend(ms[v])
        return x

    from triton_dist_tune.measure.budget import Budget

    now = Budget.now
    if budget is not None:
        Budget.now = lambda self: 1e6 if raised else now(self)  # type: ignore[method-assign]
    try:
        with virtual_clock("device"):
            f(torch.ones(4), **layout)
    except tdt.AutotuneError as exc:
        emit(raised=sorted(set(raised)), error=type(exc).__name__, message=str(exc))
        return
    finally:
        Budget.now = now  # type: ignore[method-assign]
    (_, decision), = f.tuner.decisions.items()
    emit(raised=sorted(set(raised)), cut=decision.cut, **recorded_table(f))


@case
def leader_fails_warmup():
    """:func:`leader_fails` in the leaders' warm-up."""
    leader_fails("warm-up")


@case
def leader_fails_screening():
    """:func:`leader_fails` in the leaders' screening round."""
    leader_fails("screening")


@case
def leader_fails_settled():
    """:func:`leader_fails` in the leaders' settled rounds."""
    leader_fails("settled")


def leader_fails_cold(phase: str) -> None:
    """:func:`leader_fails` in cold timing (one cold call a sample, ``n_repeat`` rounds, no settled rounds)."""
    leader_fails(phase, timing="cold", name=f"leader_fails_cold_{phase.replace(' ', '_')}")


@case
def leader_fails_cold_warmup():
    """:func:`leader_fails_cold` in the leaders' warm-up."""
    leader_fails_cold("warm-up")


@case
def leader_fails_cold_first():
    """:func:`leader_fails_cold` in the leaders' first round."""
    leader_fails_cold("first round")


@case
def leader_fails_cold_later():
    """:func:`leader_fails_cold` in the leaders' rounds after the first."""
    leader_fails_cold("later rounds")


def leader_fails_heavy(phase: str, failing: tuple[int, ...] = (1,), name: str | None = None,
                       ms: tuple[float, ...] = HEAVY_FAIL_MS) -> None:
    """:func:`leader_fails` on heavy calls (:data:`HEAVY_FAIL_MS` unless told): the leaders' race is heavy on every
    replica (``leaders.heavy_leaders``) and settles after one screening round."""
    leader_fails(phase, ms=ms, failing=failing, name=name or f"leader_fails_heavy_{phase}")


@case
def leader_fails_heavy_warmup():
    """:func:`leader_fails_heavy` in the leaders' warm-up."""
    leader_fails_heavy("warm-up")


@case
def leader_fails_heavy_screening():
    """:func:`leader_fails_heavy` in the leaders' screening round."""
    leader_fails_heavy("screening")


@case
def leader_fails_heavy_settled():
    """:func:`leader_fails_heavy` in the leaders' settled rounds."""
    leader_fails_heavy("settled")


@case
def every_leader_fails_settled():
    """:func:`leader_fails` with both leaders (configs 0 and 1) failing on replica 0 in its settled rounds."""
    leader_fails("settled", failing=(0, 1), name="every_leader_fails_settled")


@case
def every_leader_fails_heavy_settled():
    """:func:`leader_fails_heavy` with both leaders failing on replica 0 in its settled rounds."""
    leader_fails_heavy("settled", failing=(0, 1), name="every_leader_fails_heavy_settled")


#: the next leaders' landscape (:func:`every_leader_fails_next`): :data:`FAIL_MS`, then configs 2 (replica 0's
#: share) and 3 (replica 1's), slower: not leaders after the first pass (configs 0 and 1, each share's winner)
#: and light (under the 0.5 ms from which a race is heavy)
NEXT_MS = (*FAIL_MS, 0.35, 0.4)


@case
def every_leader_fails_next():
    """:func:`every_leader_fails_settled` on 4 configs (:data:`NEXT_MS`): both leaders fail on replica 0 in its
    settled rounds; configs 2 and 3, usable in their own replica's first pass, are left."""
    leader_fails("settled", ms=NEXT_MS, failing=(0, 1), name="every_leader_fails_next")


@case
def every_leader_fails_heavy_next():
    """:func:`every_leader_fails_next` on heavy calls (:data:`NEXT_MS` 5 times over)."""
    leader_fails_heavy("settled", failing=(0, 1), name="every_leader_fails_heavy_next",
                       ms=tuple(5 * t for t in NEXT_MS))


@case
def every_leader_fails_next_cut():
    """:func:`every_leader_fails_next` with ``budget=1000`` (s) whose clock reads spent on replica 0 once its leaders
    raised there: the replicas' agreed clock is spent at the leaders' exchange, so no second leaders' race runs and
    the first pass decides among the next leaders (a cut)."""
    leader_fails("settled", ms=NEXT_MS, failing=(0, 1), name="every_leader_fails_next_cut", budget=1000.0)


def leaders_race() -> int:
    """Which of the replicas' leaders' races (1, 2, ...: ``replicas._race_leaders``'s ``attempt``) the tuner runs
    this call in; 0 outside one."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_race_leaders":
            return int(frame.f_locals.get("attempt", 0))
        frame = frame.f_back
    return 0


@case
def every_leader_fails_next_killed():
    """:func:`every_leader_fails_next` as one attempt of a job (``RUN``), with ``autotune``'s timeout
    ``TRITON_DIST_AUTOTUNE_TIMEOUT``: every call is logged in ``FAULT_DIR/calls.rank<r>`` (``RUN config race
    phase``: :func:`leaders_race`, :func:`leaders_phase`). In the attempts of ``KILL_RUNS`` (``RUN`` values,
    comma-separated) rank ``KILL_RANK`` SIGKILLs itself, as a node lost: in the first, at its first call of the
    second leaders' race's settled rounds, in the others at its first call of the config it died in then (each
    writes the config in ``FAULT_DIR/killed.<RUN>`` first). A rank left waiting for the killed one prints the error
    it raised and exits at once (its peer never comes to a closing barrier)."""
    folder = Path(os.environ["FAULT_DIR"])
    run, kill_rank = os.environ["RUN"], int(os.environ["KILL_RANK"])
    kill_runs = os.environ["KILL_RUNS"].split(",")

    def before(v: int) -> None:
        rank, race, phase = dist.get_rank(), leaders_race(), leaders_phase()
        with open(folder / f"calls.rank{rank}", "a") as out:
            out.write(f"{run} {v} {race} {phase}\n")
        if rank != kill_rank or run not in kill_runs:
            return
        first = run == kill_runs[0]
        if (race == 2 and phase == "settled") if first else v == int((folder / f"killed.{kill_runs[0]}").read_text()):
            (folder / f"killed.{run}").write_text(str(v))
            os.kill(os.getpid(), signal.SIGKILL)

    leader_fails("settled", ms=NEXT_MS, failing=(0, 1), name="every_leader_fails_next_killed",
                 timeout=float(os.environ["TRITON_DIST_AUTOTUNE_TIMEOUT"]), before=before)
    if run in kill_runs:  # the attempt that lost a rank: no closing barrier
        sys.stdout.flush()
        os._exit(0)


@case
def every_replica_killed_in_a_leader():
    """:func:`leader_fails` with nothing raising (``FAIL_MS``: config 1 the faster) as one attempt of a job (``RUN``),
    the ranks sharing one cache folder (one node): in ``RUN`` 0 every rank SIGKILLs itself at its first call of
    config 0 in the leaders' race, as a node lost with both processes inside it (once both are there:
    :func:`_cases.killed_with_peers`). In ``RUN`` 1 rank 1 opens its
    journal only once rank 0 has opened its own (``FAULT_DIR/opened.rank0``, waited for at most 30 s), so that rank
    0's process is the first to adopt the unlocked journals of the folder. Every call is logged in
    ``FAULT_DIR/calls.rank<r>`` (``RUN config race phase``)."""
    from triton_dist_tune.faults.journal import Journal

    folder = Path(os.environ["FAULT_DIR"])
    run = os.environ["RUN"]
    opened = folder / "opened.rank0"
    adopt = Journal._open

    def in_turn(self) -> bool:
        if self._held:
            return adopt(self)
        rank = dist.get_rank()
        if rank == 1:
            waited_for([opened], 30)
        held = adopt(self)
        if rank == 0:
            opened.touch()
        return held

    def before(v: int) -> None:
        rank, race, phase = dist.get_rank(), leaders_race(), leaders_phase()
        with open(folder / f"calls.rank{rank}", "a") as out:
            out.write(f"{run} {v} {race} {phase}\n")
        if run == "0" and v == 0 and phase is not None:
            killed_with_peers(folder, run, rank, (0, 1))

    if run == "1":
        Journal._open = in_turn  # type: ignore[method-assign]
    leader_fails("settled", failing=(), name="every_replica_killed_in_a_leader",
                 timeout=float(os.environ["TRITON_DIST_AUTOTUNE_TIMEOUT"]), before=before)


@case
def a_leader_kills_a_replica_each_attempt():
    """:func:`leader_fails` with nothing raising, run under torchrun ``--max-restarts 2`` on one cache folder (one
    node): in attempt ``k`` (``TORCHELASTIC_RESTART_COUNT``) 0 and 1, rank ``k`` SIGKILLs itself at its first call
    of config 0 in the leaders' race (torchrun then stops its peer and starts the next attempt), so config 0 ends
    two attempts, each on another replica. Every call is logged in ``FAULT_DIR/calls.rank<r>`` (``attempt config
    race phase``)."""
    folder = Path(os.environ["FAULT_DIR"])
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]

    def before(v: int) -> None:
        rank, race, phase = dist.get_rank(), leaders_race(), leaders_phase()
        with open(folder / f"calls.rank{rank}", "a") as out:
            out.write(f"{attempt} {v} {race} {phase}\n")
        if attempt == str(rank) and v == 0 and phase is not None:
            os.kill(os.getpid(), signal.SIGKILL)

    leader_fails("settled", failing=(), name="a_leader_kills_a_replica_each_attempt",
                 timeout=float(os.environ["TRITON_DIST_AUTOTUNE_TIMEOUT"]), before=before)


@case
def first_pass_fails():
    """:func:`leader_fails` on 4 configs (:data:`NEXT_MS`) where config 2, of replica 0's share, raises on replica 0
    in its first pass (outside the leaders' race: phase None), not a leader."""
    leader_fails(None, ms=NEXT_MS, failing=(2,), name="first_pass_fails")


if __name__ == "__main__":
    main()
