"""First keys with compiles one after another in one process: is a later one slower, and where does it go?

On one H200 (fifty-sixth session) the second first key of a process took 24-32 s, where the same space tuned first
took 10-12 s, whichever space came first (``bench_search.py --phases compile --spaces gemm,moe`` and
``moe,gemm``). This script tunes ``--spaces`` (``gemm``, ``moe``; one may repeat) in order, each on a fresh
kernel copy with a fresh Triton cache (as ``bench_search.py``'s compile phase), and records per tuning: its
seconds and breakdown, the process's CPU seconds (user and system, its own and its children's, from ``os.times``),
the garbage collector's passes and the seconds they took (``gc.callbacks``), the threads alive, and the host's load
average. ``--gc-freeze``: ``gc.freeze()`` after each tuning (the objects alive then are never collected again).

Launch (one GPU): ``python3 benchmarks/first_keys_in_one_process.py --spaces gemm,moe --out DIR/fk.json``;
``--cpu-smoke``: the plumbing on CPU (interpreter, tiny spaces).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _search_env  # noqa: E402  (fresh HOME and caches before Triton is imported)

BASE = _search_env.BASE

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from _search_common import GPU, say  # noqa: E402
from _search_spaces import GemmSpace, MoeSpace  # noqa: E402
from _search_tuners import ours_tuning  # noqa: E402
from bench_gemm_tuning import fresh_kernel, use_triton_cache  # noqa: E402


class GcClock:
    """The garbage collector's passes and seconds, by generation, since the last :meth:`take`."""

    def __init__(self) -> None:
        self.passes = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._began = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            generation = info["generation"]
            self.passes[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._began

    def take(self) -> dict:
        taken = {"passes": list(self.passes), "seconds": [round(s, 3) for s in self.seconds]}
        self.passes, self.seconds = [0, 0, 0], [0.0, 0.0, 0.0]
        return taken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", default="gemm,moe")
    parser.add_argument("--shape", type=int, default=256)
    parser.add_argument("--gc-freeze", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu-smoke", action="store_true")
    args = parser.parse_args()
    smoke = args.cpu_smoke
    by_name = {"gemm": lambda: GemmSpace(smoke, 4096), "moe": lambda: MoeSpace(smoke)}
    clock = GcClock()
    rows = []
    for position, name in enumerate(args.spaces.split(",")):
        space = by_name[name]()
        m = 3 if smoke else args.shape
        st = space.state(m)
        use_triton_cache(tempfile.mkdtemp(prefix="triton_fk_", dir=BASE))
        if GPU:
            from bench_fidelity import triton_runtime_init

            triton_runtime_init()
        clock.take()
        cpu0, load0 = os.times(), os.getloadavg()
        got = ours_tuning(space, fresh_kernel(space.source), st, f"fk{position}_{name}_{os.getpid()}", None)
        cpu1 = os.times()
        row = {"position": position, "space": name, "m": m, "seconds": round(got["seconds"], 2),
               "choice": got["choice"], "breakdown": got["decision"].get("breakdown"),
               "cpu_s": {"user": round(cpu1.user - cpu0.user, 1), "system": round(cpu1.system - cpu0.system, 1),
                         "children_user": round(cpu1.children_user - cpu0.children_user, 1),
                         "children_system": round(cpu1.children_system - cpu0.children_system, 1)},
               "gc": clock.take(), "threads": threading.active_count(), "load_before": load0,
               "load_after": os.getloadavg()}
        rows.append(row)
        say(f"{position} {name}: {row['seconds']} s; cpu {row['cpu_s']}; gc {row['gc']}; threads {row['threads']}; "
            f"load {row['load_before'][0]:.1f} -> {row['load_after'][0]:.1f}; {row['breakdown']}")
        if args.gc_freeze:
            gc.collect()
            gc.freeze()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"spaces": args.spaces, "gc_freeze": args.gc_freeze, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
