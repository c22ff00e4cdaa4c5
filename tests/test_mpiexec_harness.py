"""The tests' own mpiexec starter (``harness.run_mpiexec``): a job that outlives its timeout leaves no rank behind,
and a launch whose launcher failed before any rank ran is started again."""

from __future__ import annotations

import os
import subprocess
import time
import warnings

import pytest
from harness import MPIEXEC_LAUNCHES, run_mpiexec

#: a rank of the job: writes its pid, then sleeps far past any timeout of the test
SLEEPER = """
import os, sys, time
from mpi4py import MPI
path = os.path.join(sys.argv[1], f"pid.{MPI.COMM_WORLD.Get_rank()}")
with open(path + ".part", "w") as f:
    f.write(str(os.getpid()))
os.replace(path + ".part", path)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie awaiting its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(120)
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads processes through /proc")
def test_an_mpiexec_job_past_its_timeout_leaves_no_rank_behind(tmp_path):
    """Open MPI's launcher (``prterun``) puts every rank in a process group of its own, in its session, and a rank
    whose launcher was SIGKILLed lives on (reparented to init). Before, ``run_mpiexec`` was ``subprocess.run(...,
    timeout=)``, which kills the launcher only: every rank of a job that outlived its timeout (a hang the test was
    there to catch) was left running, sleeping or spinning, on a machine the suite shares (seen: both ranks of a
    2-rank job still alive, parent pid 1). Now it kills every process of the job's session."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    pids: list[int] = []
    # the job's timeout must pass with both ranks started: 8 s first (the ranks start within a second or two), then
    # 30 s where a loaded machine started them later (the first job's ranks, if any, are checked below too)
    for attempt, timeout in enumerate((8, 30)):
        folder = tmp_path / f"job{attempt}"
        folder.mkdir()
        with pytest.raises((subprocess.TimeoutExpired, AssertionError)):
            run_mpiexec(script, 2, [str(folder)], {}, timeout=timeout)
        started = [int((folder / f"pid.{r}").read_text()) for r in range(2) if (folder / f"pid.{r}").exists()]
        pids += started
        if len(started) == 2:
            break
    else:
        pytest.skip("the ranks did not start within the 30 s timeout on this loaded machine")
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if _alive(pid)]
    for pid in left:  # the test's own cleanup: never leave them for the rest of the suite
        os.kill(pid, 9)
    assert not left, f"ranks still running after the job's timeout: {left}"


@pytest.mark.timeout(120)
def test_a_launch_whose_launcher_fails_before_any_rank_runs_is_started_again_and_a_rank_that_failed_is_not(tmp_path):
    """CI failed once on ``mpiexec`` exiting 213 after 0.06 s, before any rank ran, its launcher's help text on
    stderr: a launcher's failure failed a test that had not started. Here a real one: TMPDIR names a file, so the
    launcher cannot make its session directory (exit 213, the same exit, within a second). Each such launch is
    started again, with a warning, until the last; a job whose rank ran and exited nonzero is not."""
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(3)\n")
    with pytest.warns(UserWarning, match="mpiexec's launcher failed") as said:
        proc = run_mpiexec(script, 2, [], {"TMPDIR": str(not_a_folder)}, timeout=60)
    assert proc.returncode != 0
    assert len([w for w in said if "launcher failed" in str(w.message)]) == MPIEXEC_LAUNCHES - 1
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning here would be a rank's failure started again
        proc = run_mpiexec(script, 2, [], {}, timeout=60)
    assert proc.returncode == 3, proc
    assert time.monotonic() - started < 60
