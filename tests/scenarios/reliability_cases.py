"""Multi-rank scenarios of issue 30 (every phase under a deadline, blame only with evidence, every protocol input
agreed, hostile store values), run as real gloo ranks by tests/test_reliability.py.

Usage: python reliability_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Prints ``RESULT {json}``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import (
    before_each_compile,
    case,
    contextual_virtual_clock,
    emit,
    in_steady_round,
    main,
    outcome,
    spend,
    use_virtual_clock,
)

import triton_dist_tune as tdt

SPACE = [{"block": b} for b in (16, 32, 64)]
#: ms per config: 16 is the fastest by 75 ms or more. The cases whose tests assert the choice time their samples on
#: the virtual clock (``_cases.use_virtual_clock``), where :func:`nap` spends what it sleeps: on the wall clock the
#: choice rested on 2 or 3 cold samples of 5 against 80 ms, and stalls of a loaded machine have closed 35 and 60 ms
#: gaps in other scenarios. The sleeps stay real: the deadlines these cases test run on the real clock.
SLEEP_MS = {16: 5, 32: 80, 64: 120}


def nap(ms: float) -> None:
    """Sleep ``ms`` and spend it on the virtual clock (which times the samples only where a case turned it on)."""
    time.sleep(ms / 1e3)
    spend(ms)


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def tuned(**options):
    """The scenarios' function: config ``block`` sleeps ``SLEEP_MS[block]``, then an all-reduce; tuned with
    ``options``."""

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), **options)
    def f(x, *, block):
        nap(SLEEP_MS[block])
        dist.all_reduce(x.clone())
        return block

    return f


def journals(tuner) -> list[str]:
    """The text of every journal in the tuner's cache folder (the ranks share it)."""
    return [p.read_text() for p in Path(tuner.cache.folder).glob("*.journal")]


def states(tuner) -> list[str]:
    rows = next(iter(tuner.tables.values()), [])
    return [r["state"] for r in rows]


@case
def tuner_bug_blames_no_config():
    """Case 6: the tuner's own code raises between a config's ``started`` record and its guarded run (injected:
    INJECT=1 replaces the measurer's warm-up plan with one that raises, on every rank, for config 0). Two such
    attempts must not leave config 0 out as crashed: a third attempt without the fault chooses it."""
    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    if os.environ.get("INJECT") == "1":
        from triton_dist_tune.measure import lockstep

        original = lockstep.Measurer._warmup_runs

        def broken(self, index, config, probe_calls):
            if index == 0:
                raise OverflowError("timestamp out of range for platform time_t (a tuner bug, injected)")
            return original(self, index, config, probe_calls)

        lockstep.Measurer._warmup_runs = broken

    # 3 samples a config: the fixed attempt's choice of config 0 (5 ms against 80) must not rest on one sample
    f = tuned(n_warmup=0, n_repeat=3, timing="cold", name="tunerbug")

    result = outcome(f, torch.ones(2))
    emit(result=result, states=states(f.tuner), journals=journals(f.tuner))


@case
def compile_pass_raises():
    """Case 4: the function raises in the compile pass on every rank (it reads outputs the pass never launched:
    a stand-in, since no Triton kernel compiles on these CPU ranks, is the pass's own context, which is set only
    while the pass runs the function). The compile pass is forced on (on a GPU it is the default). Config 0's
    first real run is long (2.6 s: a JIT compile), longer than the board's grace (T/2 = 2 s). Expected: nothing
    is blamed, no rank is ended, the fastest config is chosen."""
    from triton_dist_tune.function import tuning
    from triton_dist_tune.measure import compile_pass

    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    tuning.compiles_here = lambda: True
    ran: dict[int, int] = {}

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, timing="cold", name="passraises")
    def f(x, *, block):
        if compile_pass._active.get() is not None:  # inside the pass: the kernel's output was never written
            raise ValueError("read an output the compile pass never launched (garbage)")
        ran[block] = ran.get(block, 0) + 1
        nap(2600 if ran[block] == 1 and block == 16 else SLEEP_MS[block])
        dist.all_reduce(x.clone())
        return block

    result = outcome(f, torch.ones(2))
    emit(result=result, states=states(f.tuner), journals=journals(f.tuner), again=outcome(f, torch.ones(2)))


