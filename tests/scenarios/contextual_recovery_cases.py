"""Contextual resume (issue 17) run as real ranks by tests/test_contextual_recovery.py: every resume decision of
``contextual_autotune`` comes from the journals every rank gathered, and two groups never touch each other's.

Each config's ``pre_hook`` appends ``<ATTEMPT> <config>`` to ``$FAULT_DIR/calls.rank<r>`` (the launches as each
rank made them) and sleeps [5, 80, 400] ms, the same on every rank: config 0 wins when it is measured (blocks of
128 or more: one program per config, so the interpreter costs every config the same).

- ``killed``: attempt 0 warms config 0 up in run 0; in run 1 rank 0 launches config 1 and is sent SIGTERM, while
  rank 1 is SIGKILLed before its launch: the journals end inside different configs (1 on rank 0, 0 on rank 1).
  Attempt 1 resumes from them.
- ``cancelled``: in run 2 (config 1 launched) rank 1's function raises ``asyncio.CancelledError`` (a cancelled
  task: a ``BaseException`` that is no ``Exception``); it is journaled ``interrupted``, as Ctrl-C is.
- ``left_waiting``: in run 2 rank 1's function is cancelled (``ERROR=cancel``) or raises (``ERROR=raise``) after its
  launch of config 1 and before the all_reduce, and rank 1 stays alive; rank 0 waits in the all_reduce.
- ``raised_after_the_collective``: in run 2 rank 1 raises after the all_reduce, and rank 0 goes on with other
  work (a sleep) for longer than the watchdog's grace after a peer's report.
- ``raised_in_the_final_run``: rank 1 raises before the all_reduce in the tuning call's final run (every key
  decided); rank 0 waits in the all_reduce.
- ``busy_in_a_subgroup`` (3 ranks): in run 2 rank 1 raises after the world all_reduce; ranks 0 and 2 go on with
  all_reduces on the subgroup [0, 2], rank 2 computing 0.2 s before each (rank 0 waits on rank 2, never on rank 1).
- ``slow_final_run``: no rank fails; the tuning call's final run takes ``SLOW`` s (longer than the timeout).
- ``stopped``: in run 2 rank 1 writes its pid after its launch of config 1; the test stops it there (SIGSTOP) and
  continues it; it goes on 1.5 s later; rank 0 waits in the all_reduce.
- ``restarted`` (under ``torchrun --max-restarts``): in run 2 of each attempt listed in ``KILL_ATTEMPTS``, rank 1
  waits before its launch until rank 0 has launched config 1 (a file rank 0 writes after its launch: a fixed 1.5 s
  once stood in for it, which a loaded rank 0 could outlast), writes the time to ``$FAULT_DIR/killed.attempt<n>``,
  then is SIGKILLed; rank 0 goes on to the exchange that ends the run, where torchrun's SIGTERM reaches it
  (``KILL_RANKS`` may name rank 0 instead: then the roles swap). The waiting rank reports how long its call lasted
  (``seconds``) and when it ended (``ended``, the same clock as the file's).
- ``two_groups``: 4 ranks, groups A = [2, 3] and B = [0, 1] tune the same kernel and key. Config 1 raises on
  A's ranks (journaled failed), then A's ranks are SIGKILLed inside config 2; only then B tunes.
- ``closing_read_back``: 3 configs on the virtual clock (:func:`closing_ms`), ``n_repeat=3``: config 2 leaves the
  screening, 0 and 1 race 4 closing rounds. With ``KILL_AT_DECISION``, Triton's autotuning listener (called once
  the race has ended and its outcomes are journaled, before the journal is removed) prints the choice and, once
  both ranks are there (a file each in ``FAULT_DIR``), SIGKILLs the rank; the next attempt reads every config back
  from the journals and chooses.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import asyncio  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, contextual_virtual_clock, emit, main, spend, stopped_then_on, waited_for  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune  # noqa: E402

#: ms per config (16x and 5x apart): each config is timed once (``n_repeat=1``), so the layer times its launches on the
#: virtual clock, which each launch advances by these (on the wall clock 1.5x closed once in CI, and one sample
#: of 5 against 80 ms is no safer: a loaded run chose an 80 ms loser over a 5 ms winner in another scenario)
SLEEP_MS = [5, 80, 400]


def faults() -> Path:
    return Path(os.environ["FAULT_DIR"])


def recording_hook(index: int):
    def hook(nargs):
        me = dist.get_rank()
        with open(faults() / f"calls.rank{me}", "a") as f:
            f.write(f"{os.environ.get('ATTEMPT', '0')} {index}\n")
        if index == 1 and me >= 2:
            raise RuntimeError("config 1 fails on group A")
        time.sleep(SLEEP_MS[index] / 1e3)
        spend(SLEEP_MS[index])

    return hook


@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=recording_hook(i))
                          for i, b in enumerate((128, 256, 512))],
                 key=["n"])
@triton.jit
def copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def layer_on(group, before=None, after=None):
    """The tuned layer: the kernel, then an all_reduce over ``group``; ``before``/``after`` run around the launch
    with the run's number (1, 2, ...). Launches are timed on the virtual clock (see SLEEP_MS)."""
    contextual_virtual_clock()
    runs = [0]

    @contextual_autotune(is_dist=group if group is not None else True, n_warmup=1, n_repeat=1)
    def layer(x):
        runs[0] += 1
        out = torch.empty_like(x)
        if before:
            before(runs[0])
        copy_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        if after:
            after(runs[0])
        dist.all_reduce(out, group=group)
        return out

    return layer


