"""Multi-rank scenarios of issue 34 defects 1, 2, 3 and 8, run by tests/test_reliability_c.py: a cut keeps the best
measured, a search ends only on evidence, a resumed search replays its stages.

Usage: python reliability_c_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines. Every tuned call launches a real Triton kernel (Triton's interpreter on CPU ranks).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable

os.environ.setdefault("TRITON_INTERPRET", "1")

import signal  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, contextual_virtual_clock, emit, main, spend, virtual_clock  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.errors import AllConfigsFailedError  # noqa: E402

#: an 80-config space (5 x 4 x 4): more than the search threshold (64), so it is searched; the first look is 16
SPACE = [{"BLOCK": block, "a": a, "b": b} for block, a, b in itertools.product((16, 32, 64, 128, 256), range(4),
                                                                                range(4))]


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def doubled(x: torch.Tensor) -> torch.Tensor:
    """``x + x`` by :func:`add_kernel` (one block of 64): the tuned functions' Triton kernel."""
    out = torch.empty_like(x)
    add_kernel[(1,)](x, x, out, x.numel(), BLOCK=64)
    return out


def landscape_ms(config: dict) -> float:
    """A smooth bowl over the space: 1 ms at (BLOCK 64, a 2, b 1), more away from it."""
    return 1.0 + abs(config["BLOCK"].bit_length() - 7) + abs(config["a"] - 2) + 0.5 * abs(config["b"] - 1)


@case
def function_first_look_fails():
    """Defect 2: ``autotune`` over the 80 configs, whose first 16 distinct configs run (the search's first look)
    raise on every rank; every other config works. The search must go on to untried configs and choose one."""
    tdt.init_distributed(backend="gloo")
    seen: list[int] = []
    failing = int(os.environ.get("FAILING", "16"))

    @tdt.autotune(SPACE, key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=3, timing="cold", name="first_look",
                  timeout=30)
    def f(x, *, BLOCK, a, b):
        index = SPACE.index({"BLOCK": BLOCK, "a": a, "b": b})
        if index not in seen:
            seen.append(index)
        if index in seen[:failing]:
            raise RuntimeError(f"config {index} does not run here")
        spend(landscape_ms(SPACE[index]))
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, x, out, x.numel(), BLOCK=BLOCK)
        dist.all_reduce(out)
        return out

    x = torch.ones(64)
    with virtual_clock():
        try:
            out = f(x)
        except AllConfigsFailedError as exc:
            emit(error=type(exc).__name__, message=str(exc)[:400], tried=len(seen), failing=seen[:failing])
            return
        except Exception as exc:
            emit(error=type(exc).__name__, message=str(exc)[:400], tried=len(seen), failing=seen[:failing])
            return
    ((_, decision),) = f.tuner.decisions.items()
    emit(error=None, chosen=decision.index, tried=len(seen), failing=seen[:failing], search=decision.search,
         ok=bool(torch.equal(out, 2 * dist.get_world_size() * x)))


@case
def function_resumed_search():
    """Defect 8: ``autotune`` over the 80 configs (times on the virtual clock, from :func:`landscape_ms`), key 64
    tuned in full, then key 128, whose search is seeded by key 64's decision. With KILL_AT, every rank SIGKILLs
    itself at the first call of key 128's KILL_AT-th distinct config (mid-search). Run again, key 64 is a cache
    hit, and key 128's search must replay the stages of attempt 1 (its first stage all from the journals)."""
    tdt.init_distributed(backend="gloo")
    kill_at = int(os.environ.get("KILL_AT", "0"))
    seen: list[int] = []

    @tdt.autotune(SPACE, key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=3, timing="cold", name="resumed",
                  timeout=30)
    def f(x, *, BLOCK, a, b):
        index = SPACE.index({"BLOCK": BLOCK, "a": a, "b": b})
        if x.shape[0] == 128 and index not in seen:
            seen.append(index)
            if kill_at and len(seen) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        spend(landscape_ms(SPACE[index]) * (1.5 if x.shape[0] == 128 and a == 3 else 1.0))
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, x, out, x.numel(), BLOCK=BLOCK)
        dist.all_reduce(out)
        return out

    with virtual_clock():
        f(torch.ones(64))
        f(torch.ones(128))
    decisions = {key: d for (_, key), d in f.tuner.decisions.items()}
    emit(keys=sorted(decisions), chosen={str(k): d.index for k, d in decisions.items()},
         cached={str(k): d.cached for k, d in decisions.items()}, search=decisions[128].search, screened=len(seen))


