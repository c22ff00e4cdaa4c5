"""Multi-rank scenarios of a ``contextual_autotune`` rank that left a call after its last exchange and comes back
past its peers' grace (review of 6a1e7b96: ``Group.raise_if_counted_out``). Usage: python counted_out_cases.py CASE
(RANK/WORLD_SIZE/... set)."""

from __future__ import annotations

import logging
import os
import sys
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main, waited_for

import triton_dist_tune as tdt

#: the start of the debug line of a grace for a peer's "left" record (``passover.settle``)
IN_GRACE = "for its next call"


@case
def plan():
    """Env: LEAVER (global ranks, comma-separated), SYNC_EVERY, PLAN (comma-separated steps, every rank) or
    PLAN_<rank> (that rank's). Steps: ``cN`` a contextual call of size N; ``cN*k`` k of them; ``cN!`` one whose
    summary line (after its last exchange) raises KeyboardInterrupt on a leaver (caught); ``cN?`` one that raises it
    on a leaver as its exchange starts to wait the grace for a peer's "left" record (``passover.settle``); ``aN``
    an ``autotune`` call of key N (``aN!``: interrupted at its decision's line on a leaver); ``zS`` sleep S s;
    ``wNAME`` wait for file NAME that a ``fNAME`` step of another rank makes; ``x`` end this process (the others
    end at their plan's end without the final barrier). Each step emits what it gave. ``GRACE_UNTIL``: a ``cN?``
    rank makes file ``in_grace`` as its grace starts and is interrupted once file GRACE_UNTIL exists; ``MARK_BACK``:
    a rank makes that file once its "left" record is set back (its next call came). ``HOLD_AT``: a rank that logs a
    line holding that text makes file HOLD_MARK and waits there for file HOLD_UNTIL (one time). ``MARK_BACK_<rank>``,
    ``HOLD_AT_<rank>`` ...: that rank's own, where set."""
    import triton
    from _cases import contextual_virtual_clock, spend
    from _kernels import block_matched_increment

    from triton_dist_tune.disk import logs
    from triton_dist_tune.group.resolve import resolve_group

    tdt.init_distributed(backend="gloo")
    contextual_virtual_clock()
    me, world = dist.get_rank(), dist.get_world_size()
    group = resolve_group(None)
    folder = os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]
    os.makedirs(folder, exist_ok=True)
    leavers = [int(r) for r in os.environ["LEAVER"].split(",")]
    armed = [""]

    def mine(name: str) -> str:  # (NAME_<rank> where set, else NAME)
        return os.environ.get(f"{name}_{me}", os.environ.get(name, ""))

    held = [mine("HOLD_AT")]

    class Interrupting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if mine("MARK_BACK") and text.endswith(" is back"):  # (this rank's "left" record: set back)
                open(os.path.join(folder, mine("MARK_BACK")), "w").close()
            if held[0] and held[0] in text:
                held[0] = ""
                open(os.path.join(folder, mine("HOLD_MARK")), "w").close()
                waited_for([os.path.join(folder, mine("HOLD_UNTIL"))], 60)
            if armed[0] and armed[0] in text:
                if armed[0] == IN_GRACE and os.environ.get("GRACE_UNTIL"):  # (the interruption comes later in it)
                    open(os.path.join(folder, "in_grace"), "w").close()
                    waited_for([os.path.join(folder, os.environ["GRACE_UNTIL"])], 60)
                armed[0] = ""
                raise KeyboardInterrupt

    logs.rank_log().addHandler(Interrupting())
    package_log = logging.getLogger("triton_dist_tune")  # (the grace's line is a debug line of the package's logger)
    package_log.addHandler(Interrupting())
    package_log.setLevel(logging.DEBUG)

    add_one = block_matched_increment(spend)

    @tdt.contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1, sync_every=int(os.environ.get("SYNC_EVERY", "64")))
    def runs(x):
        add_one[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
        return x

    @tdt.autotune([{"c": c} for c in (1, 2, 3)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, name="plain")
    def plain(x, *, c):
        return x * c

    steps = os.environ.get(f"PLAN_{me}", os.environ.get("PLAN", "")).split(",")
    ended = False
    for index, step in enumerate(steps):
        kind, rest = step[0], step[1:]
        if kind == "z":
            time.sleep(float(rest))
            continue
        if kind == "f":
            open(os.path.join(folder, rest), "w").close()
            continue
        if kind == "w":
            waited_for([os.path.join(folder, rest)], 120)
            continue
        if kind == "x":
            sys.stdout.flush()
            os._exit(0)
        interrupt, in_grace = rest.endswith("!"), rest.endswith("?")
        rest = rest.rstrip("!?")
        n, _, k = rest.partition("*")
        for j in range(int(k or 1)):
            if interrupt and me in leavers:
                armed[0] = "done after" if kind == "c" else "decision: config"
            if in_grace and me in leavers:
                armed[0] = IN_GRACE
            t0 = time.monotonic()
            try:
                value = (runs if kind == "c" else plain)(torch.zeros(int(n)))
                said = {"error": None, "value": float(value.sum())}
            except KeyboardInterrupt:
                said = {"error": "KeyboardInterrupt"}
            except Exception as exc:
                said = {"error": type(exc).__name__, "message": str(exc)[:240]}
            armed[0] = ""
            calls = runs.tuner._calls.get(group.identity, 0)
            emit(rank=me, step=index, j=j, op=step, seconds=round(time.monotonic() - t0, 2), seq=group.exchanges(),
                 calls=calls, **said)
    emit(rank=me, what="end", decisions=sorted(str(k[1]) for k in runs.tuner.decisions),
         agreed=list(runs.tuner.agreed_calls), exchanges=group.exchanges(),
         back=None if getattr(group, "_back", None) is None else group._back[0],
         kept=(group.store.check([group._back[0]]) if getattr(group, "_back", None) else None))
    if "x" in ",".join(os.environ.get(f"PLAN_{r}", "") for r in range(world)):
        ended = True
    if ended:  # a rank ended its process: no final barrier (rank 0 may host the store: it ends last)
        open(os.path.join(folder, f"done.{me}"), "w").close()
        if me == 0:
            waited_for([os.path.join(folder, f"done.{r}") for r in range(1, world)
                        if "x" not in os.environ.get(f"PLAN_{r}", "")], 120)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
