"""A ``contextual_autotune`` hot call settling a new key in a key-value store whose host ended. Real ranks (gloo)."""

from __future__ import annotations

import pytest
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "newkey_store_gone_cases.py"


@pytest.mark.timeout(120)
def test_a_hot_call_settling_a_new_key_after_the_store_host_ended_raises_the_tuners_error(tmp_path):
    """Rank 0, the store's host, ends after the group's first call; rank 1's next call meets an undecided key and
    settles it (``contextual/newkeys.py``). It raises ``GroupTimeoutError`` saying the store was lost, as every
    other store request of the tuner does (``group/store.py`` ``_request``). Before, the settlement's raw
    ``torch.distributed.DistNetworkError`` (a broken pipe) escaped the call (found by ``chaos.py --faults
    interrupt``, whose rank 0 then ended its program before its peer's last calls)."""
    results = run_ranks(CASES, 2, ["host_ended_before_a_hot_call_settles"], env=tuner_env(tmp_path, 20), timeout=100)
    said = {(r["rank"], r["what"]): r for result in results for r in result.results}
    assert all("error" not in said[(r, 0)] for r in (0, 1)), describe(results)
    assert said[(1, 1)].get("error") == "GroupTimeoutError", describe(results)
    assert "key-value store" in said[(1, 1)]["message"], describe(results)
