"""The order in which pytest-xdist's work stealing (``--dist worksteal``) hands the suite's tests out: the known-slow
ones first, spread over the workers.

Work stealing first splits the collection into one contiguous slice per worker (each worker in turn takes the
pending tests' count divided by the workers left), then an idle worker takes the last half of the longest queue.
In collection order a worker whose slice held several long tests, or long tests collected late, made the pass's
tail; and a module-scoped fixture (one job of ranks for many tests) ran once more on every worker that got some of
its tests. Here each worker's slice starts with its share of the slow units, longest first, placed on the slice with
the least known time so far (a stolen test is one from a slice's end, never these): a slow unit is a test of
:data:`KNOWN` at :data:`SLOW_S` or more, or all the tests of a module that use a module-scoped fixture of that
module's own (kept together, so the fixture runs once). The other tests keep their order and fill the slices.

:data:`KNOWN` (``slow_tests.txt``): seconds and node id, one test a line, from a ``--durations=0`` run of the main
pass (a test's setup and call added up). A test it does not name counts as fast; a name it holds that the suite no
longer has is ignored. Without pytest-xdist the order is pytest's own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: seconds and node id of the suite's slow tests, one a line (a line that starts with ``#`` is a comment)
KNOWN = Path(__file__).with_name("slow_tests.txt")
#: a test known to take this long or longer is placed at the start of a worker's slice
SLOW_S = 4.0


def known_seconds(path: Path = KNOWN) -> dict[str, float]:
    """Node id -> seconds, as ``path`` lists them (none where there is no such file)."""
    seconds: dict[str, float] = {}
    if not path.is_file():
        return seconds
    for line in path.read_text().splitlines():
        text = line.split(None, 1)
        if len(text) == 2 and not line.startswith("#"):
            seconds[text[1].strip()] = seconds.get(text[1].strip(), 0.0) + float(text[0])
    return seconds


def slice_sizes(count: int, workers: int) -> list[int]:
    """The first slices work stealing hands ``workers`` workers out of ``count`` tests, in order."""
    sizes = []
    for i in range(workers):
        sizes.append(count // (workers - i))
        count -= sizes[-1]
    return sizes


def _module_group(item: pytest.Item) -> str | None:
    """The module's node id where ``item`` uses a module-scoped fixture defined in its own module, else None."""
    module = item.nodeid.split("::", 1)[0]
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for fixturedef in defs:
            if fixturedef.scope == "module" and fixturedef.baseid == module:
                return module
    return None


def units(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """``items`` as units, in their order: each test alone, except that the tests of a module that use its own
    module-scoped fixture form one unit, where the first of them stood."""
    found: list[list[pytest.Item]] = []
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        group = _module_group(item)
        if group is None:
            found.append([item])
        elif group in groups:
            groups[group].append(item)
        else:
            groups[group] = [item]
            found.append(groups[group])
    return found


def slow_first(items: list[pytest.Item], workers: int, seconds: dict[str, float]) -> list[pytest.Item]:
    """``items`` reordered so that each of the ``workers`` first slices starts with its share of the slow units
    (module docstring); the same order on every worker, which collects the suite itself."""
    sizes = slice_sizes(len(items), workers)
    every = units(items)

    def cost(unit: list[pytest.Item]) -> float:
        return sum(seconds.get(item.nodeid, 0.0) for item in unit)

    slow = [u for u in every if len(u) > 1 or cost(u) >= SLOW_S]
    slices: list[list[pytest.Item]] = [[] for _ in sizes]
    load = [0.0] * len(sizes)
    placed: set[int] = set()
    for unit in sorted(slow, key=cost, reverse=True):  # sorted() is stable: ties keep the collection's order
        room = [i for i in range(len(sizes)) if len(slices[i]) + len(unit) <= sizes[i]]
        if room:
            best = min(room, key=lambda i: (load[i], i))
            slices[best].extend(unit)
            load[best] += cost(unit)
            placed.add(id(unit))
    rest = iter([item for unit in every if id(unit) not in placed for item in unit])
    for i, size in enumerate(sizes):
        slices[i].extend(next(rest) for _ in range(size - len(slices[i])))
    return [item for part in slices for item in part]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker (``PYTEST_XDIST_WORKER_COUNT`` set; the worker's own ``--dist`` reads "no", so
    the order is made for work stealing, what tests/run.sh asks for), the known-slow tests first on every worker
    (:func:`slow_first`); the order is pytest's own otherwise."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1 and len(items) >= workers:
        items[:] = slow_first(items, workers, known_seconds())
