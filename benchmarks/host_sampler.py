"""What the host's CPUs did during a benchmark's runs (not part of the library): is a slow run a slow host?

Three modes:

- ``sample CSV [--interval 0.5]``: until killed, append one line per interval to CSV: the epoch, the CPU time
  shares of the whole host since the last line (user, nice, system, idle, iowait, irq+softirq, steal: from
  ``/proc/stat``), the mean ``cpu MHz`` of ``/proc/cpuinfo``, the 1-minute load, and the ms of a small fixed
  single-thread workload run then (a fifteenth of ``probe``'s; start the sampler at a raised priority, ``nice -n
  -10``, so that it reads the CPU's speed, not its queue). ``nice`` is the time of processes of lowered priority
  (the compile workers' guesses); ``steal`` is the time the hypervisor gave this VM's CPUs to another guest.
- ``probe``: one fixed single-thread Python workload, best of 5, in ms (the same work on every host, so a host
  whose CPUs run slower reads higher).
- ``report CSV MARKS``: per run of MARKS (lines ``NAME start EPOCH`` and ``NAME end EPOCH``), the shares averaged
  over the run's lines, the MHz, the small workload's median and slowest ms, and the 1-minute load at its start.

Launch (a GPU script): ``python3 benchmarks/host_sampler.py sample DIR/host.csv & ... kill $!``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "steal")


def _cpu_ticks() -> list[int]:
    """/proc/stat's first line as (user, nice, system, idle, iowait, irq + softirq, steal) ticks."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = parts
    return [user, nice, system, idle, iowait, irq + softirq, steal]


def _mhz() -> float:
    values = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
              if line.startswith("cpu MHz")]
    return sum(values) / len(values) if values else 0.0


def sample(csv: Path, interval: float) -> None:
    """Append a line to ``csv`` every ``interval`` seconds, forever (see the module docstring)."""
    before = _cpu_ticks()
    with csv.open("a") as out:
        out.write("epoch," + ",".join(FIELDS) + ",mhz,load1,probe_ms\n")
        while True:
            time.sleep(interval)
            now = _cpu_ticks()
            spent = [b - a for a, b in zip(before, now, strict=True)]
            total = sum(spent) or 1
            load1 = Path("/proc/loadavg").read_text().split()[0]
            shares = ",".join(f"{x / total:.4f}" for x in spent)
            out.write(f"{time.time():.2f},{shares},{_mhz():.0f},{load1},{_work(20_000):.2f}\n")
            out.flush()
            before = now


def _work(steps: int) -> float:
    """ms of a fixed pure-Python workload of ``steps`` steps."""
    start = time.perf_counter()
    total = 0
    table: dict[int, int] = {}
    for i in range(steps):
        table[i % 1009] = table.get(i % 1009, 0) + i
        total += i * i % 7
    return (time.perf_counter() - start) * 1e3


def probe() -> float:
    """Best of 5 of a fixed pure-Python workload, in ms."""
    return min(_work(300_000) for _ in range(5))


def report(csv: Path, marks: Path) -> None:
    """One line per run of ``marks`` (see the module docstring)."""
    rows = []
    for line in csv.read_text().splitlines():
        if line and not line.startswith("epoch"):
            values = line.split(",")
            rows.append([float(x) for x in values])
    windows: dict[str, list[float]] = {}
    for line in marks.read_text().splitlines():
        name, what, epoch = line.split()
        windows.setdefault(name, [0.0, 0.0])[0 if what == "start" else 1] = float(epoch)
    for name, (start, end) in windows.items():
        inside = [row for row in rows if start < row[0] <= end]
        if not inside:
            print(f"{name}: no samples")
            continue
        mean = [sum(row[i] for row in inside) / len(inside) for i in range(1, len(FIELDS) + 2)]
        shares = " ".join(f"{field} {100 * mean[i]:.1f}%" for i, field in enumerate(FIELDS))
        first = min(inside, key=lambda row: row[0])
        probes = sorted(row[len(FIELDS) + 3] for row in inside) if len(inside[0]) > len(FIELDS) + 3 else []
        speed = (f"; small workload median {statistics.median(probes):.2f} ms, slowest {probes[-1]:.2f}"
                 if probes else "")
        print(f"{name}: {end - start:.1f} s; {shares}; {mean[len(FIELDS)]:.0f} MHz; load at start "
              f"{first[len(FIELDS) + 2]:.1f}{speed}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("sample")
    s.add_argument("csv", type=Path)
    s.add_argument("--interval", type=float, default=0.5)
    sub.add_parser("probe")
    r = sub.add_parser("report")
    r.add_argument("csv", type=Path)
    r.add_argument("marks", type=Path)
    args = p.parse_args()
    if args.mode == "sample":
        sample(args.csv, args.interval)
    elif args.mode == "probe":
        print(f"{probe():.1f} ms")
    else:
        report(args.csv, args.marks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
