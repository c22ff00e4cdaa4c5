"""Store requests of the tuner, by kind, per tuning and per exchange, as the group grows (real gloo ranks).

Usage: python benchmarks/store_requests.py [--ranks 2,4,8,16] [--late-s 4] [--timeout 600] [--json FILE]

For each N it starts N CPU ranks (gloo, one process each, on the default group) and counts, on every rank, the
key-value store requests the tuner makes, by kind (set, get, add, check, multi_get, wait, compare_set, delete_key),
in these steps, each run alike on every rank:

- ``barrier``: one exchange (the mean of 10);
- ``tuning``: an ``autotune`` tuning of a new key (4 configs of ``x + v`` with a gloo ``all_reduce``, cold timing,
  ``n_warmup=1 n_repeat=3``);
- ``hot``: a call at that decided key (the mean of 10);
- ``campaign``: a ``campaign`` of 3 new keys of another such function;
- ``sharded``: a ``sharded=True`` tuning of a rank-local ``x + v`` (each rank measures a share of the configs);
- ``local``: a ``campaign(local=True)`` of 2 N keys of a rank-local ``x + v`` (each rank tunes a share alone);
- ``contextual``: a ``contextual_autotune`` call of a function launching a 2-config ``triton.autotune`` kernel
  (interpreted) and an ``all_reduce``;
- ``late``: a tuning of a new key that the last rank starts ``--late-s`` seconds after the others;
- ``half_watch``: one round of a progress watch (as a campaign's, a sharded or replicas tuning's) that the upper half
  of the ranks reaches ``--late-s`` seconds after the lower half, which waits for it, then the round's exchange;
- ``half_barrier``: a barrier that the upper half of the ranks reaches ``--late-s`` seconds after the lower half.

Requests are counted by a proxy in front of the job's store (``c10d._get_default_store``, which the tuner fetches on
each use; a ``clone()`` of it, the side client, the beats' and the blocking waits' clients, is counted
too), on the calling thread: ``main`` (the exchanges, the waits and their looks) or ``bg`` (the beat threads). The
server receives the sum over ranks. The table prints, per step and N, rank 0's requests, the busiest other rank's
and the server's, each by kind, the exchanges (the group's sequence numbers used), and the server's requests (main
and beat threads) per second of the step's wall time (the slowest rank's): for the ``half_*`` steps, what a wait of
half the group for the other half costs the server each second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _cpu_ranks import run_ranks

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("set", "get", "add", "check", "multi_get", "multi_set", "wait", "compare_set", "delete_key", "append")
SHORT = {"compare_set": "cas", "delete_key": "del", "multi_get": "mget", "multi_set": "mset", "append": "app"}


class Counts:
    """Requests by (thread: ``main`` or ``bg``, kind), shared by a store proxy and its clones."""

    def __init__(self) -> None:
        self.by, self.threads = Counter(), Counter()
        self._lock = threading.Lock()

    def add(self, kind: str) -> None:
        thread = threading.current_thread()
        who = "main" if thread is threading.main_thread() else "bg"
        with self._lock:
            self.by[f"{who}.{kind}"] += 1
            self.threads[f"{thread.name}.{kind}"] += 1

    def take(self) -> dict[str, int]:
        with self._lock:
            taken, self.by = dict(self.by), Counter()
            taken.update({f"thread:{k}": v for k, v in self.threads.items()})
            self.threads = Counter()
        return taken


class CountedStore:
    """A store client that counts each request by kind and forwards it (its clones count into the same
    :class:`Counts`)."""

    def __init__(self, inner: Any, counts: Counts) -> None:
        self._inner, self._counts = inner, counts

    def clone(self) -> CountedStore:
        return CountedStore(self._inner.clone(), self._counts)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name not in KINDS:
            return target

        def request(*args: Any, **kwargs: Any) -> Any:
            self._counts.add(name)
            return target(*args, **kwargs)

        return request


def count_job_store() -> Counts:
    """Route every later fetch of the job's store (``c10d._get_default_store``) through a :class:`CountedStore`."""
    from torch.distributed import distributed_c10d as c10d

    counts, real = Counts(), c10d._get_default_store()
    counted = CountedStore(real, counts)
    c10d._get_default_store = lambda: counted
    return counts


# -- one rank ---------------------------------------------------------------------------------------------------


