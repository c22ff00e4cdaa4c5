"""What a guard's restart costs the tuner's thread on a host whose CPUs are busy (compile workers): a loop of
``Guard.restart`` and a GIL-free wait (a run's device wait), beside ``--busy`` processes that keep the CPUs full.
Prints the microseconds per run. Run it on two libraries (``PYTHONPATH``) to compare them side by side.

Launch: ``python benchmarks/watchdog_wake.py [--runs 3000] [--wait-us 200] [--busy 3]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time


def _burn(stop) -> None:  # noqa: ANN001 (a multiprocessing Event)
    while not stop.is_set():
        sum(range(10000))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3000)
    p.add_argument("--wait-us", type=float, default=200.0)
    p.add_argument("--busy", type=int, default=3, help="busy processes beside the loop")
    args = p.parse_args()
    from triton_dist_tune.faults.watchdog import WATCHDOG

    stop = mp.Event()
    procs = [mp.Process(target=_burn, args=(stop,)) for _ in range(args.busy)]
    for proc in procs:
        proc.start()
    guard = WATCHDOG.guard()
    guard.arm(300.0, "watchdog_wake", lambda: None)
    try:
        started = time.perf_counter()
        for _ in range(args.runs):
            guard.restart()
            time.sleep(args.wait_us / 1e6)
        per_run = (time.perf_counter() - started) / args.runs * 1e6
    finally:
        guard.close()
        stop.set()
        for proc in procs:
            proc.join()
    print(f"{per_run:.0f} us per run ({args.wait_us:.0f} us of GIL-free wait, {args.busy} busy processes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
