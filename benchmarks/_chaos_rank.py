"""One rank of a chaos job (``benchmarks/chaos.py``): tune a small function with one fault injected, print the outcome.

Run as ``python _chaos_rank.py`` with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), the tuner's
(TRITON_DIST_AUTOTUNE_TIMEOUT, _CACHE_DIR, _LOG_DIR) and ``CHAOS_PLAN``, the job's plan as JSON
(:func:`chaos.make_plan`). It writes into the job's folder (the working directory):

- ``ready.rank<r>`` once its process group is up (the driver times its faults from every rank's);
- ``fault.json`` when it injects the plan's fault itself (``{"at": unix time, "rank": r, "what": ...}``);
- ``stack.rank<r>``: every thread's stack when the driver sends SIGUSR1 (a job past its hard limit). Not
  ``faulthandler.dump_traceback_later``: the tuner's own backstop arms that one timer of the process, and arming it
  here would move the backstop;

and prints one ``RESULT {json}``: ``{"ok": true, "choices": {key: index}}`` or ``{"ok": false, "error": class,
"library": is it an AutotuneError, "message": text}``. Exit status: 0 for a choice, 3 for an error of the library's,
4 for any other error (then a traceback too). The tuner's watchdog ends a rank with 86 or 87 of its own.

Faults injected here (the plan's ``fault``; ``kill`` and ``stop`` at a random delay are the driver's): at the
``k``-th call of config ``config`` on rank ``rank``, ``kill`` (SIGKILL itself), ``stop`` (SIGSTOP itself: the driver
continues it later, or never), ``raise`` (a RuntimeError before or after the function's all_reduce: ``where``),
``sleep`` (2 T, before the all_reduce); from the ``k``-th call of the key function on, ``key_raise``; from the
``k``-th call of ``prune_fn`` for config ``config`` on, ``prune_raise`` (from then on: the tuner calls a key function
again where its first call failed, so a single failure is no fault). ``fault.json`` says whether a call's fault came
in a call of a decided key (``decided``: the user's own call after the tuning, the tuner no longer involved).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import triton_dist_tune as tdt

PLAN: dict[str, Any] = json.loads(os.environ.get("CHAOS_PLAN", "{}"))
FAULT: dict[str, Any] = PLAN.get("fault", {})
#: ms each config sleeps per call (config 0 fastest; nothing asserts on the order, only on agreement)
SLEEP_MS = [2, 6, 14, 30]
#: calls seen so far on this rank, per (what, config)
CALLS: Counter = Counter()
#: the tuned function and the last key its key function gave (a fault in a call of a decided key is in the user's
#: own call, after the tuning: ``fault.json`` says ``decided``)
WORK: list[Any] = []
LAST_KEY: list[Any] = []


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def inject(what: str, config: int) -> None:
    """Count a call of ``what`` (``call``, ``key``, ``prune``) for ``config`` and inject the plan's fault where it
    is this call: the ``k``-th of that config (any config for ``key``) on the fault's rank."""
    CALLS[(what, config)] += 1
    kind = FAULT.get("kind", "none")
    wanted = {"key_raise": "key", "prune_raise": "prune"}.get(kind, "call")
    if FAULT.get("trigger") != "call" or FAULT.get("rank") != rank() or what != wanted:
        return
    if what != "key" and config != FAULT["config"]:
        return
    persistent = what != "call"  # a key_fn or prune_fn that fails from its k-th call on (the tuner retries them)
    if CALLS[(what, config)] < FAULT["k"] or (not persistent and CALLS[(what, config)] > FAULT["k"]):
        return
    if not Path("fault.json").exists():
        decided = what == "call" and WORK and LAST_KEY and LAST_KEY[-1] in WORK[-1].tuner.decided
        Path("fault.json.tmp").write_text(json.dumps({"at": time.time(), "rank": rank(), "what": kind,
                                                      "config": config, "k": FAULT["k"], "decided": bool(decided)}))
        os.replace("fault.json.tmp", "fault.json")
    elif not persistent:
        return
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif kind == "sleep":
        time.sleep(2 * float(os.environ["TRITON_DIST_AUTOTUNE_TIMEOUT"]))
    else:
        raise RuntimeError(f"chaos: {kind} injected on rank {rank()} at config {config}, call {FAULT['k']}")


