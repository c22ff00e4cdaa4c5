"""The failure board's beat under compile load, on a real GPU with real ranks (skipped without CUDA; run by the GPU
calls of issue 41). The scenario is in tests/scenarios/beats_cuda_cases.py."""

from __future__ import annotations

import pytest
import torch
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "beats_cuda_cases.py"

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.timeout(300)
def test_a_rank_compiling_in_threads_still_beats(tmp_path):
    """Two ranks on one GPU tune a 72-config Triton GEMM whose kernels compile in threads of each rank's process
    (16 at most), with T = 4 s: a rank whose board is silent for 5 s would be taken for dead by the other. Both
    tune to the end, decide the same config, and compute the right product: the beat thread is not starved. A Triton
    cache of the test's own: every kernel is compiled."""
    env = tuner_env(tmp_path, 4, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path / "triton"))
    ranks = run_ranks(CASES, 2, ["gemm_compiles_in_threads"], env=env, timeout=240)
    results = [r.result for r in ranks]
    assert all(r.get("ok") is True for r in results), describe(ranks)
    assert results[0]["decided"] == results[1]["decided"] and len(results[0]["decided"]) == 1, results
    print("longest oversleep of a 0.1 s sleep per rank:", [r["lag"] for r in results])
