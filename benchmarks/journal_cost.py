"""What a journal record costs the rank that writes it: ``Journal.append`` (written whole, then fsynced) against the
same write without the fsync, and a guard's arm and disarm (the watchdog's deadline), in folders given on the
command line (default: the decision cache's folder under HOME, and /tmp). A tuning journals a ``started`` record
before every warm-up, capture and sample of a config, and one record per outcome.

Launch: ``python benchmarks/journal_cost.py [FOLDER ...] [--records 500]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton_dist_tune.faults.journal import Journal  # noqa: E402
from triton_dist_tune.faults.watchdog import WATCHDOG  # noqa: E402


def per_record_ms(folder: Path, records: int, sync: bool) -> float:
    """Median ms of one ``started`` record appended to a fresh journal in ``folder`` (fsynced or not)."""
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
    return 1e3 * statistics.median(times)


def guard_us(pairs: int = 2000) -> float:
    guard = WATCHDOG.guard()
    t0 = time.perf_counter()
    for i in range(pairs):
        guard.arm(300.0, "cost", lambda: None, i, None, "step", 0.0)
        guard.disarm()
    guard.close()
    return 1e6 * (time.perf_counter() - t0) / pairs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="*", type=Path)
    p.add_argument("--records", type=int, default=500)
    args = p.parse_args()
    folders = args.folders or [Path.home() / ".triton_dist", Path(tempfile.gettempdir())]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        synced, unsynced = per_record_ms(folder, args.records, True), per_record_ms(folder, args.records, False)
        print(f"{folder}: a journal record {synced:.3f} ms fsynced, {unsynced:.3f} ms without the fsync "
              f"(median of {args.records})")
    print(f"a guard's arm and disarm: {guard_us():.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