#: each config's time in the budget case (ms, virtual clock): configs 0 and 1 tie, so the race runs on to its budget
BUDGET_MS = (5.0, 5.0, 9.0, 12.0)


@case
def function_budget_cut():
    """Defect 1 in ``autotune``: 4 configs, ``budget`` 1 ms of racing (the race ends after its 3 minimum rounds,
    of 10): a cut. Prints the choice, whether the decision says it was cut, and how many calls the job made (a cache
    hit makes one)."""
    tdt.init_distributed(backend="gloo")
    calls = [0]

    @tdt.autotune([{"v": v} for v in range(len(BUDGET_MS))], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=10,
                  timing="cold", name="budget_cut", budget=0.001, timeout=30)
    def f(x, *, v):
        calls[0] += 1
        spend(BUDGET_MS[v])
        out = doubled(x)
        dist.all_reduce(out)
        return out

    with virtual_clock():
        f(torch.ones(64))
    ((_, decision),) = f.tuner.decisions.items() or [(None, None)]
    emit(calls=calls[0], chosen=None if decision is None else decision.index,
         cut=None if decision is None else getattr(decision, "cut", None),
         rounds=None if decision is None else decision.rounds)


def budget_case(name: str, space: list[dict], sleep_ms) -> None:
    """Issue 41 item 5c: ``budget=0.1`` under the default steady timing, each call sleeping ``sleep_ms(config)``
    (real time: the budget reads the group's wall clock). Prints the ms the tuning's calls slept (its work, which the
    bound must hold: a loaded machine only makes the tuning's own steps slower, so fewer calls fit), the tuning's
    seconds, its rounds, whether it was cut, its search line and the calls the job made (a cache hit makes one)."""
    tdt.init_distributed(backend="gloo")
    slept = [0.0, 0]

    @tdt.autotune(space, key_fn=lambda x: x.shape[0], name=name, budget=0.1, timeout=30)
    def f(x, **config):
        ms = sleep_ms(config)
        time.sleep(ms / 1e3)
        slept[0] += ms
        slept[1] += 1
        out = doubled(x)
        dist.all_reduce(out)
        return out

    x = torch.ones(64)
    add_kernel[(1,)](x, x, torch.empty_like(x), x.numel(), BLOCK=64)  # the interpreter's first launch: not tuning
    f(x)
    ((_, decision),) = f.tuner.decisions.items() or [(None, None)]
    emit(slept_ms=slept[0], calls=slept[1], seconds=decision.seconds, rounds=decision.rounds, cut=decision.cut,
         chosen=decision.index, search=decision.search,
         time=decision.breakdown.to_json() if getattr(decision, "breakdown", None) else None)


@case
def function_budget_steady():
    """8 configs of 2-3.75 ms per call, raced exhaustively."""
    budget_case("budget_steady", [{"v": v} for v in range(8)], lambda config: 2.0 + config["v"] / 4)


@case
def function_budget_search():
    """The 80-config space (searched), 0.5-3.75 ms per call."""
    budget_case("budget_search", SPACE, lambda config: landscape_ms(config) / 2)


#: the inner kernel's 80 configs (5 x 4 x 4): each config's pre_hook runs this rank's hook for it (index, config)
KERNEL_SPACE = [{"A": a, "B": b, "C": c} for a, b, c in itertools.product(range(5), range(4), range(4))]
HOOK: list = [lambda index, params: None]


def hook_of(index: int):
    def hook(nargs):
        HOOK[0](index, KERNEL_SPACE[index])

    return hook


