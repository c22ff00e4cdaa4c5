"""How many store requests naming an attempt costs (``group/epoch.py``: ``init_distributed``'s agreement, and each
group's under torchrun on several nodes when the job starts torch.distributed itself).

N ranks are threads of this process, each with a client of one real TCPStore, arriving evenly over ``--spread`` s.
Prints, per N: the wall time, rank 0's requests and all ranks' requests. ``--against FILE``: the same for another
version of the module (``git show REV:triton_dist_tune/group/epoch.py > FILE``), side by side.

    python benchmarks/bench_attempt_naming.py --ranks 16 64 256 --spread 0 1 [--against /tmp/old_epoch.py]
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch.distributed as dist  # noqa: E402
from _module_copy import module_from_text  # noqa: E402

from triton_dist_tune.group import epoch  # noqa: E402


class Counting:
    """A store client that counts its requests."""

    def __init__(self, store: Any) -> None:
        self.store, self.requests = store, Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.requests[name] += 1
            return method(*args, **kwargs)

        return counted


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _load(path: str) -> Any:
    """Another version of the module, loaded inside the package (its relative imports are the working tree's)."""
    return module_from_text(Path(path).read_text(), "triton_dist_tune.group.other_epoch")


def measure(module: Any, size: int, spread: float) -> tuple[float, int, int]:
    """Name one attempt among ``size`` thread ranks; returns (wall s, rank 0's requests, all ranks' requests)."""
    port = _free_port()
    server = dist.TCPStore("127.0.0.1", port, size + 1, is_master=True, timeout=timedelta(seconds=120),
                           wait_for_workers=False)
    stores = [Counting(dist.TCPStore("127.0.0.1", port, size + 1, is_master=False, timeout=timedelta(seconds=120)))
              for _ in range(size)]
    names: dict[int, str] = {}

    def rank(r: int) -> None:
        time.sleep(spread * r / size)
        names[r] = module.agree(stores[r], "bench/", r, size, 120)

    started = time.monotonic()
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    if len(names) != size or len(set(names.values())) != 1:
        raise SystemExit(f"the ranks named the attempt differently: {names}")
    del server
    return wall, sum(stores[0].requests.values()), sum(sum(s.requests.values()) for s in stores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--spread", type=float, nargs="+", default=[0.0, 1.0])
    parser.add_argument("--against", help="another version of group/epoch.py, measured beside this one")
    args = parser.parse_args()
    versions = [("this", epoch)] + ([("against", _load(args.against))] if args.against else [])
    for size in args.ranks:
        for spread in args.spread:
            for label, module in versions:
                wall, first, total = measure(module, size, spread)
                print(f"{size:5d} ranks arriving over {spread:g} s, {label:7s}: {wall:6.2f} s, rank 0 {first:6d} "
                      f"requests, all ranks {total:6d}", flush=True)


if __name__ == "__main__":
    main()