@case
def compile_pass_raises_on_one_rank():
    """Case 4, on one rank: rank 1 alone raises in the compile pass of config 0 (block 16, the fastest), before the
    function's all_reduce (a check on an output the pass never launched fails there only; the stand-in for such
    outputs is the pass's own context, as in ``compile_pass_raises``, with the pass forced on outside the
    interpreter). Rank 0 waits in that all_reduce: the first attempt ends (rank 0 leaves the collective by ending,
    rank 1 fails at its next exchange), blaming nothing. A second attempt (same cache folder, new processes) must
    not take config 0's compile pass again (the pass would end it the same way): it warms config 0 up directly,
    measures every config once and chooses block 16 on both ranks. Emits the pass's runs and the other runs by
    block."""
    from triton_dist_tune.function import tuning
    from triton_dist_tune.measure import compile_pass

    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    tuning.compiles_here = lambda: True
    in_pass: dict[int, int] = {}
    ran: dict[int, int] = {}

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, timing="cold", name="passraisesone")
    def f(x, *, block):
        counts = in_pass if compile_pass._active.get() is not None else ran
        counts[block] = counts.get(block, 0) + 1
        if counts is in_pass and block == 16 and rank() == 1:  # the pass's output was never written
            raise ValueError("a check on an output the compile pass never launched failed (rank 1 only)")
        nap(SLEEP_MS[block])
        dist.all_reduce(x.clone())
        return block

    result = outcome(f, torch.ones(2))
    rows = next(iter(f.tuner.tables.values()), [])
    emit(result=result, states=[r["state"] for r in rows], resumed=[r.get("resumed") for r in rows],
         in_pass=in_pass, ran=ran)


@case
def fails_after_collective_in_a_round():
    """Case 5: in steady rounds, rank 1 raises in config 1 (block 32) after the function's all_reduce, in the last
    call of its sample (a sample here is 2 calls: one settling, one timed, ``batch=1`` on the host clock). Rank 1
    leaves the round for its exchange; rank 0 goes on into the next config's sample and waits in its all_reduce.
    The first round's order (seeded by the key and space) is 32, 64, 16, so the config after it is 64, the
    fastest (10 ms a call; 16 takes 120, 32 80). FAIL=0 turns the failure off. The innocent config after it must
    not be blamed: the rerun measures it again and chooses it."""
    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    fail = os.environ.get("FAIL", "1") == "1"
    in_rounds: list[int] = []

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=3, batch=1, name="roundfail")
    def f(x, *, block):
        nap({16: 120, 32: 80, 64: 10}[block])
        dist.all_reduce(x.clone())
        if in_steady_round():
            in_rounds.append(block)
            if fail and block == 32 and rank() == 1 and in_rounds.count(32) % 2 == 0:
                raise RuntimeError("a check after the all_reduce failed (config 32, rank 1)")
        return block

    t0 = time.monotonic()
    result = outcome(f, torch.ones(2))
    emit(result=result, seconds=time.monotonic() - t0, states=states(f.tuner), journals=journals(f.tuner),
         in_rounds=in_rounds)


@case
def timing_differs():
    """Case 8: TRITON_DIST_AUTOTUNE_TIMING differs between the ranks (set per rank by the test)."""
    tdt.init_distributed()

    f = tuned(n_warmup=1, n_repeat=2, name="timingdiffers")

    t0 = time.monotonic()
    result = outcome(f, torch.ones(2))
    emit(result=result, seconds=time.monotonic() - t0)


@case
def malformed_on_one_rank():
    """Case 8: a tuner variable is malformed on one rank only (set per rank by the test, before decorating); a
    function that tunes its keys, one that serves them (``undecided="first"``), and a campaign."""
    tdt.init_distributed()

    for label, options in (("tuned", {}), ("served", {"undecided": "first"}), ("campaign", {})):
        f = tuned(n_warmup=1, n_repeat=2, name=f"malformedonone_{label}", **options)
        t0 = time.monotonic()
        if label == "campaign":
            result = outcome(tdt.campaign, f, lambda n: torch.ones(n), [2, 4], progress=False)
        else:
            result = outcome(f, torch.ones(2))
        emit(case=label, result=result, seconds=time.monotonic() - t0)


@case
def malformed_on_one_rank_contextual():
    """Case 8 for ``contextual_autotune``: the same variable malformed on rank 1 only (set by the test before the
    process starts), a layer of one ``triton.autotune`` kernel decorated and called on both ranks."""
    import triton
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
    @triton.jit
    def copy_kernel(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

    tdt.init_distributed()
    t0 = time.monotonic()

    def decorate_and_call():
        @tdt.contextual_autotune(n_warmup=1, n_repeat=1)
        def layer(x):
            out = torch.empty_like(x)
            copy_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
            dist.all_reduce(out)
            return out

        return layer(torch.ones(64))

    result = outcome(decorate_and_call)
    emit(case="contextual", result=result, seconds=time.monotonic() - t0)


@case
def steps_differ():
    """Case 8: the two ranks make one exchange each, at different steps (rank 1 one step ahead)."""
    from triton_dist_tune.group.resolve import resolve_group

    tdt.init_distributed()
    group = resolve_group(None)
    step = "config 0 warmup 1" if rank() == 0 else "config 0 warmup 2"
    t0 = time.monotonic()
    result = outcome(lambda: group.combine(rank(), step, any, 40))
    after = outcome(lambda: group.allgather(rank(), "the same step", 40))  # the channel still works
    emit(result=result, seconds=time.monotonic() - t0, after=after)


def outsider_store():
    """A client of the job's TCPStore of its own, as any process that reaches the port has (no authentication),
    under the prefixes the tuner's keys have there: ``init_distributed``'s ``attempt<name>/`` (the attempt's name,
    which anyone can read in the store) and torch's default group name (``0``), each joined with a ``/`` by
    ``PrefixStore`` (the keys read ``attempt<name>//0//tdt/...``)."""
    from datetime import timedelta

    from triton_dist_tune.group import epoch

    tcp = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                        timeout=timedelta(seconds=10))
    return dist.PrefixStore("0/", dist.PrefixStore(f"attempt{epoch.current()}/", tcp))


