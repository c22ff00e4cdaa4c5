"""Each test's wall time and CPU seconds in a run of the suite, and the slow-test list made from them.

As a pytest plugin (the main pass, with pytest-xdist), it records one JSON line per test into ``TEST_TIMES_OUT``:
node id, wall seconds from its setup's start to its teardown's end, and CPU seconds of its worker's cgroup (the
worker, its fork server, the ranks it starts), where the machine lets this process make cgroups (cgroup v1's
``cpuacct``, as root; else ``cpu`` is null)::

    TEST_TIMES_OUT=/tmp/times.jsonl PYTHONPATH=scripts python3 -m pytest -n 8 --dist worksteal -p suite_times

Then::

    python3 scripts/suite_times.py summary /tmp/times.jsonl      # sums and the heaviest tests
    python3 scripts/suite_times.py slow-list /tmp/times.jsonl    # writes tests/slow_tests.txt (tests of 3 s or more)

Run it on an otherwise idle machine: the times are what ``tests/slow_first.py`` places work by. A worker's cgroup
that its fork server still held as the worker ended stays behind, empty.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

CGROUPS = Path("/sys/fs/cgroup/cpuacct")
SLOW_LIST = Path(__file__).resolve().parent.parent / "tests" / "slow_tests.txt"
SLOW_S = 3.0
_group: list[Path] = []


def _cpu() -> float | None:
    return int((_group[0] / "cpuacct.usage").read_text()) / 1e9 if _group else None


def pytest_configure(config: Any) -> None:
    """In an xdist worker: move this process into a cgroup of its own, where the machine allows it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not CGROUPS.is_dir():
        return
    group = CGROUPS / f"test-times-{worker}-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
        _group.append(group)
    except OSError:
        pass


def pytest_unconfigure(config: Any) -> None:
    """Leave this worker's cgroup, and remove it where nothing of the worker's is left in it."""
    for group in _group:
        try:
            (CGROUPS / "cgroup.procs").write_text(str(os.getpid()))
            group.rmdir()
        except OSError:
            pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
    """Time one test's setup, call and teardown, and record it."""
    cpu0, wall0 = _cpu(), time.monotonic()
    yield
    cpu1 = _cpu()
    out = os.environ.get("TEST_TIMES_OUT")
    if out:
        cpu = None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 3)
        with open(out, "a") as f:
            f.write(json.dumps({"id": item.nodeid, "wall": round(time.monotonic() - wall0, 3), "cpu": cpu}) + "\n")


def _rows(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def summary(path: str, top: int = 30) -> None:
    """Print the sums and the ``top`` heaviest tests by CPU (by wall where no CPU was read)."""
    rows = _rows(path)
    cpu = [r["cpu"] for r in rows if r["cpu"] is not None]
    print(f"{len(rows)} tests, wall sum {sum(r['wall'] for r in rows):,.0f} s"
          + (f", CPU {sum(cpu):,.0f} s" if cpu else ""))
    rows.sort(key=lambda r: -(r["cpu"] if r["cpu"] is not None else r["wall"]))
    for r in rows[:top]:
        print(f"{r['cpu'] if r['cpu'] is not None else float('nan'):7.1f} CPU-s {r['wall']:7.1f} s  {r['id']}")


def slow_list(path: str, revision: str = "") -> None:
    """Write :data:`SLOW_LIST` from a run's times: the tests of :data:`SLOW_S` or more, slowest first."""
    rows = sorted((r for r in _rows(path) if r["wall"] >= SLOW_S), key=lambda r: -r["wall"])
    total = sum(r["wall"] for r in _rows(path))
    text = (f"The suite's slow tests (tests/slow_first.py): seconds (a test's setup, call and teardown added up) and "
            f"node id, one a line, slowest first, from scripts/suite_times.py over a main pass{revision} (sum over "
            f"the suite: {total:,.0f} s), tests of {SLOW_S:g} s or more. Refresh it from such a run when tests come "
            "and go; a stale line is harmless.")
    head = "".join(f"# {line}\n" for line in textwrap.wrap(text, 114))
    SLOW_LIST.write_text(head + "".join(f"{r['wall']:.1f} {r['id']}\n" for r in rows))
    print(f"wrote {len(rows)} tests into {SLOW_LIST}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("summary", "slow-list"):
        sys.exit(__doc__)
    (summary if sys.argv[1] == "summary" else slow_list)(*sys.argv[2:])
