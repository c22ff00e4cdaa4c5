"""``init_distributed`` with launcher variables that cannot start a job: a BadInputError naming the variable, before
any store is started or waited for (in this process: nothing is initialized when it raises)."""

from __future__ import annotations

import time

import pytest

import triton_dist_tune as tdt


@pytest.fixture
def launcher(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                 "PMI_SIZE", "PMIX_RANK", "TORCHELASTIC_USE_AGENT_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    return monkeypatch


@pytest.mark.timeout(30)
@pytest.mark.parametrize("port", ["abc", "", "99999", "-5", "0"])
def test_a_master_port_that_is_no_port_is_named(launcher, port):
    launcher.setenv("RANK", "0")
    launcher.setenv("WORLD_SIZE", "1")
    launcher.setenv("MASTER_PORT", port)
    # was: ValueError "invalid literal for int()" or TypeError "incompatible constructor arguments" from TCPStore
    with pytest.raises(tdt.BadInputError, match=f"MASTER_PORT='{port}' is not a port"):
        tdt.init_distributed(timeout_s=5)


@pytest.mark.timeout(30)
def test_a_rank_that_is_not_a_number_is_named(launcher):
    launcher.setenv("RANK", "x")
    launcher.setenv("WORLD_SIZE", "2")
    with pytest.raises(tdt.BadInputError, match="RANK='x' is not a number"):  # was: "none of [...] is set"
        tdt.init_distributed(timeout_s=5)


@pytest.mark.timeout(30)
def test_a_rank_outside_the_world_is_refused_at_once(launcher):
    launcher.setenv("RANK", "2")
    launcher.setenv("WORLD_SIZE", "1")
    launcher.setenv("MASTER_PORT", "1")  # nobody listens: before, a client waited timeout_s for it
    t0 = time.monotonic()
    with pytest.raises(tdt.BadInputError, match="rank 2 is not below the world size 1"):
        tdt.init_distributed(timeout_s=5)
    assert time.monotonic() - t0 < 2


@pytest.mark.timeout(240)
def test_a_job_restarted_on_two_nodes_starts_again_and_tunes(tmp_path):
    """torchrun on two nodes (two agents on this host, ``--nnodes 2``, ``--max-restarts 1``): node 0's rank exits
    3 after ``init_distributed``. Its agent restarts its workers with ``TORCHELASTIC_RESTART_COUNT`` 1; node 1's
    agent restarts its own for the membership change with the count still 0. Both ranks of the next attempt start
    torch.distributed and tune alike (the tuner's exchanges under the attempt's name), node 1 spending no restart.
    Before: the store prefix was ``attempt<restart count>/``: node 1's restarted rank read the failed attempt's
    keys under ``attempt0/`` and failed too (node 1's restart spent: its next rank read count 1); with no restart
    left there, the ranks waited on different keys until ``init_distributed``'s deadline (``DistStoreError: wait
    timeout ... keys: /attempt1//0//cpu//0/1``). The tuner's own keys were named by the count too."""
    import subprocess
    import sys
    from pathlib import Path

    from harness import HERE, base_env, free_port, parse_results, tuner_env

    port = free_port()
    env = base_env(tuner_env(tmp_path, 30, INIT_TIMEOUT_S="40", FAULT_DIR=str(tmp_path)))
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--max-restarts", "1", "--monitor-interval", "0.2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
               f"127.0.0.1:{port}", "--rdzv-id", f"two-nodes-{port}",
               str(Path(HERE) / "scenarios" / "restart_cases.py"), "node_0_fails_first"]
    agents = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    outputs = [agent.communicate(timeout=200) for agent in agents]
    results = [r for out, _ in outputs for r in parse_results(out)]
    assert all(agent.returncode == 0 for agent in agents), [err[-3000:] for _, err in outputs]
    restarts = sorted((r["node"], r["restart"]) for r in results if r.get("started"))
    assert restarts == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "0")], results  # node 1's count stayed 0
    tuned = [r for r in results if "chosen" in r]
    assert len(tuned) == 2 and tuned[0]["chosen"] == tuned[1]["chosen"], results
    assert tuned[0]["states"] == tuned[1]["states"] and "failed" not in tuned[0]["states"], results