@triton.autotune(configs=[triton.Config({"BLOCK": 64, **params}, pre_hook=hook_of(i))
                          for i, params in enumerate(KERNEL_SPACE)], key=["n"])
@triton.jit
def inner_kernel(x, y, out, n, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def kernel_ms(params: dict) -> float:
    """A smooth bowl over the kernel's space: 1 ms at (A 3, B 1, C 2), up to 13 ms away from it."""
    return 1.0 + 2 * abs(params["A"] - 3) + 1.5 * abs(params["B"] - 1) + abs(params["C"] - 2)


def contextual_layer(max_runs: int):
    """A function that launches the 80-config kernel between collectives, tuned by ``contextual_autotune``."""
    from triton_dist_tune.contextual import contextual_autotune

    runs = [0]

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1, max_runs=max_runs, timeout=30)
    def layer(x, y):
        runs[0] += 1
        out = torch.empty_like(x)
        inner_kernel[(1,)](x, y, out, x.numel())
        dist.all_reduce(out)
        return out

    return layer, runs


@case
def contextual_first_look_fails():
    """Defects 3: ``contextual_autotune`` over the 80-config inner kernel; the first FAILING (default 17) distinct
    configs launched raise in their pre_hook on every rank (the meeting launch and the whole first look). With
    KILL_AT, a rank SIGKILLs itself at the first launch of the KILL_AT-th distinct config (an attempt cut short
    after the failures are journaled). Prints the choice, or the error."""
    tdt.init_distributed(backend="gloo")
    contextual_virtual_clock()
    failing = int(os.environ.get("FAILING", "17"))
    kill_at = int(os.environ.get("KILL_AT", "0"))
    seen: list[int] = []
    launches: list[int] = []

    def hook(index: int, params: dict) -> None:
        launches.append(index)
        if index not in seen:
            seen.append(index)
            if kill_at and len(seen) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        if index in seen[:failing]:
            raise RuntimeError(f"config {index} does not run here")
        spend(kernel_ms(params))

    HOOK[0] = hook
    layer, runs = contextual_layer(int(os.environ.get("MAX_RUNS", "1000")))
    x, y = torch.ones(64), torch.ones(64)
    try:
        out = layer(x, y)
    except Exception as exc:
        # a normal exit, not leave(): rank 0 hosts the store, and its exit handler waits for the other rank to read
        # the last exchange (os._exit skipped that, and rank 1 lost the store under load: a GroupTimeoutError)
        emit(error=type(exc).__name__, message=str(exc)[:400], failing=seen[:failing], runs=runs[0],
             launches=launches)
        return
    ((_, decision),) = layer.tuner.decisions.items()
    emit(error=None, chosen=decision["index"], how=decision["how"], failing=seen[:failing], runs=runs[0],
         launches=launches, failed=sorted(r["index"] for r in decision["table"] if r["state"] == "failed"),
         ok=bool(torch.equal(out, dist.get_world_size() * (x + y))))


@case
def contextual_cut():
    """Defect 1: ``contextual_autotune`` over the 80-config inner kernel (times on the virtual clock, from
    :func:`kernel_ms`), cut by MAX_RUNS (40: the screening takes 33 runs, then the finalists' warm-ups are cut
    off). Prints the choice, how it was made, and each config's launches."""
    tdt.init_distributed(backend="gloo")
    contextual_virtual_clock()
    launches: list[int] = []

    def hook(index: int, params: dict) -> None:
        launches.append(index)
        spend(kernel_ms(params))

    HOOK[0] = hook
    layer, runs = contextual_layer(int(os.environ["MAX_RUNS"]))
    x, y = torch.ones(64), torch.ones(64)
    out = layer(x, y)
    ((_, decision),) = layer.tuner.decisions.items()
    timed = sorted({i for i in launches if launches.count(i) >= 2})  # a warm-up and a timed step at least
    best_timed_ms = min(kernel_ms(KERNEL_SPACE[i]) for i in timed)
    emit(chosen=decision["index"], chosen_ms=kernel_ms(KERNEL_SPACE[decision["index"]]), how=decision["how"],
         cut=decision.get("cut"), runs=runs[0], timed=timed, best_timed_ms=best_timed_ms,
         ok=bool(torch.equal(out, dist.get_world_size() * (x + y))))


