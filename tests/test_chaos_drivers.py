"""The chaos drivers as their user runs them (``benchmarks/chaos.py``, and its interruption mode
``benchmarks/_chaos_interrupt.py``): their ``--help``, ``--faults``' hand-over.

Real processes, their folders under ``tmp_path``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from harness import ROOT, run_command

CHAOS = ROOT / "benchmarks" / "chaos.py"
INTERRUPT = ROOT / "benchmarks" / "_chaos_interrupt.py"


def driver_env(tmp_path: Path) -> dict[str, str]:
    """The drivers' own environment: their run folders under ``tmp_path`` (``TMPDIR``), this checkout imported, a
    help wide enough for each option's text to stay on one line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(TMPDIR=str(tmp_path), COLUMNS="400",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    return env


@pytest.mark.timeout(60)
def test_chaos_help_lists_faults_and_faults_hands_over(tmp_path: Path) -> None:
    """``python3 benchmarks/chaos.py --help`` did not list ``--faults`` (the script handed ``--faults`` over to
    ``_chaos_interrupt.py`` before building its parser). Now it lists it with its one value, and where to find that
    mode's own options; ``--faults interrupt --help`` is the interruption driver's help (``--slack``, ``--plan``),
    an abbreviation ``--fault`` hands over too, and a value it does not know is argparse's error, exit status 2."""
    env = driver_env(tmp_path)
    done = run_command([sys.executable, CHAOS, "--help"], tmp_path, env, timeout=50)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--faults {interrupt}" in done.stdout and "--slack and --plan" in done.stdout, done.stdout
    assert "--launcher" in done.stdout, done.stdout
    for faults in (["--faults", "interrupt"], ["--fault=interrupt"]):
        done = run_command([sys.executable, CHAOS, *faults, "--help"], tmp_path, env, timeout=50)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.startswith("usage: _chaos_interrupt.py"), done.stdout
        assert all(option in done.stdout for option in ("--faults", "--slack", "--plan", "--jobs")), done.stdout
    done = run_command([sys.executable, CHAOS, "--faults", "kill"], tmp_path, env, timeout=50)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "chaos.py: error: argument --faults: invalid choice: 'kill'" in done.stderr, done.stderr
