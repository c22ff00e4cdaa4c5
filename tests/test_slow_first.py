"""The suite's order under pytest-xdist (tests/slow_first.py): each worker starts with its share of the known-slow
tests, and the tests of a module-scoped fixture stay together (the fixture runs once)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from harness import HERE
from slow_first import known_seconds, slice_sizes

#: the tiny suite's known times: four slow tests (one a parametrized case) and a slow module fixture's tests
SECONDS = {"test_a.py::test_slow_1": 9.0, "test_a.py::test_slow_2": 8.0, "test_a.py::test_slow_3[x]": 7.0,
           "test_b.py::test_uses_1": 6.0, "test_b.py::test_uses_2": 0.5, "test_c.py::test_slow_4": 5.0,
           "test_c.py::test_quick_0": 1.0}


def test_the_first_slices_are_those_work_stealing_hands_out_and_the_known_times_add_setup_and_call(tmp_path):
    assert slice_sizes(10, 3) == [3, 3, 4] and slice_sizes(1634, 8) == [204] * 6 + [205] * 2
    listed = tmp_path / "slow.txt"
    listed.write_text("# seconds node id\n5.5 tests/t.py::a\n1.5 tests/t.py::a\n7 tests/t.py::b[x y]\n\n")
    assert known_seconds(listed) == {"tests/t.py::a": 7.0, "tests/t.py::b[x y]": 7.0}
    assert known_seconds(tmp_path / "none.txt") == {}


@pytest.mark.timeout(120)
def test_under_xdist_each_worker_starts_with_its_share_of_the_slow_tests_and_a_module_fixtures_tests_stay_together(
        tmp_path):
    """A suite of 3 modules (17 tests), 2 workers: slices of 8 and 9. The 4 slow tests and the module fixture's 3
    tests (one unit, 6.5 s) are placed longest first on the slice with the least known time so far (9 | 8, 7 on the
    second, 6.5 on the first, 5 on the second), at the slices' starts; the other tests keep their order. Both
    workers collect that order, each runs the first test of a slice first (work stealing takes a queue's end,
    never its first two), and every test runs once."""
    log = tmp_path / "ran.txt"
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(HERE)!r})
        import pytest
        from slow_first import slow_first

        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(config, items):
            workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
            items[:] = slow_first(items, workers, {SECONDS!r})
            with open({str(log)!r}, "a") as f:
                f.write("order " + " ".join(item.nodeid for item in items) + "\\n")

        def pytest_runtest_setup(item):
            with open({str(log)!r}, "a") as f:
                f.write(os.environ["PYTEST_XDIST_WORKER"] + " " + item.nodeid + "\\n")
        """))
    (tmp_path / "test_a.py").write_text(textwrap.dedent("""
        import pytest
        def test_quick_1(): pass
        def test_slow_1(): pass
        def test_quick_2(): pass
        def test_slow_2(): pass
        @pytest.mark.parametrize("p", ["x"])
        def test_slow_3(p): pass
        """))
    (tmp_path / "test_b.py").write_text(textwrap.dedent("""
        import pytest
        @pytest.fixture(scope="module")
        def job(): pass
        def test_plain(): pass
        def test_uses_1(job): pass
        def test_uses_2(job): pass
        def test_uses_3(job): pass
        """))
    (tmp_path / "test_c.py").write_text("".join(f"def test_quick_{i}(): pass\n" for i in range(6)) +
                                        "def test_slow_4(): pass\n")
    plugins = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", *plugins, "-n", "2", "--dist", "worksteal",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line.split(" ", 1) for line in log.read_text().splitlines()]
    orders = [what.split() for who, what in lines if who == "order"]
    uses = [f"test_b.py::test_uses_{i}" for i in (1, 2, 3)]
    first = ["test_a.py::test_slow_1", *uses, "test_a.py::test_quick_1", "test_a.py::test_quick_2",
             "test_b.py::test_plain", "test_c.py::test_quick_0"]
    second = ["test_a.py::test_slow_2", "test_a.py::test_slow_3[x]", "test_c.py::test_slow_4"] + [
        f"test_c.py::test_quick_{i}" for i in range(1, 6)]
    assert orders == [first + second] * 2, orders
    ran: dict[str, list[str]] = {}
    for who, nodeid in lines:
        if who != "order":
            ran.setdefault(who, []).append(nodeid)
    assert sorted(names[0] for names in ran.values()) == ["test_a.py::test_slow_1", "test_a.py::test_slow_2"], ran
    assert sorted(n for names in ran.values() for n in names) == sorted(first + second), ran
