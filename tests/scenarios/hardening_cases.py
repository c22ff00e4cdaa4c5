"""Multi-rank scenarios for users' mistakes and long-lived jobs, run as real ranks by tests/test_hardening.py.

Usage: python hardening_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, or alone). Prints
``RESULT {json}``. ``FIXED=1`` makes the ``all_fail_then_fixed`` function work; ``REF_FAILS=1`` makes ``ref_prog``
raise on rank 1. The functions time cold (one call per sample), so that the tests can count calls.
"""

from __future__ import annotations

import collections
import gc
import os
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main, outcome, spend, use_virtual_clock

import triton_dist_tune as tdt

SPACE = [{"block": b} for b in (16, 32, 64)]
#: ms per config: 16 is the fastest, by 75 ms or more. The cases whose result says which config was chosen take 3
#: samples a config (``REPEAT``): from one, a stall of a loaded machine as long as the gap flips the choice (75 ms
#: did in a contextual scenario's one-sample choice). They also time their samples on the virtual clock
#: (``_cases.use_virtual_clock``), where :func:`nap` spends what it sleeps: even 3 samples on the wall clock are a
#: race that stalls of a loaded machine can reorder (they closed 35 and 60 ms gaps in other scenarios)
SLEEP_MS = {16: 5, 32: 80, 64: 120}
#: samples a config where the chosen config is asserted
REPEAT = 3


def nap(ms: float) -> None:
    """Sleep ``ms`` and spend it on the virtual clock (which times the samples only where a case turned it on)."""
    time.sleep(ms / 1e3)
    spend(ms)


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


@case
def callers_errors():
    """A tuned parameter passed by position, a config key the function does not take, a typo in a tuner keyword."""
    tdt.init_distributed()
    calls = collections.Counter()

    @tdt.autotune(SPACE, key_fn=lambda x, *a, **k: x.numel(), n_warmup=0, n_repeat=1, timing="cold", name="positional")
    def scale(x, block=16):
        calls[block] += 1
        return float(x.sum()) * block

    seen = {"positional": outcome(scale, torch.ones(4), 64)}
    seen["typo"] = outcome(scale, torch.ones(4), autotune_verbos=True)
    seen["unknown_key"] = outcome(lambda: tdt.autotune([{"blk": 1}], key_fn=lambda x: 0, name="unknown")(scale.fn))
    seen["string_names"] = outcome(lambda: tdt.autotune(SPACE, key_fn=lambda x: 0, restore_value="x")(scale.fn))
    seen["fine"] = outcome(scale, torch.ones(4))  # the group still works after all of these
    emit(seen=seen, calls=sum(calls.values()))


#: a flag of the call that is not a bool, given by rank 1 alone (``autotune_flag_on_one_rank``)
BAD_FLAGS = {"autotune": 1, "autotune_allow_arg_overwrite": "no", "autotune_verbose": "loud"}


@case
def autotune_flag_on_one_rank():
    """Rank 1 passes a call flag that is not a bool (each of :data:`BAD_FLAGS` in turn), rank 0 nothing: a mistake
    of one rank's call, on an undecided key."""
    tdt.init_distributed()
    calls = collections.Counter()

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=1, timing="cold", name="flag_one_rank")
    def scale(x, *, block):
        calls[block] += 1
        return float(x.sum()) * block

    t0 = time.monotonic()
    seen = {flag: outcome(scale, torch.ones(4), **({flag: value} if rank() == 1 else {}))
            for flag, value in BAD_FLAGS.items()}
    emit(seen=seen, seconds=time.monotonic() - t0, calls=sum(calls.values()))


def make_failing(name: str):
    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=REPEAT, timing="cold", name=name)
    def step(x, *, block):
        if os.environ.get("FIXED") != "1":
            raise RuntimeError("Default process group has not been initialized (simulated)")
        nap(SLEEP_MS[block])
        dist.all_reduce(x.clone())
        return block

    return step


@case
def all_fail_then_fixed():
    """Every config fails (the cause is outside the tuner); the next run, with the cause fixed, tunes afresh."""
    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    step = make_failing("allfail_fixed")
    result = outcome(step, torch.ones(2))
    # this rank's own journals (the ranks share the folder; the others remove theirs at their own pace)
    journals = sorted(p.name for p in Path(step.tuner.cache.folder).glob(f"*.rank{rank()}*.journal"))
    emit(result=result, journals=journals)


@case
def ref_prog_fails_on_one_rank():
    """ref_prog raises on rank 1 only: every rank raises BadInputError at once, and no config is blamed."""
    tdt.init_distributed()
    calls = collections.Counter()

    def reference(x):
        if os.environ.get("REF_FAILS") == "1" and rank() == 1:
            raise ValueError("reference needs more memory than there is")
        return x * 2

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, timing="cold", ref_prog=reference,
                  name="refprog")
    def double(x, *, block):
        calls[block] += 1
        nap(SLEEP_MS[block])
        dist.all_reduce(torch.zeros(1))
        return x * 2

    t0 = time.monotonic()
    result = outcome(lambda: double(torch.ones(4)).tolist())
    rows = next(iter(double.tuner.tables.values()), [])
    journals = [p.read_text() for p in Path(double.tuner.cache.folder).glob("*.journal")]
    emit(result=result, seconds=time.monotonic() - t0, calls=dict(calls), states=[r["state"] for r in rows],
         journals=journals)


