"""The examples' tensor-parallel layers under a real ``torchrun --max-restarts`` (gloo CPU ranks, ``init_distributed``)
with a rank hung inside a config by the scenario (tests/scenarios/tp_restart_cases.py; its watchdog ends it).

Each test runs one torchrun job in a session of its own, under a deadline that kills the agent's session and every
process below the agent (torchrun starts each worker in a session of its own: killing the agent's session alone
leaves them running). The scenario's ranks log every call of a tuned GEMM per attempt (``calls.rank<r>``), so a test
knows which configs ran in which attempt.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from harness import HERE, kill_session, parse_results, torchrun_command, tuner_env

SCRIPT = HERE / "scenarios" / "tp_restart_cases.py"


def _children(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [pid]
    while frontier:
        below = [p for p, parent in parents.items() if parent in frontier]
        found += below
        frontier = below
    return found


def _end(agent: subprocess.Popen) -> None:
    """SIGKILL the agent's workers (and theirs), then its session."""
    for pid in _children(agent.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    kill_session(agent.pid)
    agent.wait()


def torchrun_job(tmp_path: Path, case: str, nproc: int, restarts: int, timeout: float, **extra: str) -> dict:
    """Run ``case`` under ``torchrun --standalone --max-restarts RESTARTS`` (the environment: ``tuner_env`` and
    ``extra``); returns its exit status, output, RESULT lines and each rank's calls (``(attempt, function, index)``
    -> count). Past ``timeout`` every process of the job is killed and the test fails."""
    env = tuner_env(tmp_path, float(extra.pop("T", "30")), FAULT_DIR=str(tmp_path), HOME=str(tmp_path), **extra)
    cmd, full = torchrun_command(["--standalone", "--nproc-per-node", str(nproc), "--max-restarts", str(restarts),
                                  "--monitor-interval", "0.1"], SCRIPT, [case], env)
    return _run(tmp_path, cmd, full, nproc, timeout)


def _run(tmp_path: Path, cmd: list[str], full: dict[str, str], nproc: int, timeout: float) -> dict:
    """Run the torchrun command ``cmd`` in environment ``full`` (as :func:`torchrun_job` says)."""
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        agent = subprocess.Popen(cmd, env=full, stdout=out, stderr=err, start_new_session=True, cwd=tmp_path)
    try:
        agent.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end(agent)
        pytest.fail(f"the job outlived {timeout} s:\n{(tmp_path / 'err').read_text()[-4000:]}")
    finally:
        if agent.poll() is None:
            _end(agent)
    calls = {}
    for rank in range(nproc):
        path = tmp_path / f"calls.rank{rank}"
        lines = path.read_text().splitlines() if path.exists() else []
        calls[rank] = Counter((a, f, int(i)) for a, f, i in (line.split() for line in lines))
    return {"rc": agent.returncode, "results": parse_results((tmp_path / "out").read_text()),
            "err": (tmp_path / "err").read_text(), "calls": calls}


@pytest.mark.timeout(120)
def test_a_config_that_hung_is_left_out_when_the_timing_mode_changes_before_the_restart(tmp_path):
    """Config 2 of the AG-GEMM hangs on rank 1 in attempt 0 (steady timing; the watchdog ends it after ``T``); the
    next attempt runs under ``TRITON_DIST_AUTOTUNE_TIMING=cold`` (what a user who reruns the job may change) and
    would hang in it again. The hang is the config's, whatever the timing mode: the next attempt leaves it out and
    the job ends on one choice on both ranks. Before, the journals were named after the timing mode too: attempt 1
    opened fresh ones, ran config 2 again, hung again, and the job failed with its restarts spent."""
    job = torchrun_job(tmp_path, "mlp", 2, 1, 100, T="8", STOP="ag_gemm:2@1/0,ag_gemm:2@1/1",
                       ENV_ATTEMPT_1="TRITON_DIST_AUTOTUNE_TIMING=cold")
    assert job["rc"] == 0, job["err"][-4000:]
    final = {r["rank"]: r for r in job["results"]}
    assert sorted(final) == [0, 1] and all(r["attempt"] == "1" for r in final.values()), job["results"]
    assert final[0]["ag_gemm"] == final[1]["ag_gemm"] and final[0]["gemm_rs"] == final[1]["gemm_rs"]
    for rank in (0, 1):
        assert job["calls"][rank][("0", "ag_gemm", 2)] == 1, job["calls"][rank]  # where it hung
        assert job["calls"][rank][("1", "ag_gemm", 2)] == 0, job["calls"][rank]  # left out
    log = (tmp_path / "logs" / "rank-0.log").read_text()
    assert "config 2 from the journal" in log and "hung on rank 1" in log, log[-3000:]


@pytest.mark.timeout(120)
def test_always_tune_under_a_torchrun_that_names_no_job_still_leaves_out_what_an_earlier_attempt_blamed(tmp_path):
    """``torchrun --nproc-per-node 2 --max-restarts 1`` without ``--standalone`` or ``--rdzv-id`` (its run id is
    ``none``) and ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1``: config 2 of the AG-GEMM hangs on rank 1 in attempt 0 and
    would again in attempt 1. ``ALWAYS_TUNE`` ignores other jobs' records but keeps the earlier attempts' of this job,
    so that a restart does not run a hung config again: attempt 1 leaves it out and the job ends on one choice. Before,
    the job had no name (torchrun's ``none`` does not count), every record was ignored, attempt 1 ran config 2, hung
    again, and the job failed with its restarts spent. Now ``init_distributed`` names the job by its first attempt, in
    the store that outlives the attempts."""
    from harness import free_port

    port = free_port()
    env = tuner_env(tmp_path, 8, FAULT_DIR=str(tmp_path), HOME=str(tmp_path), STOP="ag_gemm:2@1/0,ag_gemm:2@1/1",
                    TRITON_DIST_AUTOTUNE_ALWAYS_TUNE="1")
    cmd, full = torchrun_command(["--nnodes", "1", "--nproc-per-node", "2", "--max-restarts", "1",
                                  "--monitor-interval", "0.1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                  f"127.0.0.1:{port}"], SCRIPT, ["mlp"], env)
    for name in ("TRITON_DIST_AUTOTUNE_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
        full.pop(name, None)
    job = _run(tmp_path, cmd, full, 2, 100)
    assert job["rc"] == 0, job["err"][-4000:]
    final = {r["rank"]: r for r in job["results"]}
    assert sorted(final) == [0, 1] and final[0]["ag_gemm"] == final[1]["ag_gemm"], job["results"]
    for rank in (0, 1):
        assert job["calls"][rank][("1", "ag_gemm", 2)] == 0, job["calls"][rank]  # left out
        assert job["calls"][rank][("1", "ag_gemm", 0)] > 0, job["calls"][rank]  # the rest tuned afresh