@case
def forged_prune_message():
    """Case 12: before the tuning starts, an outsider writes a well-formed message for rank 1 under the key of the
    prune step (keeping only config 2, the slowest), with the right step label. It must not decide the choice:
    every rank fails with a clear error."""
    from triton_dist_tune.group import codec
    from triton_dist_tune.group.messages import Message, step_print
    from triton_dist_tune.group.resolve import resolve_group

    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    group = resolve_group(None)

    f = tuned(n_warmup=0, n_repeat=2, timing="cold", name="forged")

    if rank() == 1 and os.environ.get("SLOW_READER") == "1":  # a loaded machine: rank 1 reads a result late
        from triton_dist_tune.group.store import StoreGroup

        wait = StoreGroup._wait

        def late(self, keys, what, timeout, missing):
            if "agree on key" in what:
                time.sleep(1.5)  # rank 0 meanwhile reads the forged prune message and goes on
            return wait(self, keys, what, timeout, missing)

        StoreGroup._wait = late
    prune_seq = group._seq + 2  # the agreement, then the prune (before the cache lookup, as in Triton)
    if rank() == 0 and os.environ.get("FORGE", "1") == "1":
        forged = Message(step_print("[forged key=2] prune"), [False, False, True])  # the step's own print
        outsider_store().set(group._key(prune_seq, 1), codec.encode(forged))
    dist.barrier()
    t0 = time.monotonic()
    result = outcome(f, torch.ones(2))
    emit(result=result, seconds=time.monotonic() - t0, cached=[p.read_text() for p in
                                                             Path(f.tuner.cache.folder).glob("*.json")])


@case
def deep_json_on_the_board():
    """Case 12: an outsider posts a deeply nested JSON value on the failure board of the tuning about to start
    (``[`` x 100000: json raises RecursionError). Rank 1's first run is slow (1.5 s after the collective), so
    rank 0 waits at an exchange and reads the board between its waits. The entry must be refused with a clear
    warning; the tuning goes on and ends normally."""
    from triton_dist_tune.group.resolve import resolve_group

    tdt.init_distributed()
    use_virtual_clock()  # (see SLEEP_MS)
    group = resolve_group(None)
    calls: list[int] = []

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, timing="cold", name="deepboard")
    def f(x, *, block):
        calls.append(block)
        dist.all_reduce(x.clone())
        nap(1500 if rank() == 1 and len(calls) == 1 else SLEEP_MS[block])  # after it: rank 0 waits
        return block  # at the exchange that follows, where it reads the board between its waits

    board_seq = group._seq + 3  # agreement, cache lookup, prune: the board is scoped to the sequence number then
    if rank() == 0:
        store = outsider_store()
        scope = f"{group.key('board')}/{board_seq}/"  # StoreGroup.board's scope
        n = store.add(f"{scope}count", 1)
        store.set(f"{scope}{n}", "[" * 100000)
    dist.barrier()
    t0 = time.monotonic()
    result = outcome(f, torch.ones(2))
    emit(result=result, seconds=time.monotonic() - t0, states=states(f.tuner))


@case
def contextual_compile_never_returns():
    """Case 1, contextual: precompiling forced on (under the interpreter, as tests/scenarios/contextual_cases.py's
    ``precompile`` does); the compile (``warmup``) of the second config never returns (a real thread stuck for
    good). One process. The config must fail after its own deadline (T s), the others be measured, and the
    process exit normally."""
    import sys

    from contextual_cases import ADD_BLOCKS, SEQ, add, add_kernel, inputs

    from triton_dist_tune.contextual import compiling as contextual
    from triton_dist_tune.contextual import contextual_autotune

    contextual.compiles = lambda: True
    stuck = threading.Event()

    def compile_hook(_, kwargs):
        if kwargs["BLOCK"] == ADD_BLOCKS[1]:
            stuck.wait()  # never set: this thread never returns

    before_each_compile(add_kernel, compile_hook)

    @contextual_autotune(n_warmup=1, n_repeat=1)
    def f(x, y):
        SEQ.append("run")
        return add(x, y)

    t0 = time.monotonic()
    x, y = inputs()
    out = f(x, y)
    decision = next(iter(f.tuner.decisions.values()))
    emit(ok=bool(torch.equal(out, x + y)), tuned_s=time.monotonic() - t0,
         states=[r["state"] for r in decision["table"]], errors=[r["error"] for r in decision["table"]],
         threads=[t.name for t in threading.enumerate()])
    sys.stdout.flush()
    raise SystemExit(0)  # the interpreter's own exit: it joins every non-daemon thread


