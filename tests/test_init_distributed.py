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
