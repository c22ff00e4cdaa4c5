"""Exploratory multi-rank scenarios of ``contextual_autotune`` ranks interrupted inside their wait for an exchange's
result (review of ceece99d). Usage: python contextual_late_more_cases.py CASE (RANK/WORLD_SIZE/... set)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main, waited_for

import triton_dist_tune as tdt

INTERPRETER = threading.Lock()


@case
def late():
    """Env: PLAN (calls; "a+b" = two threads at once; PLAN_<r>: rank r's own), AT_CALL, AT (exchange suffix;
    AT_<r>: leaver r's own, where leavers leave at different exchanges), LEAVERS (global ranks), SIG (INT, TERM,
    CANCEL), THREAD (leavers' later calls from a thread of their own), DELAY (s the leavers wait before
    their next call), SYNC_EVERY, GROUP (world, tp2), RAISE ("call:rank,..." the function raises there)."""
    import triton
    from _cases import contextual_virtual_clock, spend
    from _kernels import block_matched_increment

    from triton_dist_tune.group.resolve import resolve_group

    signal.signal(signal.SIGINT, signal.default_int_handler)

    def cancel(*_):
        raise asyncio.CancelledError()

    signal.signal(signal.SIGUSR1, cancel)
    tdt.init_distributed(backend="gloo")
    contextual_virtual_clock()
    me, world = dist.get_rank(), dist.get_world_size()
    pg = None
    if os.environ.get("GROUP", "world") == "tp2":
        groups = [dist.new_group([r, r + 1]) for r in range(0, world, 2)]
        pg = groups[me // 2]
        members = [me // 2 * 2, me // 2 * 2 + 1]
    else:
        members = list(range(world))
    group = resolve_group(pg)
    folder = os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]
    os.makedirs(folder, exist_ok=True)
    leavers = [int(r) for r in os.environ["LEAVERS"].split(",")]
    my_leavers = [r for r in leavers if r in members]
    caught = {r: os.path.join(folder, f"caught.{r}") for r in leavers}
    at_call = int(os.environ["AT_CALL"])
    targets = {r: os.environ.get(f"AT_{r}", os.environ["AT"]) for r in leavers}
    raising = {tuple(int(v) for v in item.split(":")) for item in os.environ.get("RAISE", "").split(",") if item}
    current, began = [-1], [0]  # began: the group's exchanges before the current call
    local = threading.local()

    add_one = block_matched_increment(spend, lambda: getattr(local, "launched", []))

    @tdt.contextual_autotune(is_dist=pg if pg is not None else True, n_repeat=2, n_warmup=1,
                             sync_every=int(os.environ.get("SYNC_EVERY", "64")))
    def runs(x, i):
        with INTERPRETER:
            add_one[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
        if (i, me) in raising:
            raise ValueError(f"rank {me}'s own error in call {i}")
        return x

    if group.rank == 0 and my_leavers:
        gather = group._gather_and_send

        def held(seq, obj, fn, what, timeout):  # the result comes once the leavers caught their interruption
            awaited = [caught[r] for r in my_leavers if what.endswith(targets[r])]
            if current[0] == at_call and awaited:
                waited_for(awaited, 60)
            return gather(seq, obj, fn, what, timeout)

        group._gather_and_send = held
    elif me in leavers:
        sig = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "CANCEL": signal.SIGUSR1}[os.environ.get("SIG", "INT")]

        def interrupt_in_the_wait() -> None:  # once this rank's message of that exchange of that call is in the store
            while not (current[0] == at_call and group.exchanges() > began[0] and group._what.endswith(targets[me])
                       and group._sent == group.exchanges()):
                time.sleep(0.01)
            time.sleep(0.2)
            signal.pthread_kill(threading.main_thread().ident, sig)

        threading.Thread(target=interrupt_in_the_wait, daemon=True).start()

    def one(i: int, n: int, out: dict) -> None:
        local.launched = []
        t0 = time.monotonic()
        try:
            said = {"error": None, "value": float(runs(torch.zeros(n), i).sum())}
        except (KeyboardInterrupt, SystemExit, asyncio.CancelledError) as exc:
            said = {"error": type(exc).__name__}
            open(caught[me], "w").close()
        except Exception as exc:
            said = {"error": type(exc).__name__, "message": str(exc)[:300]}
        ran: dict[int, list[int]] = {}
        for size, block in local.launched:
            ran.setdefault(size, []).append(block)
        out.update(rank=me, what=i, n=n, seconds=round(time.monotonic() - t0, 2), runs=runs.tuner.last_runs,
                   final={k: v[-1] for k, v in ran.items()}, ran=ran, thread=threading.current_thread().name,
                   **said)

    threaded = me in leavers and os.environ.get("THREAD")
    delay = float(os.environ.get("DELAY", "0"))
    for i, item in enumerate(os.environ.get(f"PLAN_{me}", os.environ["PLAN"]).split(",")):
        began[0] = group.exchanges()  # (before current: an earlier call's last exchange may end with AT too)
        current[0] = i
        if i == at_call + 1 and me in leavers and delay:
            time.sleep(delay)
        sizes = [int(s) for s in item.split("+")]
        outs = [{} for _ in sizes]
        if len(sizes) > 1 or (threaded and i > at_call):
            threads = [threading.Thread(target=one, args=(i, n, out), name=f"t{i}.{j}")
                       for j, (n, out) in enumerate(zip(sizes, outs, strict=True))]
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):  # the main thread does something else meanwhile
                sum(range(1000))
                time.sleep(0.001)
        else:
            one(i, sizes[0], outs[0])
        for out in outs:
            emit(**out)
    emit(rank=me, what="end", decisions={str(k[1]): v["index"] for k, v in runs.tuner.decisions.items()},
         exchanges=group.exchanges(), called=sorted(str(g) for g in runs.tuner._called))


if __name__ == "__main__":
    main()