@case
def contextual_compiles_queued_behind_a_stuck_one():
    """Case 1, contextual, each config's own deadline: precompiling forced on under the interpreter (one compile
    thread), one process. Of a kernel's four configs, config 0 is launched in the first run; the compile of config
    1 never returns (a real thread stuck for good) and configs 2 and 3, queued behind it, compile in 0.3 s each.
    Only config 1 may fail (``T`` s after its own start); 2 and 3 are compiled by the thread that replaces the
    stuck one, measured, and 2 (the fastest) is chosen."""
    import sys

    from contextual_cases import QUEUED_BY_N, inputs, launch, queued_kernel

    from triton_dist_tune.contextual import compiling as contextual
    from triton_dist_tune.contextual import contextual_autotune

    contextual.compiles = lambda: True
    stuck = threading.Event()
    blocks = [c.kwargs["BLOCK"] for c in queued_kernel.configs]

    def compile_hook(_, kwargs):
        if kwargs["BLOCK"] == blocks[1]:
            stuck.wait()  # never set: this thread never returns
        time.sleep(0.3)  # a compile that takes time: not done at once when its turn to be waited for comes

    before_each_compile(queued_kernel, compile_hook)
    contextual_virtual_clock()  # one sample a config (5 against 80 ms): the pre_hooks spend their sleep there

    @contextual_autotune(n_warmup=1, n_repeat=1)
    def f(x):
        out = torch.empty_like(x)
        launch(queued_kernel, x.numel(), x, out, x.numel())
        return out

    t0 = time.monotonic()
    x, _ = inputs()
    out = f(x)
    decision = next(iter(f.tuner.decisions.values()))
    emit(ok=bool(torch.equal(out, x)), tuned_s=time.monotonic() - t0, chosen=decision["index"],
         fastest=QUEUED_BY_N[64].index(min(QUEUED_BY_N[64])), states=[r["state"] for r in decision["table"]],
         errors=[r["error"] for r in decision["table"]])
    sys.stdout.flush()
    raise SystemExit(0)


@case
def ref_check_set_up_before_the_deadlines():
    """One process, no group: ``ref_prog``'s check compares with torch.testing, whose first use imports DTensor and
    sympy (1.6 s of CPU, 4 s and more on a loaded machine). Reports what was imported from the first config's first
    run (inside its warm-up deadline) to the end of the tuning."""
    import sys

    before_configs: set[str] = set()

    def pre_hook(config, *args, **kwargs):
        if not before_configs:
            before_configs.update(sys.modules)

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), ref_prog=lambda x: x * 2, pre_hook=pre_hook, n_warmup=1,
                  n_repeat=2, name="ref_check")
    def f(x, *, block):
        return x * 2

    out = f(torch.ones(4))
    emit(ok=bool((out == 2).all()), imported=sorted(set(sys.modules) - before_configs))


def leave_normally() -> None:
    """End the process the ordinary way (the interpreter's exit, which joins every non-daemon thread), not with
    ``os._exit`` as :func:`_cases.main` does: a thread the tuner left behind must not keep the process alive."""
    import sys

    sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    raise SystemExit(0)


@case
def precompile_never_returns():
    """Case 1: ``precompile_fn`` never returns for config 0 (a real thread stuck for good): the tuning ends with
    config 0 failed on every rank, the choice is a config that ran (the same on every rank), and the process exits
    normally."""
    started = time.monotonic()
    tdt.init_distributed()
    stuck = threading.Event()

    def precompile(config, x):
        if config["block"] == 16:
            stuck.wait()  # never set: this thread never returns

    f = tuned(n_warmup=0, n_repeat=1, timing="cold", name="stuckcompile", precompile_fn=precompile)

    t0 = time.monotonic()
    result = outcome(f, torch.ones(2))
    rows = next(iter(f.tuner.tables.values()), [])
    emit(result=result, tuned_s=time.monotonic() - t0, states=[r["state"] for r in rows],
         errors=[r.get("error") for r in rows], threads=[t.name for t in threading.enumerate()],
         since_start_s=time.monotonic() - started)
    leave_normally()


if __name__ == "__main__":
    main()
