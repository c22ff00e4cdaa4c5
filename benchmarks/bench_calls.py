"""How many times one tuning runs the tuned function per config, as the function's own time varies.

Usage: python benchmarks/bench_calls.py [--ranks 2] [--sizes 1,1000,100000,1000000] [--n-repeat 10] [--tunings 2]

Starts ``--ranks`` CPU ranks (gloo, one process each) and decorates docs/api.md's in-place example, an
``all_reduce`` of ``x`` with two configs (``algo="ring"`` / ``"tree"``, which do the same work), with the real
``autotune`` (defaults: steady timing, ``n_warmup=1``, ``n_repeat`` 10). For each size of ``x`` (elements, float32)
it tunes ``--tunings`` new keys and counts, on rank 0, the function's runs per config (the final call's run not
included), and the function's time per call (the median of 20 decided calls after it).

What sets the count: every config gets ``n_warmup`` runs and a 3-call probe of its time, then one sample per race
round (up to ``n_repeat`` rounds, fewer for configs that leave early), and the 3 (or 6) leaders a block of up to 8
settled samples; a steady sample is a settling call (on CPU ranks; about 5 ms of calls on a device) and a span of
about 5 ms of calls (10 ms in the settled block). A function that takes ``t`` ms per call is therefore run about
``5 / t`` times per sample: the count follows the function's own time, not a fixed number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def worker(sizes: list[int], n_repeat: int, tunings: int) -> None:
    import torch
    import torch.distributed as dist

    import triton_dist_tune as tdt

    tdt.init_distributed(backend="gloo")
    runs: Counter[str] = Counter()

    @tdt.autotune([{"algo": a} for a in ("ring", "tree")], key_fn=lambda x, tag: (tdt.to_hashable(x), tag),
                  n_repeat=n_repeat, name="bench_calls")
    def all_reduce_(x: torch.Tensor, tag: int, *, algo: str) -> torch.Tensor:
        runs[algo] += 1
        dist.all_reduce(x)
        return x

    rows = []
    for size in sizes:
        for t in range(tunings):
            runs.clear()
            x = torch.ones(size)
            all_reduce_(x, t)
            per_config = {algo: runs[algo] for algo in ("ring", "tree")}
            times = []
            for _ in range(20):  # decided now: the function's own time per call
                start = time.perf_counter()
                all_reduce_(x, t)
                times.append((time.perf_counter() - start) * 1e3)
            winner = max(runs, key=lambda algo: runs[algo] - per_config[algo])
            per_config[winner] -= 1  # the call's own run with the choice, after the tuning, is not a tuning run
            rows.append({"size": size, "tuning": t, "runs": per_config, "ms": statistics.median(times)})
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(rows), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sizes", default="1,1000,100000,1000000", help="elements of x, comma-separated")
    parser.add_argument("--n-repeat", type=int, default=10)
    parser.add_argument("--tunings", type=int, default=2, help="tunings (new keys) per size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker:
        worker(sizes, args.n_repeat, args.tunings)
        return
    from harness import free_port

    port, work = free_port(), Path(tempfile.mkdtemp(prefix="bench_calls_"))
    procs = []
    for rank in range(args.ranks):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(args.ranks), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PYTHONPATH": str(ROOT),
               "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
               "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(work / "cache"),
               "TRITON_DIST_AUTOTUNE_LOG_DIR": str(work / "logs")}
        env.pop("TORCHELASTIC_RESTART_COUNT", None)
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "--sizes", args.sizes, "--n-repeat",
                                       str(args.n_repeat), "--tunings", str(args.tunings)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=900) for p in procs]  # stderr: the tuner's note that x changes in place
    if any(p.returncode for p in procs):
        raise SystemExit(f"a rank failed: {[p.returncode for p in procs]}\n{outs[0][1][-3000:]}")
    rows: list[dict[str, Any]] = json.loads(next(line for line in outs[0][0].splitlines()
                                                 if line.startswith("RESULT "))[len("RESULT "):])
    print("| elements of x | ms per call | tuning | runs per config (ring / tree) |")
    print("| ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['size']:,} | {row['ms']:.3f} | {row['tuning']} | "
              f"{' / '.join(str(v) for v in row['runs'].values())} |")
    counts = [v for row in rows for v in row["runs"].values()]
    print(f"\nruns per config: {min(counts)} to {max(counts)} (median {statistics.median(counts):g}), "
          f"{args.ranks} ranks, n_repeat={args.n_repeat}")


if __name__ == "__main__":
    main()
