"""A tensor-parallel x data-parallel layer on 4 real gloo ranks (scenarios: tests/scenarios/layers_cases.py): the
two kinds of groups tuned from two threads at once."""

from __future__ import annotations

import pytest
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "layers_cases.py"
#: the exchanges' timeout (s)
T = 20
#: what torch's store client prints when a blocking store wait runs out
STORE_WARNING = "waitForInput"


@pytest.mark.timeout(240)
def test_two_threads_tuning_a_tp_and_a_dp_group_at_once_do_not_hold_each_others_store_requests(tmp_path):
    # before: a blocking store wait of one thread held the job store's one client, so the other thread's exchanges
    # (on its other group) waited behind it, and their peers behind them: two tunings of 0.8 s each took 6.7 s,
    # and every rank printed torch's store warnings, two per stalled second
    results = run_ranks(CASES, 4, ["tp_and_dp_tuned_on_two_threads"], env=tuner_env(tmp_path, T), timeout=200)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        assert all("ok" in r.result["results"][name] for name in ("tp", "dp")), describe(results)
        assert r.stderr.count(STORE_WARNING) == 0, r.stderr[-3000:]
    tp = [r.result["tp"] for r in results]
    dp = [r.result["dp"] for r in results]
    assert tp[0] == tp[1] and tp[2] == tp[3] and list(tp[0]) == ["64"] and list(tp[2]) == ["128"], tp
    assert dp[0] == dp[2] and dp[1] == dp[3], dp