def layer_after_collective(after):
    """The tuned layer of :func:`layer_on`, with ``after`` run after the world all_reduce (with the run's number
    and the input)."""
    contextual_virtual_clock()
    runs = [0]

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=1)
    def layer(x):
        runs[0] += 1
        out = torch.empty_like(x)
        copy_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        dist.all_reduce(out)
        after(runs[0], x)
        return out

    return layer


def outcome(layer, out, x, size) -> dict:
    decision = next(iter(layer.tuner.decisions.values()))
    return {"rank": dist.get_rank(), "chosen": decision["index"], "states": [r["state"] for r in decision["table"]],
            "errors": [r["error"] for r in decision["table"]], "ok": bool(torch.equal(out, size * x))}


@case
def killed():
    tdt.init_distributed()
    me, first = dist.get_rank(), os.environ["ATTEMPT"] == "0"

    def before(run):
        if first and run == 2 and me == 1:
            os.kill(os.getpid(), signal.SIGKILL)

    def after(run):
        if first and run == 2 and me == 0:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)  # SIGTERM ends the tuning (journaled as interrupted) before this ends

    layer = layer_on(None, before, after)
    x = torch.arange(64, dtype=torch.float32)
    emit(**outcome(layer, layer(x), x, 2))


def _failing_in_run_2(error: Callable[[], BaseException]) -> None:
    """The layer on the default group, rank 1 raising ``error()`` in run 2, after its launch of config 1 and before
    the all_reduce."""
    tdt.init_distributed()
    me = dist.get_rank()

    def after(run):
        if run == 2 and me == 1:
            raise error()

    layer_on(None, after=after)(torch.arange(64, dtype=torch.float32))


@case
def cancelled():
    try:
        _failing_in_run_2(asyncio.CancelledError)
    except asyncio.CancelledError:
        emit(rank=dist.get_rank(), cancelled=True)
        os._exit(0)  # the other rank waits for this one's next exchange: nothing more to say to it


@case
def left_waiting():
    errors = {"cancel": asyncio.CancelledError, "raise": lambda: RuntimeError("rank 1's own error")}
    try:
        _failing_in_run_2(errors[os.environ["ERROR"]])
    except BaseException as exc:
        emit(rank=dist.get_rank(), error=type(exc).__name__)
    if dist.get_rank() == 1:
        time.sleep(120)  # alive: rank 0's watchdog, not a closed connection, ends its wait in the all_reduce


@case
def raised_after_the_collective():
    """In run 2 rank 1 raises its own error after the all_reduce; rank 0, not waiting for it, goes on with other
    work for longer than the watchdog's grace (7 s: a sleep, then one more launch) before its run ends."""
    tdt.init_distributed()
    me = dist.get_rank()

    def after(run, x):
        if run == 2 and me == 1:
            raise RuntimeError("rank 1's own error after the collective")
        if run == 2:
            time.sleep(7)
            copy_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, torch.empty_like(x), x.numel())

    try:
        layer_after_collective(after)(torch.arange(64, dtype=torch.float32))
    except Exception as exc:
        emit(rank=me, error=type(exc).__name__, text=str(exc))