def budget_alone_case(name: str, replicas: bool = False, **options) -> None:
    """``budget=0.03`` on a rank-local function of 8 configs whose calls sleep 20-27 ms (real time), measured in
    one of two layouts: ``sharded=True`` (in ``options``), or two ``replicas`` (of one rank each; of two ranks, whose
    calls all-reduce, on 4 ranks). A config's warm-up (its run and its probe, two calls) alone takes over 0.03 s, so
    the budget is spent after each rank's first config, however fast the machine. Prints the states of the
    decision's outcomes, whether it was cut, the choice and the calls the job made (a cache hit makes one)."""
    tdt.init_distributed(backend="gloo")
    calls = [0]
    layout, tp = {}, None
    if replicas:  # tensor-parallel groups of 2 ranks where there are 4 ({0, 1}, {2, 3}), else of one rank
        size, world, rank = (2 if dist.get_world_size() == 4 else 1), dist.get_world_size(), dist.get_rank()
        groups = [dist.new_group(list(range(g, g + size))) for g in range(0, world, size)]  # every rank: every group
        linked = [dist.new_group(list(range(p, world, size))) for p in range(size)]
        tp = groups[rank // size]
        layout = dict(autotune_pg=tp, autotune_replicas=linked[rank % size])

    @tdt.autotune([{"v": v} for v in range(8)], key_fn=lambda x: x.shape[0], name=name, budget=0.03, timeout=30,
                  **options)
    def f(x, *, v):
        calls[0] += 1
        time.sleep((20 + v) / 1e3)
        out = doubled(x)
        if tp is not None and dist.get_world_size(tp) > 1:
            dist.all_reduce(out, group=tp)
        return out

    x = torch.ones(64)
    add_kernel[(1,)](x, x, torch.empty_like(x), x.numel(), BLOCK=64)  # the interpreter's first launch: not tuning
    f(x, **layout)
    ((_, decision),) = f.tuner.decisions.items() or [(None, None)]
    emit(states=[o.state for o in decision.outcomes], errors=[o.error for o in decision.outcomes],
         cut=decision.cut, chosen=decision.index, calls=calls[0])


def one_rank_replicas() -> dict:
    """Start gloo; every rank a replica of its own (a one-rank tensor-parallel group, linked to the others by the
    world): the call's ``autotune_pg`` and ``autotune_replicas``."""
    tdt.init_distributed(backend="gloo")
    world = dist.get_world_size()
    tp = [dist.new_group([r]) for r in range(world)][dist.get_rank()]  # every rank creates every group
    return dict(autotune_pg=tp, autotune_replicas=dist.new_group(list(range(world))))


#: each config's time in the leaders' budget case (ms, virtual clock): config 1 is the faster; a call of config 0
#: predicts a sample far past the budget, so the leaders' race warms config 0 up and then leaves config 1 out
LEADERS_MS = (1e6, 5e5)


@case
def function_budget_leaders():
    """``budget=60`` (real seconds, not spent by the first pass) on two one-rank replicas of 2 configs (times on the
    virtual clock: :data:`LEADERS_MS`): each replica measures one config, both lead, and the leaders' race warms
    config 0 up, whose predicted sample (over 1000 s) ends past the budget, so it leaves config 1 out on every
    replica. Prints the decision's states, errors, choice and cut."""
    layout = one_rank_replicas()

    @tdt.autotune([{"v": v} for v in range(len(LEADERS_MS))], key_fn=lambda x: x.shape[0], name="budget_leaders",
                  budget=60, timeout=30)
    def f(x, *, v):
        spend(LEADERS_MS[v])
        return doubled(x)

    with virtual_clock():
        f(torch.ones(64), **layout)
    ((_, decision),) = f.tuner.decisions.items()
    emit(states=[o.state for o in decision.outcomes], errors=[o.error for o in decision.outcomes],
         cut=decision.cut, chosen=decision.index)


def replicas_on_virtual_clock(name: str, configs: int, ms: Callable[[int, int, int], float]) -> tuple:
    """Two one-rank replicas tune ``configs`` configs (cold timing, 6 rounds) whose call ``k`` (from 1) of config
    ``v`` on rank ``r`` takes ``ms(v, k, r)`` on the virtual clock: (the decision, the cache files' records on the
    rank that writes them, none elsewhere)."""
    layout, rank = one_rank_replicas(), dist.get_rank()
    calls = [0] * configs

    @tdt.autotune([{"v": v} for v in range(configs)], key_fn=lambda x: x.shape[0], name=name, n_warmup=1,
                  n_repeat=6, timing="cold", timeout=30)
    def f(x, *, v):
        calls[v] += 1
        spend(ms(v, calls[v], rank))
        return doubled(x)

    with virtual_clock():
        f(torch.ones(64), **layout)
    ((_, decision),) = f.tuner.decisions.items()
    return decision, [json.loads(p.read_text()) for p in f.tuner.cache.folder.rglob("*.json")] if rank == 0 else []


@case
def function_replicas_noisy():
    """Two one-rank replicas of 2 configs (cold timing, times on the virtual clock): on rank 0 each config's calls
    alternate 2 ms and 3 ms (samples 50% apart: its races take least samples), on rank 1 they take 2 ms (config 0)
    and 2.5 ms (config 1) steadily. Prints the decision's statistic and its choice, and the statistic the cache file
    records (on the rank that writes it)."""
    decision, files = replicas_on_virtual_clock(
        "replicas_noisy", 2, lambda v, k, rank: (3.0 if k % 2 else 2.0) if rank == 0 else 2.0 + 0.5 * v)
    emit(statistic=decision.statistic, chosen=decision.index, recorded=[d.get("statistic") for d in files])


@case
def function_replicas_one_statistic():
    """Two one-rank replicas of 4 configs (cold timing, times on the virtual clock): on rank 0 each config's calls
    alternate 1.5x and 1x its time (samples 50% apart: its races take least samples), on rank 1 they alternate 1.03x
    and 1x (quiet: its races take medians, which read above the least). With ``FIRST_PASS_NOISE=1`` rank 0 is noisy
    in the first pass alone (its leaders' race as quiet as rank 1's). Prints the decision's statistic, its choice
    and its outcomes' times and samples, and the cache file's (on the rank that writes it)."""
    from triton_dist_tune.measure import replicas

    gathered = []  # set once the first pass's outcomes are gathered across replicas: the leaders' race is next
    gather = replicas.Layout.gather

    def gather_then_mark(*args, **kwargs):
        found = gather(*args, **kwargs)
        gathered.append(True)
        return found

    if os.environ.get("FIRST_PASS_NOISE") == "1":
        replicas.Layout.gather = gather_then_mark

    def ms(v: int, k: int, rank: int) -> float:
        base = 2.0 + 0.5 * v if rank == 0 else 2.1 + 0.35 * v
        return base * ((1.5 if rank == 0 and not gathered else 1.03) if k % 2 else 1.0)

    decision, files = replicas_on_virtual_clock("replicas_one_statistic", 4, ms)

    def rows(outcomes: list) -> list:
        return [[o["index"], o["state"], o["time"], o["round_times"]] for o in outcomes]

    emit(statistic=decision.statistic, chosen=decision.index, time=decision.time,
         outcomes=rows([o.to_json() for o in decision.outcomes]),
         recorded=[[d.get("statistic"), d.get("index"), rows(d.get("measurements") or [])] for d in files])


@case
def function_budget_sharded():
    """Issue 41 item 5c, sharded: each rank's share bounded on its own clock."""
    budget_alone_case("budget_sharded", sharded=True)


@case
def function_budget_replicas():
    """Issue 41 item 5c, replicas tuned as one (two replicas of one rank each, or of two ranks on 4 ranks)."""
    budget_alone_case("budget_replicas", replicas=True)


if __name__ == "__main__":
    main()