def collective(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    if PLAN.get("collective"):
        dist.all_reduce(y)
    return y


def key_of(x: torch.Tensor, **_: Any) -> tuple:
    inject("key", -1)
    LAST_KEY[:] = [(x.numel(),)]
    return (x.numel(),)


def keep(config: dict[str, int], x: torch.Tensor, **_: Any) -> bool:
    inject("prune", config["v"])
    return True


def make_work():
    """The function ``autotune`` tunes: a sleep per config and, in a collective plan, a gloo all_reduce."""
    options: dict[str, Any] = {"n_warmup": 1, "n_repeat": 2, "timing": "cold", "name": "chaos"}
    if PLAN.get("prune"):
        options["prune_fn"] = keep

    @tdt.autotune(config_space=[{"v": v} for v in range(PLAN["configs"])], key_fn=key_of, **options)
    def work(x: torch.Tensor, *, v: int) -> torch.Tensor:
        before = FAULT.get("where", "before") == "before"
        if before:
            inject("call", v)
        time.sleep(SLEEP_MS[v] / 1e3)
        y = collective(x * (v + 1))
        if not before:
            inject("call", v)
        return y

    return work


def tune_function() -> dict[str, int]:
    work = make_work()
    WORK.append(work)
    if PLAN["mode"] == "campaign":
        summary = tdt.campaign(work, lambda n: torch.ones(n), PLAN["keys"], progress=False)
        return {str(k): v for k, v in sorted(summary.choices.items())} | {
            f"failed {r.key}": -1 for r in summary.failed}
    for n in PLAN["keys"]:
        work(torch.ones(n))
    return {str(k): cfg["v"] for k, cfg in sorted(work.tuner.decided.items(), key=lambda kv: str(kv[0]))}


def tune_contextual() -> dict[str, int]:
    """``contextual_autotune`` around a ``triton.autotune`` kernel (one config per block size) and, in a collective
    plan, an all_reduce; each config's pre_hook sleeps and injects the fault (a call = a launch of the config)."""
    import triton
    import triton.language as tl

    def hook_of(index: int):
        def hook(nargs: dict) -> None:
            inject("call", index)
            time.sleep(SLEEP_MS[index] / 1e3)

        return hook

    @triton.autotune(configs=[triton.Config({"BLOCK": 16 << i}, pre_hook=hook_of(i)) for i in range(PLAN["configs"])],
                     key=["n"])
    @triton.jit
    def copy_kernel(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)

    @tdt.contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def layer(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        copy_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return collective(out)

    for n in PLAN["keys"]:
        layer(torch.ones(n))
    return {str(k): d["index"] for k, d in sorted(layer.tuner.decisions.items(), key=lambda kv: str(kv[0]))}


def main() -> int:
    stacks = open(f"stack.rank{os.environ['RANK']}", "w")  # noqa: SIM115 (open for the process's life)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    tdt.init_distributed()
    Path(f"ready.rank{rank()}").write_text(repr(time.time()))
    try:
        choices = tune_contextual() if PLAN["mode"] == "contextual" else tune_function()
    except tdt.AutotuneError as exc:
        print("RESULT " + json.dumps({"ok": False, "error": type(exc).__name__, "library": True,
                                      "message": str(exc), "at": time.time()}), flush=True)
        return 3
    except Exception as exc:  # noqa: BLE001 (what escapes the library is what the chaos run looks for)
        traceback.print_exc()
        print("RESULT " + json.dumps({"ok": False, "error": type(exc).__name__, "library": False,
                                      "message": str(exc), "at": time.time()}), flush=True)
        return 4
    print("RESULT " + json.dumps({"ok": True, "choices": choices, "at": time.time()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
