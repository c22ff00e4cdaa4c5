"""The tests' own mpiexec starter (``harness.run_mpiexec``): a job that outlives its timeout leaves no rank behind."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from harness import run_mpiexec

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
    with pytest.raises((subprocess.TimeoutExpired, AssertionError)):
        run_mpiexec(script, 2, [str(tmp_path)], {}, timeout=30)
    pids = [int((tmp_path / f"pid.{r}").read_text()) for r in range(2) if (tmp_path / f"pid.{r}").exists()]
    if len(pids) < 2:
        pytest.skip("the ranks did not start within the 30 s timeout on this loaded machine")
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if _alive(pid)]
    for pid in left:  # the test's own cleanup: never leave them for the rest of the suite
        os.kill(pid, 9)
    assert not left, f"ranks still running after the job's timeout: {left}"
