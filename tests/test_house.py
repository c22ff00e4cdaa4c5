"""Issue 35 item 9: no module over 450 lines, no class over 300, no import circle (scripts/check_house.py)."""

import importlib.util
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_house.py"


def _report():
    spec = importlib.util.spec_from_file_location("check_house", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_house", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.check()


@pytest.fixture(scope="module")
def report():
    return _report()


def test_no_module_over_450_lines(report):
    assert not report.long_modules, report.lines()


def test_no_class_over_300_lines(report):
    assert not report.long_classes, report.lines()


def test_no_import_circle_in_contextual_and_function(report):
    for where in ("triton_dist_tune/contextual", "triton_dist_tune/function"):
        assert report.cycles[where] == [], report.lines()


def test_no_import_circle_anywhere(report):
    assert not any(report.cycles.values()), report.lines()
