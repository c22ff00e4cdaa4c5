"""One rank of a chaos job (``benchmarks/chaos.py``): tune a small function with one fault injected, print the outcome.

Run as ``python _chaos_rank.py`` with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or under
``mpiexec`` for a plan whose ``launcher`` is ``mpi`` (then the tuner's group is mpi4py's ``COMM_WORLD``, no
torch.distributed: ``autotune_pg=``, ``campaign(pg=)``, ``contextual_autotune(is_dist=)``, and the tuned function's
collective is mpi4py's ``allreduce``, which keeps the GIL while it waits), the tuner's variables
(TRITON_DIST_AUTOTUNE_TIMEOUT, _CACHE_DIR, _LOG_DIR) and ``CHAOS_PLAN``, the job's plan as JSON
(:func:`chaos.make_plan`). It writes into the job's folder (the working directory):

- ``ready.rank<r>`` once its process group is up (``{"at": unix time, "pid": its pid}``: the driver times its faults
  from every rank's; under mpiexec its ranks are not the driver's children, so it signals them by that pid);
- under mpiexec: ``out.rank<r>`` and ``err.rank<r>`` (its stdout and stderr; the driver opens them for torchrun's
  ranks), and ``exit.rank<r>``, the status the tuner's watchdog gave ``os._exit`` (mpiexec says one status for the
  whole job; a normal end's status is its RESULT's);
- ``fault.json`` when it injects the plan's fault itself (``{"at": unix time, "rank": r, "what": ...}``);
- ``stack.rank<r>``: every thread's stack when the driver sends SIGUSR1 (a job past its hard limit). Not
  ``faulthandler.dump_traceback_later``: the tuner's own backstop arms that one timer of the process, and arming it
  here would move the backstop;

and prints one ``RESULT {json}``: ``{"ok": true, "choices": {key: index}}`` or ``{"ok": false, "error": class,
"library": is it an AutotuneError, "message": text}`` (an error not the library's also says ``user_call``: whether
it is the very exception the tuned function's body raised in a call of a key decided on this rank when the call
began, the user's own call after the tuning, passed on unchanged; so a survivor of a peer's death that the driver
timed, not the rank, is judged by where its own error came from). Exit status: 0 for a choice, 3 for an error of the
library's, 4 for any other error (then a traceback too). The tuner's watchdog ends a rank with 86 or 87 of its own.

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

#: the tuner's group under mpiexec (mpi4py's COMM_WORLD), empty under torchrun's variables (the default group)
COMM: list[Any] = []
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
#: the errors the tuned function's body raised in a call of a key decided on this rank when the call began (the
#: user's own call after the tuning): the error that ends the rank is said to come from there (``RESULT``'s
#: ``user_call``) only where it is one of these very objects, passed on unchanged
USER_CALL_ERRORS: list[BaseException] = []


def rank() -> int:
    if COMM:
        return COMM[0].Get_rank()
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def group(option: str = "autotune_pg") -> dict[str, Any]:
    """The group ``option`` of a call: none (the default group), or the communicator under mpiexec."""
    return {option: COMM[0]} if COMM else {}


def decisions() -> dict[Any, dict[str, int]]:
    """The tuned function's decisions by key: the default group's or, under mpiexec, the communicator's (the
    tuner keeps a group's by its identity and the key)."""
    tuner = WORK[-1].tuner
    return {slot[-1]: config for slot, config in tuner.decided_in.items()} if COMM else tuner.decided


def decided_key() -> bool:
    """Whether the key of this rank's call of the tuned function in progress (the last its key function gave) is
    decided on this rank: a call of it is the user's own, after the tuning (``autotune`` only: a campaign's calls are
    all the library's, and a contextual function has no key function here)."""
    return PLAN.get("mode") == "autotune" and bool(WORK and LAST_KEY) and LAST_KEY[-1] in decisions()


