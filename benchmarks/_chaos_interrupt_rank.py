"""One rank of an interruption chaos job (``benchmarks/_chaos_interrupt.py``): a program of calls of two tuned
functions, one or two ranks interrupted at a random moment of a call, the interruption caught, the program going on.

Run with torchrun's variables, the tuner's and ``CHAOS_PLAN`` (:func:`_chaos_interrupt.make_plan`), in the job's
folder. The plan's ``steps`` are the program's calls, ``["auto", n]`` (an ``autotune`` function keyed by ``n``) or
``["ctx", n]`` (a ``contextual_autotune`` function around a ``triton.autotune`` kernel keyed by ``n``); its
``leavers`` say which ranks are interrupted, how (``sig``: ``INT``, Ctrl-C's ``KeyboardInterrupt`` by
``signal.default_int_handler``; ``TERM``, a handler's ``SystemExit``; ``CANCEL``, a handler's
``asyncio.CancelledError``, sent as SIGUSR2) and when: a thread of the rank waits for the plan's call ``call`` to
begin, then for ``delay`` s (``trigger: delay``) or for the ``k``-th exchange on the group counted from that call's
start (``trigger: exchange``; ``sent``: and this rank's part of it written, so the signal comes in the wait for its
result) plus ``jitter`` s, and signals the main thread; ``trigger: write`` raises it from the channel's store write
of the rank's part of that exchange, as the write returns (:func:`arm_write`). The handler raises only inside
the library's call, a user callable it calls included (:func:`in_library`); a signal handled elsewhere, between
calls or in the program's own line around one, is sent again: raised there, the program would skip the call of
its own doing. The program catches the interruption, sleeps ``after`` s and goes on. A hand-made plan's
``pauses`` (``{rank: {call: s}}``) has a rank sleep before a call (a narrowed case: a late peer).

Writes ``ready.rank<r>`` once its group is up, ``stack.rank<r>`` on SIGUSR1 (the driver's hard limit), and prints
one ``RESULT {json}`` per call (``i``, ``outcome``: ``ok``, ``interrupted``, ``lib`` (an ``AutotuneError``) or
``other``; ``error``, ``message``, ``seconds`` the call took, ``ran``: the configs the function ran in the call,
``decided``: each function's decisions after it, ``signalled``: the handler raised in this call, ``frames``: where
the interruption was raised, innermost last), then, once every rank's program is over (:func:`all_done`), ``END
{json}``. Exit status 0 (4 where the program itself failed).
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import torch

import triton_dist_tune as tdt

PLAN: dict[str, Any] = json.loads(os.environ.get("CHAOS_PLAN", "{}"))
SLEEP_MS = [2, 6, 14, 30]
RAN: list[int] = []  #: configs run in the current call
STATE: dict[str, Any] = {"in_call": False, "call": -1, "handled": 0, "raised_in": None}
BEGAN: dict[int, tuple[float, int]] = {}  #: call -> (its wall start, the group's exchanges then)
INTERRUPTIONS = (KeyboardInterrupt, SystemExit, asyncio.CancelledError)


LIBRARY = os.path.dirname(os.path.abspath(tdt.__file__)) + os.sep


def in_library(frame: Any) -> bool:
    """Whether ``frame`` or one of its callers runs the library's code (a user callable it called included)."""
    while frame is not None:
        if os.path.abspath(frame.f_code.co_filename).startswith(LIBRARY):
            return True
        frame = frame.f_back
    return False


def on_signal(signum: int, frame: Any) -> None:
    """Raise the interruption of ``signum`` where the main thread is inside the library's call; else drop it (sent
    again): one handled in the program's own line around the call (before it enters the library or once it
    returned) would have the program skip a call of its own doing, not the library's."""
    STATE["handled"] += 1
    if not STATE["in_call"] or not in_library(frame):
        return
    STATE["raised_in"] = STATE["call"]
    if signum == signal.SIGINT:
        signal.default_int_handler(signum, frame)
    if signum == signal.SIGTERM:
        raise SystemExit(128 + signum)
    raise asyncio.CancelledError()


SIGNALS = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "CANCEL": signal.SIGUSR2}


def interrupter(spec: dict[str, Any], group: Any, main: int) -> None:
    """Wait for ``spec``'s moment, then signal the main thread until a call of it raised the interruption."""
    while STATE["call"] < spec["call"]:
        time.sleep(0.003)
    started, began = BEGAN[spec["call"]]
    if spec["trigger"] == "delay":
        time.sleep(max(0.0, started + spec["delay"] - time.time()))
    else:
        while not (group.exchanges() >= began + spec["k"]
                   and (not spec["sent"] or group._sent == group.exchanges())):
            if STATE["call"] >= len(PLAN["steps"]):
                return
            time.sleep(0.002)
        time.sleep(spec["jitter"])
    while STATE["raised_in"] is None and STATE["call"] < len(PLAN["steps"]):
        if not STATE["in_call"]:
            time.sleep(0.002)
            continue
        handled = STATE["handled"]
        signal.pthread_kill(main, SIGNALS[spec["sig"]])
        while STATE["handled"] == handled and STATE["call"] < len(PLAN["steps"]):
            time.sleep(0.002)


