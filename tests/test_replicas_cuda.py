"""Replicas of one rank each timed alike on a real GPU (skipped without CUDA; run by the GPU calls of issue 41). The
scenario is in tests/scenarios/replicas_cuda_cases.py."""

from __future__ import annotations

import pytest
import torch
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "replicas_cuda_cases.py"

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.timeout(200)
def test_replicas_of_one_rank_each_time_their_shares_alike(tmp_path):
    """Each one-rank replica chose how to time from its own share of the configs: the replica holding the 0.02 ms
    config timed CUDA-graph replays, the one holding the 1.5 ms config timed eagerly, and the leaders' race compared
    times of both kinds (the decision then said "timed eagerly" on every replica, whatever it was). Replicas now
    time eagerly, all alike, and say so."""
    env = tuner_env(tmp_path, 60, TRITON_INTERPRET="0")
    ranks = run_ranks(CASES, 2, ["replicas_of_unequal_shares"], env=env, timeout=180)
    results = [r.result for r in ranks]
    assert all(r.returncode == 0 for r in ranks), describe(ranks)
    assert results[0]["decided"] == results[1]["decided"] == {"products": 1}, results
    for r in results:
        assert not any("on the device" in line for line in r["timing"]), r
        assert any("timed eagerly" in line for line in r["timing"]), r
