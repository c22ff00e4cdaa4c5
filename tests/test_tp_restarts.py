"""The examples' tensor-parallel layers under a real ``torchrun --max-restarts`` (gloo CPU ranks, ``init_distributed``)
with a rank hung inside a config by the scenario (tests/scenarios/tp_restart_cases.py; its watchdog ends it).

Each torchrun test runs one job in a session of its own, under a deadline that kills the agent's session and every
process below the agent (torchrun starts each worker in a session of its own: killing the agent's session alone
leaves them running). The scenario's ranks log every call of a tuned GEMM per attempt (``calls.rank<r>``), so a test
knows which configs ran in which attempt. The last test, the guard of the journals' timing modes, restarts by hand:
one process killed at a call it chooses, then each resume in a process of its own, on a copy of its cache.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from harness import HERE, base_env, kill_session, parse_results, run_python, torchrun_command, tuner_env

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
    env = tuner_env(tmp_path, float(extra.pop("T", "30")), FAULT_DIR=str(tmp_path), **extra)
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
    # hung on rank 1, on rank 0 (waiting for it in the collective), or both: whichever watchdog fired before torchrun
    # ended the other rank (the fresh-clone CI of the seventy-second session, on a loaded machine, had no 'hung on
    # rank 1'; alone it reads 'hung on rank 0: ...; hung on rank 1: ...')
    resumed = [line for line in log.splitlines() if "config 2 from the journal" in line]
    assert resumed and "failed: in an earlier attempt, hung on rank" in resumed[0], resumed or log[-3000:]


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
    env = tuner_env(tmp_path, 8, FAULT_DIR=str(tmp_path), STOP="ag_gemm:2@1/0,ag_gemm:2@1/1",
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


KILLED_AT_ITS_FIRST_CALL = r"""
import os, signal
import torch
import triton_dist_tune as tdt

calls, kill = os.environ["CALLS"], int(os.environ.get("KILL", "-1"))

@tdt.autotune([{"v": v} for v in range(4)], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=3, sharded=True,
              name="journaled_times")
def f(x, *, v):
    with open(calls, "a") as out:
        out.write(f"{v}\n")
    if v == kill:  # its first call: configs 0 and 1 are measured and journaled (a share measures in order)
        os.kill(os.getpid(), signal.SIGKILL)
    return x + v

print("CHOSE", int(f(torch.zeros(4))[0]))
"""


@pytest.mark.timeout(200)
@pytest.mark.parametrize("first", ["steady", "cold"])
def test_a_time_journaled_under_one_timing_mode_is_measured_again_under_the_other(tmp_path, first):
    """The journals are shared by the timing modes (so that a hang or crash under one counts under the other), but a
    time is not: the records fold the timing mode into their ``kept`` fingerprint. One process tunes 4 configs under
    ``first`` timing, ``sharded=True`` (a one-rank share measures its configs one after another and journals each
    whole, to be taken as it is by a resume), and kills itself (kill -9) at the first call of config 2: configs 0
    and 1 are then journaled ``measured``, whatever the load (the premise is checked on disk). A copy of that cache
    is resumed under the same timing mode (the control: configs 0 and 1 are taken from the journal, run again only
    as the final call of the choice), another under the other mode (the guard: both measured again, warm-up and
    samples). The earlier guard raced lock-step and killed itself once the race journaled a config ``stopped``,
    which a loaded machine did not always do before the race's end (6d8da4c)."""
    other = {"steady": "cold", "cold": "steady"}[first]
    script = tmp_path / "killed_at_its_first_call.py"
    script.write_text(KILLED_AT_ITS_FIRST_CALL)

    def run(folder: Path, mode: str, **extra: str) -> tuple[subprocess.CompletedProcess, Counter]:
        env = base_env({**tuner_env(folder, 30), "CALLS": str(folder / "calls"), "TRITON_DIST_AUTOTUNE_TIMING": mode,
                        **extra})
        env.pop("RANK", None), env.pop("WORLD_SIZE", None)
        done = run_python([script], env, timeout=80)
        calls = Counter(int(v) for v in (folder / "calls").read_text().split()) if (folder / "calls").exists() \
            else Counter()
        return done, calls

    killed = tmp_path / "killed"
    killed.mkdir()
    done, calls = run(killed, first, KILL="2")
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert calls[2] == 1 and calls[3] == 0, calls
    records = [json.loads(line) for path in (killed / "cache").rglob("*.journal")
               for line in path.read_text().splitlines() if line.strip()]
    timed = {r["index"]: r for r in records if r["state"] == "measured"}
    assert sorted(timed) == [0, 1] and all(r.get("share") is True for r in timed.values()), records
    assert records[-1]["index"] == 2 and records[-1]["state"] == "started", records[-1]
    for mode in (first, other):
        folder = tmp_path / mode
        shutil.copytree(killed, folder)
        (folder / "calls").unlink()
        done, calls = run(folder, mode)
        assert done.returncode == 0, done.stderr[-3000:]
        chosen = int(done.stdout.split("CHOSE")[-1])
        assert calls[2] > 1 and calls[3] > 1, calls  # a suspect and a config never started: measured
        if mode == first:  # taken from the journal: only the final call of the choice runs them
            assert [calls[0], calls[1]] == [int(chosen == 0), int(chosen == 1)], (calls, chosen)
        else:  # a time of the other mode: measured again (a warm-up call and 3 samples at the least)
            assert calls[0] >= 4 and calls[1] >= 4, (calls, chosen)