@case
def in_place_collective():
    """The issue's example: a tuned function all-reduces its argument in place (no version counter bump)."""
    tdt.init_distributed()

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=2, n_repeat=5, timing="cold", name="inplace_ar")
    def reduce_sum(x, *, block):
        nap(SLEEP_MS[block])
        dist.all_reduce(x)
        return float(x.sum())

    x = torch.full((3,), float(rank() + 1))
    total = reduce_sum(x)
    emit(total=total, x=x.tolist())


@case
def keys_in_canonical_form():
    """Keys that are sets of strings (ranks with different hash seeds), and a key that is a tensor."""
    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)

    @tdt.autotune(SPACE, key_fn=lambda x, tags: frozenset(tags), n_warmup=0, n_repeat=REPEAT, timing="cold",
                  name="setkey")
    def tagged(x, tags, *, block):
        nap(SLEEP_MS[block])
        return block

    tags = {f"tag{i}" for i in range(8)}
    seen = {"set": outcome(tagged, torch.ones(2), tags)}
    bad = tdt.autotune(SPACE, key_fn=lambda x: x, n_warmup=0, n_repeat=1, timing="cold", name="tensorkey")(
        lambda x, *, block: block)
    seen["tensor"] = outcome(bad, torch.ones(2))
    emit(seen=seen, order=list(tags)[:3], files=sorted(p.name for p in tagged.tuner.cache.folder.glob("*.json")))


@case
def group_recreated():
    """A group destroyed and created again (same ranks): the new group is tuned with on its own channel."""
    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    tunings = []

    @tdt.autotune(SPACE, key_fn=lambda x, **k: x.numel(), n_warmup=0, n_repeat=REPEAT, timing="cold", name="regroup")
    def f(x, *, block, group=None):
        nap(SLEEP_MS[block])
        y = x * block
        dist.all_reduce(y, group=group)
        return y

    outs, identities = [], []
    for _ in range(3):
        group = dist.new_group([0, 1])
        before = len(f.tuner.decided_in)
        outs.append(f(torch.ones(2), group=group, autotune_pg=group).tolist())
        tunings.append(len(f.tuner.decided_in) - before)
        identities.append(list(map(str, tdt.group.resolve_group(group).identity)))
        dist.destroy_process_group(group)
        del group
        gc.collect()
    emit(outs=outs, tunings=tunings, identities=identities)


@case
def not_a_member():
    """Rank 1 is not in the group new_group([0]) made: torch gives it -100."""
    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    group = dist.new_group([0])

    @tdt.autotune(SPACE, key_fn=lambda x: 0, n_warmup=0, n_repeat=REPEAT, timing="cold", name="member")
    def f(x, *, block):
        nap(SLEEP_MS[block])
        return block

    emit(result=outcome(f, 1, autotune_pg=group))


@case
def waiting_rank_reports():
    """Rank 1 arrives late: rank 0 prints progress lines naming it while it waits."""
    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    if rank() == 1:
        time.sleep(float(os.environ.get("LATE_S", "3")))
    @tdt.autotune(SPACE, key_fn=lambda: 0, n_warmup=0, n_repeat=REPEAT, timing="cold", name="late")
    def f(*, block):
        nap(SLEEP_MS[block])
        return block

    emit(result=outcome(f))


@case
def threads_share_a_group():
    """Two threads of every rank call one tuned function with one key at the same moment: one tuning, one choice."""
    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    tunings = collections.Counter()

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=2, timing="cold", name="threads")
    def f(x, *, block):
        tunings[block] += 1
        nap(SLEEP_MS[block])
        return block

    results = []
    threads = [threading.Thread(target=lambda: results.append(outcome(f, torch.ones(3)))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    emit(results=results, runs=sum(tunings.values()))


@case
def overwrite_and_fn():
    """autotune_allow_arg_overwrite=True (the caller's value wins), .fn, and to_hashable's three items."""
    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)

    @tdt.autotune(SPACE, key_fn=lambda x, **k: tdt.to_hashable(x), n_warmup=0, n_repeat=REPEAT, timing="cold",
                  name="overwrite")
    def g(x, *, block):
        nap(SLEEP_MS.get(block, 1))
        return block

    shape, stride, dtype = tdt.to_hashable(torch.ones(2, 3))
    emit(tuned=g(torch.ones(2)), caller_wins=g(torch.ones(2), block=99, autotune_allow_arg_overwrite=True),
         clash=outcome(g, torch.ones(5), block=99), fn=g.fn(torch.ones(2), block=7),
         # a decided key: the hot path, and the routing of a call with a tuner keyword
         clash_decided=[outcome(g, torch.ones(2), block=99) for _ in range(2)],
         clash_decided_slow=outcome(g, torch.ones(2), block=99, autotune_verbose=False),
         to_hashable=[list(shape), list(stride), str(dtype)])


@case
def kernel_cache():
    """One process: the tuned function launches a Triton kernel from the module file KERNEL_FILE; how many runs the
    call made tells a cache hit (1) from a tuning; EXTRA is the cache_key_extra."""
    import importlib.util

    import triton

    spec = importlib.util.spec_from_file_location("user_kernels", os.environ["KERNEL_FILE"])
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    runs = collections.Counter()

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=1, timing="cold", name="kernelcache",
                  cache_key_extra=lambda: os.environ.get("EXTRA", ""))
    def copy(x, *, block):
        runs[block] += 1
        out = torch.empty_like(x)
        kernels.copy_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block)
        return out

    out = copy(torch.arange(8.0))
    files = sorted(p for p in copy.tuner.cache.folder.glob("*.json"))
    emit(runs=sum(runs.values()), ok=out.tolist() == list(range(8)), files=[p.name for p in files],
         modes=[oct(p.stat().st_mode & 0o777) for p in files])


if __name__ == "__main__":
    main()