def arm_write(spec: dict[str, Any], group: Any) -> None:
    """``trigger: write``: the signal comes right after this rank's message of the ``k``-th exchange (from call
    ``call``'s start) is in the store, before the channel counts it written (a signal that came during the store's
    write: Python runs its handler as the write returns), ``hold`` s after the write (the handler's delay)."""
    write = group._write_new

    def written(seq: int, slot: Any, payload: bytes, what: str) -> None:
        write(seq, slot, payload, what)
        if STATE["raised_in"] is None and STATE["in_call"] and STATE["call"] >= spec["call"] \
                and seq >= BEGAN[spec["call"]][1] + spec["k"]:
            time.sleep(spec.get("hold", 0.0))
            signal.raise_signal(SIGNALS[spec["sig"]])

    group._write_new = written


def make_functions(me: int) -> dict[str, Any]:
    from _chaos_kernel import tuned_copy

    def key_of(x: torch.Tensor, **_: Any) -> tuple:
        return (x.numel(),)

    @tdt.autotune(config_space=[{"v": v} for v in range(PLAN["configs"])], key_fn=key_of,
                  n_warmup=1, n_repeat=2, timing="cold", name="chaos_interrupt")
    def work(x: torch.Tensor, *, v: int) -> torch.Tensor:
        RAN.append(v)
        time.sleep(SLEEP_MS[v] / 1e3)
        return x * (v + 1)

    copy = tuned_copy(PLAN["configs"], RAN.append, SLEEP_MS)

    @tdt.contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2, sync_every=PLAN.get("sync_every"))
    def layer(x: torch.Tensor) -> torch.Tensor:
        return copy(x)

    return {"auto": work, "ctx": layer}


def decided(functions: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {"auto": {str(k[0]): c["v"] for k, c in functions["auto"].tuner.decided.items()},
            "ctx": {str(k): d["index"] for k, d in functions["ctx"].tuner.decisions.items()}}


def frames(exc: BaseException) -> list[str]:
    return [f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.name}:{f.lineno}"
            for f in traceback.extract_tb(exc.__traceback__)]


def call(functions: dict[str, Any], i: int, step: list[Any], group: Any) -> dict[str, Any]:
    """Call step ``i`` of the program; what came of it."""
    fn, n = step
    said: dict[str, Any] = {"i": i, "step": step}
    RAN.clear()
    BEGAN[i] = (time.time(), group.exchanges())
    STATE["call"] = i
    t0 = time.monotonic()
    try:
        STATE["in_call"] = True
        try:
            functions[fn](torch.ones(n))
        finally:
            STATE["in_call"] = False
        said.update(outcome="ok")
    except INTERRUPTIONS as exc:
        said.update(outcome="interrupted", error=type(exc).__name__, frames=frames(exc))
    except tdt.AutotuneError as exc:
        said.update(outcome="lib", error=type(exc).__name__, message=str(exc)[:1500])
    except Exception as exc:  # noqa: BLE001 (what escapes the library is what the chaos run looks for)
        traceback.print_exc()
        said.update(outcome="other", error=type(exc).__name__, message=str(exc)[:1500])
    said.update(seconds=round(time.monotonic() - t0, 3), ran=list(RAN), decided=decided(functions),
                exchanges=group.exchanges() - BEGAN[i][1], signalled=STATE["raised_in"] == i, at=time.time())
    return said


def main() -> int:
    me = int(os.environ["RANK"])
    stacks = open(f"stack.rank{me}", "w")  # noqa: SIM115 (open for the process's life)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    for sig in SIGNALS.values():
        signal.signal(sig, on_signal)
    tdt.init_distributed()
    from triton_dist_tune.group.resolve import resolve_group

    group = resolve_group(None)
    functions = make_functions(me)
    Path(f"ready.rank{me}").write_text(json.dumps({"at": time.time(), "pid": os.getpid()}))
    for spec in [s for s in PLAN["leavers"] if s["rank"] == me and s["trigger"] == "write"]:
        arm_write(spec, group)
    for spec in [s for s in PLAN["leavers"] if s["rank"] == me and s["trigger"] != "write"]:
        threading.Thread(target=interrupter, args=(spec, group, threading.main_thread().ident), daemon=True).start()
    after = sum(s["after"] for s in PLAN["leavers"] if s["rank"] == me)  # (one spec a rank)
    pauses = {int(i): s for i, s in PLAN.get("pauses", {}).get(str(me), {}).items()}
    try:
        for i, step in enumerate(PLAN["steps"]):
            time.sleep(pauses.get(i, 0.0))
            said = call(functions, i, step, group)
            print("RESULT " + json.dumps(said), flush=True)
            if said["outcome"] == "interrupted":
                time.sleep(after)
    except BaseException as exc:  # noqa: BLE001 (the program must end: anything here is the script's own failure)
        traceback.print_exc()
        print("END " + json.dumps({"ok": False, "error": type(exc).__name__}), flush=True)
        return 4
    finally:
        STATE["call"] = len(PLAN["steps"])
    print("END " + json.dumps({"ok": True, "at": time.time(), "all_done": all_done()}), flush=True)
    return 0


def all_done(seconds: float = 60.0) -> bool:
    """Wait (at most ``seconds``) for every rank's program to be over, so that rank 0's process, the store's host,
    outlives its peers' calls, as a program that ends with a barrier does (an ended host is the mixed mode's fault)."""
    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    store.add("chaos_interrupt/done", 1)
    deadline = time.time() + seconds
    while int(store.add("chaos_interrupt/done", 0)) < dist.get_world_size():
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


if __name__ == "__main__":
    sys.exit(main())