def say(name: str, what: Any) -> None:
    """Write ``what`` as JSON into the file ``name``, whole (the driver reads it while the rank runs)."""
    Path(name + ".tmp").write_text(json.dumps(what))
    os.replace(name + ".tmp", name)


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
        say("fault.json", {"at": time.time(), "rank": rank(), "what": kind, "config": config, "k": FAULT["k"],
                           "decided": what == "call" and decided_key()})
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
    if PLAN.get("collective") and COMM:
        return torch.from_numpy(COMM[0].allreduce(y.numpy()))
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
        users = decided_key()  # the user's own call of a decided key (the chosen config's run after the tuning)
        try:
            before = FAULT.get("where", "before") == "before"
            if before:
                inject("call", v)
            time.sleep(SLEEP_MS[v] / 1e3)
            y = collective(x * (v + 1))
            if not before:
                inject("call", v)
        except Exception as exc:
            if users:
                USER_CALL_ERRORS.append(exc)
            raise
        return y

    return work


def tune_function() -> dict[str, int]:
    work = make_work()
    WORK.append(work)
    if PLAN["mode"] == "campaign":
        summary = tdt.campaign(work, lambda n: torch.ones(n), PLAN["keys"], progress=False,
                               **group("pg"))
        return {str(k): v for k, v in sorted(summary.choices.items())} | {
            f"failed {r.key}": -1 for r in summary.failed}
    for n in PLAN["keys"]:
        work(torch.ones(n), **group())
    return {str(k): cfg["v"] for k, cfg in sorted(decisions().items(), key=lambda kv: str(kv[0]))}


def tune_contextual() -> dict[str, int]:
    """``contextual_autotune`` around a ``triton.autotune`` kernel (one config per block size) and, in a collective
    plan, an all_reduce; each config's pre_hook sleeps and injects the fault (a call = a launch of the config)."""
    from _chaos_kernel import tuned_copy

    copy = tuned_copy(PLAN["configs"], lambda index: inject("call", index), SLEEP_MS)

    @tdt.contextual_autotune(is_dist=COMM[0] if COMM else True, n_warmup=1, n_repeat=2)
    def layer(x: torch.Tensor) -> torch.Tensor:
        return collective(copy(x))

    for n in PLAN["keys"]:
        layer(torch.ones(n))
    return {str(k): d["index"] for k, d in sorted(layer.tuner.decisions.items(), key=lambda kv: str(kv[0]))}


def start_mpi(me: int) -> None:
    """Under mpiexec: this rank's stdout and stderr into its files, its watchdog's exit status said in
    ``exit.rank<r>``, and mpi4py's COMM_WORLD as the tuner's group."""
    for fd, name in ((1, "out"), (2, "err")):
        os.dup2(os.open(f"{name}.rank{me}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    end = os._exit

    def exit_saying(code: int) -> None:
        say(f"exit.rank{me}", code)
        end(code)

    os._exit = exit_saying
    from mpi4py import MPI

    COMM.append(MPI.COMM_WORLD)


def main() -> int:
    me = int(os.environ.get("RANK") or os.environ["OMPI_COMM_WORLD_RANK"])
    stacks = open(f"stack.rank{me}", "w")  # noqa: SIM115 (open for the process's life)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    if PLAN.get("launcher") == "mpi":
        start_mpi(me)
    else:
        tdt.init_distributed()
    say(f"ready.rank{rank()}", {"at": time.time(), "pid": os.getpid()})
    try:
        choices = tune_contextual() if PLAN["mode"] == "contextual" else tune_function()
    except tdt.AutotuneError as exc:
        print("RESULT " + json.dumps({"ok": False, "error": type(exc).__name__, "library": True,
                                      "message": str(exc), "at": time.time()}), flush=True)
        return 3
    except Exception as exc:  # noqa: BLE001 (what escapes the library is what the chaos run looks for)
        traceback.print_exc()
        print("RESULT " + json.dumps({"ok": False, "error": type(exc).__name__, "library": False,
                                      "message": str(exc), "at": time.time(),
                                      "user_call": any(exc is e for e in USER_CALL_ERRORS)}), flush=True)
        return 4
    print("RESULT " + json.dumps({"ok": True, "choices": choices, "at": time.time()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