@case
def raised_in_the_final_run():
    """In the final run of the tuning call (every key decided), rank 1 raises its own error before the all_reduce;
    rank 0 waits in the all_reduce."""
    from triton_dist_tune.contextual import intercept

    tdt.init_distributed()
    me = dist.get_rank()

    def after(run):
        session = intercept._ACTIVE.get()
        if me == 1 and session is not None and session.final_run:
            raise RuntimeError("rank 1's own error in the final run")

    try:  # (rank 1 raises only once rank 0 has ended, or after T + T/10: alive till then)
        layer_on(None, after=after)(torch.arange(64, dtype=torch.float32))
    except Exception as exc:
        emit(rank=me, error=type(exc).__name__, text=str(exc))


@case
def busy_in_a_subgroup():
    """3 ranks: in run 2 rank 1 raises its own error after the world all_reduce; ranks 0 and 2 then make 40
    all_reduces on the subgroup [0, 2], rank 2 computing 0.2 s before each: rank 0 waits inside collectives for
    longer than the watchdog's grace, on rank 2, a healthy peer, never on rank 1."""
    tdt.init_distributed()
    me, sub = dist.get_rank(), dist.new_group([0, 2])

    def after(run, x):
        if run == 2 and me == 1:
            raise RuntimeError("rank 1's own error after the world all_reduce")
        if run == 2:
            for _ in range(40):
                if me == 2:
                    time.sleep(0.2)
                dist.all_reduce(torch.ones(4), group=sub)

    try:
        layer_after_collective(after)(torch.arange(64, dtype=torch.float32))
    except Exception as exc:
        emit(rank=me, error=type(exc).__name__, text=str(exc))


@case
def slow_final_run():
    """No rank fails: the tuning call's final run (every key decided) takes ``SLOW`` s, longer than the timeout."""
    from triton_dist_tune.contextual import intercept

    tdt.init_distributed()

    def after(run):
        session = intercept._ACTIVE.get()
        if session is not None and session.final_run:
            time.sleep(float(os.environ["SLOW"]))

    out = layer_on(None, after=after)(torch.arange(64, dtype=torch.float32))
    emit(rank=dist.get_rank(), ok=bool(torch.equal(out, dist.get_world_size() * torch.arange(64.0))))


@case
def stopped():
    """In run 2, after its launch of config 1 and before the all_reduce, rank 1 writes its pid to
    ``$FAULT_DIR/stop-me.rank1`` (the test stops it there, SIGSTOP, and continues it) and goes on 1.5 s after it is
    continued (``_cases.stopped_then_on``); rank 0 waits in the all_reduce."""
    tdt.init_distributed()
    me = dist.get_rank()

    def after(run):
        if run == 2 and me == 1 and os.environ["ATTEMPT"] == "0":
            stopped_then_on(faults() / "stop-me.rank1")

    layer = layer_on(None, after=after)
    x = torch.arange(64, dtype=torch.float32)
    emit(**outcome(layer, layer(x), x, 2))


@case
def left_waiting_in_a_hot_call_turned_tuning():
    """Call 1 tunes 64 elements; call 2, hot, meets 128 on every rank and goes on as a tuning call; in its second run
    rank 1 raises its own error after its launch and before the all_reduce, and stays alive (as left_waiting, in a
    call that began hot)."""
    tdt.init_distributed()
    me = dist.get_rank()
    call, start = [0], [0]

    def after(run):
        if call[0] == 2 and not start[0]:
            start[0] = run
        elif call[0] == 2 and run == start[0] + 1 and me == 1:
            raise RuntimeError("rank 1's own error")

    layer = layer_on(None, after=after)
    try:
        for n in (64, 128):
            call[0] += 1
            layer(torch.arange(n, dtype=torch.float32))
    except BaseException as exc:
        emit(rank=me, error=type(exc).__name__)
    if me == 1:
        time.sleep(120)  # alive: rank 0's watchdog, not a closed connection, ends its wait in the all_reduce


