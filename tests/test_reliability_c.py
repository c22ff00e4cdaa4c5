"""Issue 34 defects 1, 2, 3 and 8, on real ranks (gloo, Triton's interpreter): a cut keeps the best measured and is
provisional, a search ends only on evidence (both tuners), a resumed search replays its stages."""

from __future__ import annotations

import pytest
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "reliability_c_cases.py"


@pytest.mark.timeout(120)
def test_a_function_search_whose_first_look_all_fails_goes_on_to_untried_configs(tmp_path):
    """Defect 2: the 16 configs of the first look raise on every rank (before: no leaders, so no next stage, and
    AllConfigsFailedError after 16 of 80 configs while 64 work). The search screens untried configs until it has
    leaders and chooses a working config, alike on every rank."""
    results = run_ranks(CASES, 2, ["function_first_look_fails"], env=tuner_env(tmp_path, timeout=30), timeout=110)
    assert all(r.returncode == 0 for r in results), describe(results)
    first, second = (r.result for r in results)
    assert first["error"] is None, first
    assert first["chosen"] == second["chosen"] and first["chosen"] not in first["failing"], (first, second)
    assert first["failing"] == second["failing"] and len(first["failing"]) == 16
    assert first["tried"] > 16 and first["ok"] and second["ok"], (first, second)


@pytest.mark.timeout(120)
def test_a_function_search_where_every_config_fails_raises_all_configs_failed(tmp_path):
    """The other half of the contract: when every kept config fails, the search tries every one of them (ignoring
    its cap on configs screened) and every rank raises AllConfigsFailedError."""
    results = run_ranks(CASES, 2, ["function_first_look_fails"], env=tuner_env(tmp_path, timeout=30, FAILING="80"),
                        timeout=110)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        assert r.result["error"] == "AllConfigsFailedError" and r.result["tried"] == 80, r.result
