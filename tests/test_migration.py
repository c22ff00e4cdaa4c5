"""Code ported from ``triton.autotune`` (issue: a kernel developer migrating): what differs from stock Triton is
said, never done silently. Real gloo ranks, Triton's interpreter; the scenarios are in
tests/scenarios/migration_cases.py."""

from __future__ import annotations

import pytest
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "migration_cases.py"


def run(case, n, tmp_path):
    results = run_ranks(CASES, n, [case], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    return results


@pytest.mark.triton_dependent
@pytest.mark.timeout(180)
def test_an_early_config_prune_that_makes_a_config_is_an_error_on_every_rank(tmp_path):
    """Stock Triton benchmarks the configs ``early_config_prune`` returns, new ones included. The group tunes the
    kernel's own configs by index: before, the new config was dropped silently (config 0 alone was tuned, and a
    pruning returning only new configs raised Triton's "no valid configs after pruning")."""
    results = run("prune_makes_a_config", 2, tmp_path)
    for r in results:
        res = r.result
        assert res.get("error") == "ContextualPruningError", describe(results)
        assert res["bad_input"] and res["triton_error"], res
        assert "not one of the kernel's configs" in res["message"] and "BLOCK: 256" in res["message"], res
        assert 256 not in res["launched"], res


@pytest.mark.triton_dependent
@pytest.mark.timeout(180)
def test_an_early_config_prune_returning_equal_copies_tunes_the_kernels_configs(tmp_path):
    results = run("prune_returns_equal_copies", 2, tmp_path)
    bests = [r.result["best"] for r in results]
    for r in results:
        assert r.result["ok"] and r.result["launched"] == [32, 64], describe(results)
    assert bests[0] == bests[1], bests


@pytest.mark.triton_dependent
@pytest.mark.timeout(150)
def test_a_stock_autotuned_kernel_needing_a_driver_under_the_interpreter_names_the_cause(tmp_path):
    """Under TRITON_INTERPRET=1 a stock @triton.autotune kernel's own benchmarking asks for a GPU driver. The
    error said to set TRITON_INTERPRET=1, which was set; it names Triton's benchmarking and contextual_autotune."""
    res = run("stock_autotune_inside_autotune", 1, tmp_path)[0].result
    assert res["interpret"] == "1" and res["error"] == "AllConfigsFailedError", res
    message = res["message"]
    assert "active drivers" in message and "set TRITON_INTERPRET=1" not in message, message
    assert "although TRITON_INTERPRET is set" in message and "contextual_autotune" in message, message
