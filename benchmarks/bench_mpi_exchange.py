"""What one exchange of the tuner's mpi4py channel costs: ``combine`` and ``allgather`` of a small message.

Usage (2 ranks; as root add ``OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``)::

    mpiexec -n 2 --oversubscribe python benchmarks/bench_mpi_exchange.py [--exchanges 1000] [--rounds 3]
        [--ref REF] [--out FILE.json]

Each round times ``--exchanges`` calls of each on ``MPI.COMM_WORLD`` and rank 0 prints the mean per call.
``--ref REF`` measures ``triton_dist_tune/group/mpi.py`` as it is in git revision REF (the rest of the package from
the working tree) beside the working tree's, the two alternating by round, e.g. ``--ref HEAD~1`` before a change.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _module_copy import module_from_text  # noqa: E402


def channel_module(ref: str | None):
    """The module ``triton_dist_tune.group.mpi`` of the working tree, or of git revision ``ref``."""
    if ref is None:
        from triton_dist_tune.group import mpi

        return mpi
    text = subprocess.run(["git", "show", f"{ref}:triton_dist_tune/group/mpi.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    return module_from_text(text, "triton_dist_tune.group.mpi_ref")


def per_call_us(group, exchanges: int) -> tuple[float, float]:
    """Mean microseconds of one ``combine`` and of one ``allgather``."""
    started = time.perf_counter()
    for i in range(exchanges):
        group.combine({"i": i, "rank": group.rank, "times": [1.5] * 20}, "bench combine", lambda xs: [len(xs)])
    middle = time.perf_counter()
    for i in range(exchanges):
        group.allgather([i, group.rank], "bench allgather")
    ended = time.perf_counter()
    return 1e6 * (middle - started) / exchanges, 1e6 * (ended - middle) / exchanges


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ref", help="also measure group/mpi.py of this git revision")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    arms = {"tree": channel_module(None)}
    if args.ref:
        arms[args.ref] = channel_module(args.ref)
    rows = []
    for round_ in range(args.rounds):
        for name in (list(arms) if round_ % 2 == 0 else list(reversed(arms))):
            group = arms[name].MpiGroup(world, timeout=60)
            world.Barrier()
            combine_us, allgather_us = per_call_us(group, args.exchanges)
            rows.append({"round": round_, "arm": name, "combine_us": combine_us, "allgather_us": allgather_us})
            if world.Get_rank() == 0:
                print(f"round {round_} {name}: combine {combine_us:.0f} us, allgather {allgather_us:.0f} us",
                      flush=True)
    if world.Get_rank() == 0 and args.out:
        args.out.write_text(json.dumps({"ranks": world.Get_size(), "exchanges": args.exchanges, "rows": rows},
                                       indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
