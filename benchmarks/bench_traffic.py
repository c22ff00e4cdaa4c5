"""The tuner's control traffic as the group grows: wall time, key-value store requests and bytes.

Usage: python benchmarks/bench_traffic.py [--ranks 2,4,8,16,32] [--rounds 30] [--ref REF] [--out DIR] [--name NAME]

For each N it starts N CPU ranks (gloo, one process each; most of them sleep in the store) on the default group
and measures, on every rank:

- per exchange, for an ``allgather`` of one float, a ``broadcast`` of one float and a ``barrier``: the median
  wall time over ``--rounds`` exchanges, and the store requests and bytes of one exchange;
- per tuning of a fixed 8-config space with the real ``autotune`` decorator (a trivial function, ``n_warmup=1
  n_repeat=3``, a new key each time, so every tuning measures): wall time, exchanges, store requests and bytes.
  ``--per-rank-limit 1`` makes the race send only the group's time of a sample, as it does above 64 ranks
  (``measure/combine.py``), so that a few ranks show a large group's per-rank traffic.

Requests and bytes are counted by a proxy around the store object the tuner's channel uses (``group.store``):
each call of set/get/wait/multi_get/check/add/delete_key/compare_set is one request; its bytes are the key
lengths plus the values sent or received (store-side key prefixes and framing are not counted). The server's
figures are the sums over ranks. ``--ref REF`` measures the package as it is in git revision REF instead of the
working tree (``git archive``), e.g. ``--ref main`` for the comm before this change. Writes NAME.json and
NAME.md (``--name``, default traffic) to ``--out`` (default benchmarks/results/cpu) unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _cpu_ranks import run_ranks

ROOT = Path(__file__).resolve().parent.parent
EXCHANGES = ("allgather", "broadcast", "barrier")
N_CONFIGS = 8


class CountingStore:
    """Wraps a c10d store and counts the requests and bytes of the calls the tuner's channel makes."""

    COUNTED = ("set", "get", "wait", "multi_get", "multi_set", "check", "add", "delete_key", "compare_set")

    def __init__(self, inner: Any, counts: CountingStore | None = None) -> None:
        self._inner = inner
        #: where the requests are counted: this store, or the one it is a clone of
        self._counts = self if counts is None else counts
        self.requests = 0
        self.bytes = 0

    def clone(self) -> CountingStore:
        """A clone of the store whose requests count here too (a client lent to a blocking wait)."""
        return CountingStore(self._inner.clone(), self._counts)

    def reset(self) -> None:
        self.requests = 0
        self.bytes = 0

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name not in self.COUNTED:
            return target

        def counted(*args: Any) -> Any:
            result = target(*args)
            self._counts.requests += 1
            self._counts.bytes += _size(args) + _size(result)
            return result

        return counted


def count_store(group: Any) -> CountingStore:
    """Route the store requests of ``group``'s channel through a :class:`CountingStore` and return it (the channel
    keeps the store as an attribute, or fetches it on each use through ``comm._job_store``)."""
    from triton_dist_tune.group import store as comm

    if isinstance(getattr(type(group), "store", None), property):
        counting = CountingStore(comm._job_store())
        comm._job_store = lambda: counting
    else:
        counting = group.store = CountingStore(group.store)
    return counting


def _size(value: Any) -> int:
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, (list, tuple)):
        return sum(_size(v) for v in value)
    if isinstance(value, int) and not isinstance(value, bool):
        return 8
    return 0  # timedeltas, booleans, None


# -- one rank ---------------------------------------------------------------------------------------------------


def worker(rounds: int, tunings: int, per_rank_limit: int | None) -> None:
    import torch.distributed as dist

    import triton_dist_tune as tdt
    from triton_dist_tune.group.resolve import resolve_group
    from triton_dist_tune.measure import combine, lockstep

    if per_rank_limit is not None:  # what a group above the limit sends, measured on a few ranks
        combine.PER_RANK_LIMIT = lockstep.PER_RANK_LIMIT = per_rank_limit

    tdt.init_distributed(backend="gloo")
    group = resolve_group(None)
    store = count_store(group)
    result: dict[str, Any] = {"rank": group.rank, "exchanges": {}, "tuning": {}}
    calls = {"allgather": lambda i: group.allgather(float(i), f"bench allgather {i}"),
             "broadcast": lambda i: group.broadcast(float(i), f"bench broadcast {i}"),
             "barrier": lambda i: group.barrier(f"bench barrier {i}")}
    for kind in EXCHANGES:
        for i in range(3):
            calls[kind](i)
        walls, requests, sent = [], [], []
        for i in range(rounds):
            store.reset()
            start = time.perf_counter()
            calls[kind](i)
            walls.append((time.perf_counter() - start) * 1e3)
            requests.append(store.requests)
            sent.append(store.bytes)
        result["exchanges"][kind] = {"wall_ms": statistics.median(walls), "requests": statistics.median(requests),
                                     "bytes": statistics.median(sent)}

    @tdt.autotune([{"block": 16 << i, "num_warps": 4} for i in range(N_CONFIGS)], key_fn=lambda x, **kw: x,
                  n_warmup=1, n_repeat=3, name="bench_traffic")
    def trivial(x: int, *, block: int, num_warps: int) -> int:
        return x + block

    walls, requests, sent, exchanges = [], [], [], []
    for t in range(tunings):
        store.reset()
        seq = group._seq
        start = time.perf_counter()
        trivial(t)
        walls.append(time.perf_counter() - start)
        requests.append(store.requests)
        sent.append(store.bytes)
        exchanges.append(group._seq - seq)
    result["tuning"] = {"wall_s": statistics.median(walls), "requests": statistics.median(requests),
                        "bytes": statistics.median(sent), "exchanges": statistics.median(exchanges)}
    sys.stdout.flush()
    os.write(1, ("RESULT " + json.dumps(result) + "\n").encode())
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