def worker(late_s: float, steps: list[str]) -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import torch.distributed as dist
    import triton
    import triton.language as tl

    import triton_dist_tune as tdt
    from triton_dist_tune.group.resolve import resolve_group

    tdt.init_distributed(backend="gloo")
    group = resolve_group(None)
    counts = count_job_store()
    rank, size = group.rank, group.size
    out: dict[str, Any] = {"rank": rank, "size": size, "steps": {}}

    def tuned(name: str, local: bool = False) -> Any:
        @tdt.autotune([{"v": v} for v in range(4)], key_fn=lambda x, **kw: x.numel(), timing="cold", n_warmup=1,
                      n_repeat=3, name=name, sharded=local)
        def f(x: torch.Tensor, *, v: int) -> torch.Tensor:
            y = x + v
            if not local:
                dist.all_reduce(y)
            return y
        return f

    def measured(step: str, call: Any, times: int = 1) -> None:
        group.barrier(f"before {step}")
        counts.take()
        seq, started = group._seq, time.perf_counter()
        for _ in range(times):
            call()
        wall = time.perf_counter() - started
        taken = counts.take()
        out["steps"][step] = {"counts": {k: v / times for k, v in taken.items()},
                              "exchanges": (group._seq - seq) / times, "wall_s": wall / times}

    f = tuned("store_requests_f")
    if "barrier" in steps:
        measured("barrier", lambda: group.barrier("a barrier"), 10)
    if "tuning" in steps or "hot" in steps:
        measured("tuning", lambda: f(torch.ones(8)))
    if "hot" in steps:
        measured("hot", lambda: f(torch.ones(8)), 10)
    if "campaign" in steps:
        g = tuned("store_requests_campaign")
        measured("campaign", lambda: tdt.campaign(g, [torch.ones(n) for n in (3, 5, 7)], progress=False))
    if "sharded" in steps:  # each rank measures a share of the configs (a progress watch of ranks)
        s = tuned("store_requests_sharded", local=True)
        measured("sharded", lambda: s(torch.ones(8)))
    if "local" in steps:  # a campaign of a rank-local function: each rank tunes a share of the keys alone
        c = tuned("store_requests_local", local=True)
        measured("local", lambda: tdt.campaign(c, [torch.ones(n) for n in range(3, 3 + 2 * size)], local=True,
                                               progress=False))
    if "contextual" in steps:
        @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"])
        @triton.jit
        def add_one(x, out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)

        @tdt.contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3)
        def layer(x: torch.Tensor) -> torch.Tensor:
            y = torch.empty_like(x)
            add_one[(1,)](x, y, x.numel())
            dist.all_reduce(y)
            return y

        measured("contextual", lambda: layer(torch.ones(16)))
    if "late" in steps:
        def late() -> None:
            if rank == size - 1:
                time.sleep(late_s)
            f(torch.ones(16))
        measured("late", late)
    later = rank >= size - size // 2  # (the upper half of the group)
    if "half_watch" in steps:  # one round of a progress watch, the upper half late: the lower half waits at it
        from triton_dist_tune.faults.progress import RoundWatch
        from triton_dist_tune.settings import current

        def half_watch() -> None:
            with RoundWatch.start(group, "half late", current().timeout) as watch:
                if later:
                    time.sleep(late_s)
                group.barrier("after the round", timeout=watch.arrive(0, "the round", 600.0))
                watch.passed(0)
        measured("half_watch", half_watch)
    if "half_barrier" in steps:  # one exchange, the upper half late
        def half_barrier() -> None:
            if later:
                time.sleep(late_s)
            group.barrier("half late")
        measured("half_barrier", half_barrier)
    sys.stdout.flush()
    os.write(1, ("RESULT " + json.dumps(out) + "\n").encode())
    group.barrier("done")
    dist.barrier()  # (every rank has read the last result before rank 0, the store's host, ends)
    dist.destroy_process_group()
    os._exit(0)


# -- the driver -------------------------------------------------------------------------------------------------


def run_size(n: int, late_s: float, steps: list[str], timeout: float, tuner_timeout: float) -> list[dict[str, Any]]:
    """Start ``n`` ranks of this script in worker mode; return each rank's RESULT, by rank."""
    results = run_ranks(n, [__file__, "--worker", "--late-s", str(late_s), "--steps", ",".join(steps)], ROOT,
                        timeout, tuner_timeout, f"store_requests{n}_")
    return sorted(results, key=lambda r: r["rank"])


def _fmt(counts: dict[str, float], who: str) -> str:
    parts = [f"{SHORT.get(k, k)} {counts[f'{who}.{k}']:g}" for k in KINDS if counts.get(f"{who}.{k}")]
    total = sum(v for k, v in counts.items() if k.startswith(f"{who}."))
    return f"**{total:g}**" + (f" ({', '.join(parts)})" if parts else "")


def table(runs: dict[int, list[dict[str, Any]]], steps: list[str]) -> str:
    """Per step and N: exchanges; rank 0's, the busiest other rank's and the server's requests on the calling
    thread by kind; the server's on the beat threads."""
    lines = ["| step | N | exchanges | rank 0 (main thread) | busiest other rank (main thread) | server, main threads "
             "| server, beat threads | wall s | server requests / s |",
             "| --- | ---: | ---: | --- | --- | --- | --- | ---: | ---: |"]
    for step in steps:
        for n, ranks in runs.items():
            parts = [r["steps"][step] for r in ranks]
            counts = [p["counts"] for p in parts]
            server: Counter = Counter()
            for c in counts:
                server.update(c)
            busiest = max(counts[1:], key=lambda c: sum(v for k, v in c.items() if k.startswith("main.")))
            wall = max(p["wall_s"] for p in parts)
            total = sum(v for k, v in server.items() if k.startswith(("main.", "bg.")))
            lines.append(f"| {step} | {n} | {parts[0]['exchanges']:g} | {_fmt(counts[0], 'main')} | "
                         f"{_fmt(busiest, 'main')} | {_fmt(server, 'main')} | {_fmt(server, 'bg')} | "
                         f"{wall:.2f} | {total / wall if wall > 0 else 0:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ranks", default="2,4,8,16")
    parser.add_argument("--steps", default="barrier,tuning,hot,campaign,sharded,local,contextual,late,half_watch,"
                        "half_barrier")
    parser.add_argument("--late-s", type=float, default=4.0,
                        help="how late the last rank comes to 'late', the upper half to 'half_*'")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one size may take")
    parser.add_argument("--tuner-timeout", type=float, default=300.0, help="TRITON_DIST_AUTOTUNE_TIMEOUT")
    parser.add_argument("--json", type=Path, default=None, help="also write every rank's counts here")
    args = parser.parse_args()
    steps = args.steps.split(",")
    if args.worker:
        worker(args.late_s, steps)
        return
    runs: dict[int, list[dict[str, Any]]] = {}
    for n in (int(n) for n in args.ranks.split(",")):
        started = time.perf_counter()
        runs[n] = run_size(n, args.late_s, steps, args.timeout, args.tuner_timeout)
        print(f"{n} ranks done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print(table(runs, steps))
    if args.json is not None:
        args.json.write_text(json.dumps({str(n): r for n, r in runs.items()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
