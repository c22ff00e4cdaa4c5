"""``contextual_autotune`` on a real GPU with real ranks (skipped without CUDA; run by the GPU calls of issue 41):
what only compiling ahead shows, which happens on GPUs only. The scenarios are in
tests/scenarios/contextual_cuda_cases.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "contextual_cuda_cases.py"

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.timeout(200)
def test_a_rank_killed_while_compiling_ahead_is_given_up_on_from_its_last_beat(tmp_path):
    """Rank 1 is SIGKILLed as its share of the compiles ahead starts; rank 0 ends its share and waits at the exchange
    of compile failures, whose deadline is T (5 s) times the waves of compiles: 8 waves (two kernels of 64 configs,
    16 compile threads), 40 s. The call's failure board beats, so rank 0 raises GroupTimeoutError naming rank 1 as
    silent T + 1 s after its first look at the beats; rank 1's process on this host is gone, which rank 0's wait
    reads from 2 s on (:mod:`triton_dist_tune.group.departed`): either way under 25 s from the kill. Before, the
    board did not beat, and rank 0 waited the 40 s."""
    env = tuner_env(tmp_path, 5, FAULT_DIR=str(tmp_path), TRITON_INTERPRET="0")
    ranks = run_ranks(CASES, 2, ["killed_compiling"], env=env, timeout=150)
    assert ranks[1].returncode == -9, describe(ranks)
    result = ranks[0].result
    assert result["error"] == "GroupTimeoutError", describe(ranks)
    assert "precompile" in result["message"], result["message"]
    assert ("showed no sign of life" in result["message"]
            or "group rank 1 (global 1) is gone without counting out" in result["message"]), result["message"]
    killed = float(Path(tmp_path, "killed").read_text())
    assert result["ended"] - killed < 25, (result["ended"] - killed, result["message"])