# -- the driver -------------------------------------------------------------------------------------------------


def run_size(n: int, package_root: Path, rounds: int, tunings: int, timeout: float,
             per_rank_limit: int | None = None) -> list[dict[str, Any]]:
    """Start ``n`` ranks of this script in worker mode; return each rank's RESULT."""
    limit = [] if per_rank_limit is None else ["--per-rank-limit", str(per_rank_limit)]
    return run_ranks(n, [__file__, "--worker", "--rounds", str(rounds), "--tunings", str(tunings), *limit],
                     package_root, timeout, timeout, f"bench_traffic{n}_")


def summarize(n: int, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Per exchange kind and per tuning: the slowest rank's wall time, rank 0's and the busiest other rank's
    requests and bytes, and the server's (sum over ranks)."""
    def row(part: dict[str, Any]) -> dict[str, Any]:
        others = part["per_rank"][1:]
        return {"wall": max(part["wall"]),
                "requests_rank0": part["per_rank"][0][0], "bytes_rank0": part["per_rank"][0][1],
                "requests_other": max(r for r, _ in others), "bytes_other": max(b for _, b in others),
                "requests_server": sum(r for r, _ in part["per_rank"]),
                "bytes_server": sum(b for _, b in part["per_rank"])}

    ranks = sorted(ranks, key=lambda r: r["rank"])
    out: dict[str, Any] = {"ranks": n, "exchanges": {}}
    for kind in EXCHANGES:
        part = {"wall": [r["exchanges"][kind]["wall_ms"] for r in ranks],
                "per_rank": [(r["exchanges"][kind]["requests"], r["exchanges"][kind]["bytes"]) for r in ranks]}
        out["exchanges"][kind] = row(part)
    part = {"wall": [r["tuning"]["wall_s"] for r in ranks],
            "per_rank": [(r["tuning"]["requests"], r["tuning"]["bytes"]) for r in ranks]}
    out["tuning"] = {**row(part), "exchanges": ranks[0]["tuning"]["exchanges"]}
    return out


def package_at(ref: str | None) -> Path:
    """The folder to put on PYTHONPATH: the working tree, or the package extracted from git revision ``ref``."""
    if ref is None:
        return ROOT
    folder = Path(tempfile.mkdtemp(prefix="bench_traffic_ref_"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "triton_dist_tune"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def markdown(runs: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["| comm | ranks | step | wall | requests rank 0 / other rank | bytes rank 0 / other rank | "
             "server requests | server bytes |", "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, sizes in runs.items():
        for s in sizes:
            steps = [(k, v, f"{v['wall']:.2f} ms") for k, v in s["exchanges"].items()]
            t = s["tuning"]
            steps.append((f"tuning ({t['exchanges']:g} exchanges)", t, f"{t['wall']:.2f} s"))
            for name, v, wall in steps:
                lines.append(f"| {label} | {s['ranks']} | {name} | {wall} | {v['requests_rank0']:g} / "
                             f"{v['requests_other']:g} | {v['bytes_rank0']:g} / {v['bytes_other']:g} | "
                             f"{v['requests_server']:g} | {v['bytes_server']:g} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ranks", default="2,4,8,16,32")
    parser.add_argument("--rounds", type=int, default=30, help="exchanges timed per kind")
    parser.add_argument("--tunings", type=int, default=2, help="tunings (new keys) per size")
    parser.add_argument("--ref", action="append", default=[],
                        help="also measure the package of this git revision (repeatable), e.g. main")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one size may take")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cpu")
    parser.add_argument("--per-rank-limit", type=int, default=None,
                        help="the race sends every rank's time of a sample up to this many ranks (default: the "
                             "package's, 64), only the group's time above: 1 measures a larger group's messages")
    parser.add_argument("--name", default="traffic", help="the result files' name, without .md/.json")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.worker:
        worker(args.rounds, args.tunings, args.per_rank_limit)
        return
    sizes = [int(n) for n in args.ranks.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {}
    for label, ref in [(r, r) for r in args.ref] + [("this tree", None)]:
        root = package_at(ref)
        runs[label] = []
        for n in sizes:
            started = time.perf_counter()
            runs[label].append(summarize(n, run_size(n, root, args.rounds, args.tunings, args.timeout,
                                                                      args.per_rank_limit)))
            print(f"{label}: {n} ranks done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    table = markdown(runs)
    print(table)
    if not args.no_write:
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {"machine": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                "rounds": args.rounds, "tunings": args.tunings, "configs": N_CONFIGS, "n_warmup": 1, "n_repeat": 3,
                "per_rank_limit": args.per_rank_limit}
        (args.out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")
        (args.out / f"{args.name}.md").write_text(
            "# Control traffic per exchange and per tuning (benchmarks/bench_traffic.py)\n\n"
            f"{meta['cpus']} CPUs, {meta['machine']}; exchange wall time: median over {args.rounds} exchanges, "
            "slowest rank; tuning: 8 configs, n_warmup=1 n_repeat=3, median of "
            f"{args.tunings} tunings, slowest rank. Bytes: keys plus values, as seen by the store client.\n\n"
            + table)


if __name__ == "__main__":
    main()