@case
def restarted():
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    os.environ["ATTEMPT"] = attempt  # the launches' lines name the attempt
    tdt.init_distributed()
    me = dist.get_rank()

    attempts = os.environ.get("KILL_ATTEMPTS", "").split(",")
    ranks = os.environ.get("KILL_RANKS", ",".join("1" * len(attempts))).split(",")  # one per attempt killed in
    killed = dict(zip(attempts, ranks, strict=True))

    def launched(rank: int) -> Path:
        return faults() / f"launched.attempt{attempt}.rank{rank}"

    def before(run):
        if run == 2 and killed.get(attempt) == str(me):
            waited_for([launched(1 - me)])  # the other rank has launched config 1: next, the exchange ending the run
            (faults() / f"killed.attempt{attempt}").write_text(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)

    def after(run):
        if run == 2 and killed.get(attempt) == str(1 - me):
            launched(me).touch()

    layer = layer_on(None, before, after)
    x = torch.arange(64, dtype=torch.float32)
    started = time.monotonic()
    try:
        out = layer(x)
    except BaseException as exc:  # torchrun's SIGTERM: SystemExit(143)
        emit(rank=me, attempt=attempt, error=type(exc).__name__, seconds=time.monotonic() - started, ended=time.time())
        raise
    emit(attempt=attempt, **outcome(layer, out, x, 2))


@case
def two_groups():
    tdt.init_distributed()
    me = dist.get_rank()
    a, b = dist.new_group([2, 3]), dist.new_group([0, 1])
    x = torch.arange(64, dtype=torch.float32)
    if me >= 2:
        def after(run):
            if run == 3:  # config 2's warm-up, after config 1 failed here
                (faults() / f"dying.rank{me}").write_text("")
                os.kill(os.getpid(), signal.SIGKILL)

        layer_on(a, after=after)(x)
        return
    deadline = time.monotonic() + 60
    while not all((faults() / f"dying.rank{r}").exists() for r in (2, 3)) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the SIGKILLs land right after the markers
    layer = layer_on(b)
    out = layer(x)
    emit(**outcome(layer, out, x, 2))
    dist.barrier(group=b)
    os._exit(0)  # group A is gone: no barrier on the whole job


#: ``closing_read_back``'s times (ms, the virtual clock's): the screening's per config, then the closing rounds' per
#: config, at the machine's speed of each closing round (half, then twice the screening's: a drift between rounds)
SCREENING_MS, CLOSING_MS, CLOSING_DRIFT = (1.0, 1.005, 2.0), (1.1, 1.0, 2.0), (0.5, 0.5, 2.0, 2.0)
CLOSING_HOOK: list[Callable[[int], None]] = [lambda index: None]


def closing_ms(index: int, sample: int) -> float:
    """Config ``index``'s time at its ``sample``-th launch (0: the warm-up, 1-3: the screening, then closing)."""
    if sample <= len(SCREENING_MS):
        return SCREENING_MS[index]
    return CLOSING_MS[index] * CLOSING_DRIFT[min(sample - 4, len(CLOSING_DRIFT) - 1)]


@triton.autotune(configs=[triton.Config({"BLOCK": 64, "V": v}, pre_hook=lambda nargs, v=v: CLOSING_HOOK[0](v))
                          for v in range(3)], key=["n"])
@triton.jit
def closing_kernel(x, out, n, V: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


@case
def closing_read_back():
    tdt.init_distributed(backend="gloo")
    contextual_virtual_clock()
    launches: list[int] = []

    def hook(index: int) -> None:
        launches.append(index)
        spend(closing_ms(index, launches.count(index) - 1))

    CLOSING_HOOK[0] = hook
    if os.environ.get("KILL_AT_DECISION"):
        from triton import knobs

        def listener(best_config, configs_timings, **_):
            emit(chosen=best_config.kwargs["V"], times={c.kwargs["V"]: t[0] for c, t in configs_timings.items()})
            (faults() / f"decided.rank{dist.get_rank()}").write_text("")
            deadline = time.monotonic() + 30  # both ranks past the run's exchange: neither loses the store in it
            while not all((faults() / f"decided.rank{r}").exists() for r in (0, 1)) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)

        knobs.autotuning.listener = listener

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3, timeout=30)
    def layer(x):
        out = torch.empty_like(x)
        closing_kernel[(1,)](x, out, x.numel())
        dist.all_reduce(out)
        return out

    x = torch.arange(64, dtype=torch.float32)
    out = layer(x)
    ((_, decision),) = layer.tuner.decisions.items()
    emit(chosen=decision["index"], how=decision["how"], times={r["index"]: r["time"] for r in decision["table"]},
         states=[r["state"] for r in decision["table"]], launches=launches, ok=bool(torch.equal(out, 2 * x)))


if __name__ == "__main__":
    main()
