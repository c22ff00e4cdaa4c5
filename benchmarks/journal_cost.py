"""What a journal record costs the rank that writes it: ``Journal.append`` (written whole, then fsynced) against the
same write without the fsync, and a guard's arm and disarm (the watchdog's deadline), in folders given on the
command line (default: the decision cache's folder under HOME, and /tmp). A tuning journals a ``started`` record
before every warm-up, capture and sample of a config, and one record per outcome. ``--writers N`` measures again
while N processes write files as compile workers fill Triton's cache (a few files of ~100 KB per kernel, renamed
into place, never fsynced): on ext4 a journal's fsync may have to flush their data too.

Launch: ``python benchmarks/journal_cost.py [FOLDER ...] [--records 500] [--writers 16]``
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton_dist_tune.faults.journal import Journal  # noqa: E402
from triton_dist_tune.faults.watchdog import WATCHDOG  # noqa: E402


def per_record_ms(folder: Path, records: int, sync: bool) -> tuple[float, float]:
    """(median, mean) ms of one ``started`` record appended to a fresh journal in ``folder`` (fsynced or not): a
    tuning pays the mean."""
    work = Path(tempfile.mkdtemp(prefix="journal_cost_", dir=folder))
    journal = Journal(work / "cost.journal")
    fsync = os.fsync
    if not sync:
        os.fsync = lambda fd: None  # the same write path without the fsync
    try:
        times = []
        for i in range(records):
            t0 = time.perf_counter()
            journal.append(i % 64, "started", config="{BLOCK_SIZE_M: 64, num_warps: 4}", phase="round 1")
            times.append(time.perf_counter() - t0)
    finally:
        os.fsync = fsync
        journal.close()
    return 1e3 * statistics.median(times), 1e3 * statistics.fmean(times)


def write_like_a_compile_worker(folder: str, stop: object) -> None:
    """Write kernels' files into ``folder`` until ``stop`` (an Event) is set: 4 files of 100 KB each, renamed."""
    n = 0
    while not stop.is_set():  # type: ignore[attr-defined]
        for suffix in ("cubin", "ptx", "llir", "json"):
            path = os.path.join(folder, f"k{n % 500}.{suffix}")
            with open(path + ".tmp", "wb") as f:
                f.write(os.urandom(100_000))
            os.replace(path + ".tmp", path)
        n += 1


def guard_us(pairs: int = 2000) -> float:
    """Microseconds of one arm and disarm of a guard, back to back as a tuning's phases run."""
    guard = WATCHDOG.guard()
    try:
        t0 = time.perf_counter()
        for i in range(pairs):
            guard.arm(300.0, "cost", lambda: None, i, None, "step", 0.0)
            guard.disarm()
        return 1e6 * (time.perf_counter() - t0) / pairs
    finally:
        guard.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="*", type=Path)
    p.add_argument("--records", type=int, default=500)
    p.add_argument("--writers", type=int, default=0, help="then again beside this many writing processes")
    args = p.parse_args()
    folders = args.folders or [Path.home() / ".triton_dist", Path(tempfile.gettempdir())]
    for writers in sorted({0, args.writers}):
        stop = multiprocessing.Event()
        procs = [multiprocessing.Process(target=write_like_a_compile_worker,
                                         args=(tempfile.mkdtemp(prefix="writer_", dir=folders[0]), stop), daemon=True)
                 for _ in range(writers)]
        for proc in procs:
            proc.start()
        try:
            for folder in folders:
                folder.mkdir(parents=True, exist_ok=True)
                synced = per_record_ms(folder, args.records, True)
                unsynced = per_record_ms(folder, args.records, False)
                print(f"{folder}, {writers} writer(s): a journal record {synced[0]:.3f} ms fsynced (mean "
                      f"{synced[1]:.3f}), {unsynced[0]:.3f} ms without the fsync (mean {unsynced[1]:.3f}); medians "
                      f"of {args.records}")
            print(f"{writers} writer(s): a guard's arm and disarm: {guard_us():.1f} us")
        finally:
            stop.set()
            for proc in procs:
                proc.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
