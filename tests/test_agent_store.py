"""The error of a rank that lost the job's key-value store names the process that hosted it.

Under torchrun the agent hosts the store (``TORCHELASTIC_USE_AGENT_STORE=true``). A scheduler or Kubernetes that ends
a job by its first process (the agent) takes the store with it, and every rank then loses it at its next exchange.
Before, their ``GroupTimeoutError`` said ``the process hosting it (rank 0 without torchrun) has ended`` on every
rank, rank 0 included, which was alive and saying so itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from harness import HERE, base_env, tuner_env

SCRIPT = HERE / "scenarios" / "agent_store_cases.py"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not reaped by whoever adopted it, does not)."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError, IndexError):
        return False


@pytest.mark.timeout(150)
def test_a_rank_that_lost_torchruns_agent_store_names_the_agent_not_rank_0(tmp_path):
    env = base_env({**tuner_env(tmp_path, 10), "AGENT_DIR": str(tmp_path)})
    err_path = tmp_path / "torchrun.err"
    with open(err_path, "w") as err, open(tmp_path / "torchrun.out", "w") as out:
        agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                                  "2", "--max-restarts", "0", "--monitor-interval", "0.1", str(SCRIPT), "tune"],
                                 env=env, stdout=out, stderr=err, start_new_session=True)
    ranks: list[int] = []
    try:
        deadline = time.monotonic() + 90
        ready = [tmp_path / f"ready.rank{r}" for r in (0, 1)]
        while not all(p.exists() and p.read_text() for p in ready):
            assert agent.poll() is None and time.monotonic() < deadline, err_path.read_text()[-3000:]
            time.sleep(0.1)
        ranks = [int(p.read_text()) for p in ready]
        time.sleep(1.0)  # the ranks are inside the tuning: warming up, at its exchanges
        agent.send_signal(signal.SIGKILL)  # the agent alone, as a scheduler ending the job's first process
        agent.wait(timeout=10)
        while any(_alive(pid) for pid in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in ranks), "a rank outlived the store it lost"
    finally:
        for pid in ranks:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    text = err_path.read_text()
    lost = [line for line in text.splitlines() if "lost the key-value store" in line
            and line.lstrip().startswith(("[rank", "triton_dist_tune"))]
    assert lost, text[-4000:]
    for line in lost:
        assert "(torchrun's agent) has ended" in line and "rank 0 without torchrun" not in line, line
    # the config each rank was inside is journaled as interrupted: before, its 'started' record stayed last, so the
    # next attempt measured it again as a suspect, and a second kill of the agent left it out as crashed
    journals = sorted((tmp_path / "cache").rglob("*.journal"))
    assert len(journals) == 2, journals
    for path in journals:
        last = json.loads(path.read_text().splitlines()[-1])
        assert last["state"] == "interrupted" and "the group's exchange failed" in last["error"], last
