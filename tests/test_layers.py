"""A tensor-parallel x data-parallel layer on 4 real gloo ranks (scenarios: tests/scenarios/layers_cases.py): the
two kinds of groups tuned from two threads at once, and a rank of one tensor-parallel group killed mid-tuning."""

from __future__ import annotations

import re

import pytest
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "layers_cases.py"
#: the exchanges' timeout (s)
T = 20
#: what torch's store client prints when a blocking store wait runs out
STORE_WARNING = "waitForInput"


def two_threads_tuned(tmp_path, case: str) -> list:
    """The 4 ranks of ``case`` (a TP and a DP group tuned from two threads of each rank), each of whose tunings
    ended ok on every rank with no store warning printed."""
    results = run_ranks(CASES, 4, [case], env=tuner_env(tmp_path, T), timeout=200)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        assert all("ok" in r.result["results"][name] for name in ("tp", "dp")), describe(results)
        assert r.stderr.count(STORE_WARNING) == 0, r.stderr[-3000:]
    return results


@pytest.mark.timeout(240)
def test_two_threads_tuning_a_tp_and_a_dp_group_at_once_do_not_hold_each_others_store_requests(tmp_path):
    # before: a blocking store wait of one thread held the job store's one client, so the other thread's exchanges
    # (on its other group) waited behind it, and their peers behind them: two tunings of 0.8 s each took 6.7 s,
    # and every rank printed torch's store warnings, two per stalled second
    results = two_threads_tuned(tmp_path, "tp_and_dp_tuned_on_two_threads")
    tp = [r.result["tp"] for r in results]
    dp = [r.result["dp"] for r in results]
    assert tp[0] == tp[1] and tp[2] == tp[3] and list(tp[0]) == ["64"] and list(tp[2]) == ["128"], tp
    assert dp[0] == dp[2] and dp[1] == dp[3], dp


@pytest.mark.timeout(240)
def test_a_thread_that_starts_tuning_while_another_is_inside_a_blocking_store_wait_is_not_held_by_it(tmp_path):
    # before: ranks 0 and 2 printed torch's store warnings: thread A's first store wait (for its tensor-parallel
    # peer, which comes only after thread B's first data-parallel exchange) blocked the job store's one client, so
    # B's first requests waited behind it until its slice ran out (a_waits ['DistStoreError', ...])
    results = two_threads_tuned(tmp_path, "dp_started_while_tp_waits")
    for r in results[0::2]:
        assert r.result["a_waits"][0] == "returned", describe(results)  # A's first wait, which B's requests end


def killed(case: str, tmp_path):
    results = run_ranks(CASES, 4, [case], env=tuner_env(tmp_path, T), timeout=200, stuck=[3])
    assert [r.returncode for r in results[:3]] == [0, 0, 0], describe(results)
    assert results[0].result["decided"] == results[1].result["decided"], describe(results)  # the other group tuned
    assert "ok" in results[0].result["result"], describe(results)
    return results[2].result["result"]


@pytest.mark.timeout(240)
def test_a_tp_ranks_peer_killed_mid_tuning_is_named_by_global_rank_and_so_is_the_survivor(tmp_path):
    # before: 'rank 0 failed in config 0 ...; then: ... (global ranks [2, 3]) ...': the survivor, global rank 2,
    # named itself by group rank alone, and the message (which names global ranks further on) got no line saying
    # which global rank that is: global rank 0, of the other group, healthy, read as the one that failed
    error = killed("killed_in_tp", tmp_path)
    message = error.get("message", "")
    assert error.get("error") in ("RankFailedError", "GroupTimeoutError"), error
    assert "global rank 3" in message or "global [3]" in message, message
    assert not re.search(r"(?<!group )\brank 0 failed", message), message


@pytest.mark.timeout(240)
def test_a_lost_store_is_named_as_global_rank_0s_on_a_group_that_renumbers_its_ranks(tmp_path):
    # before: '... rank 0 of group 'ranks [2, 3]' lost the key-value store ...: the process hosting it (rank 0,
    # started without torchrun's agent) has ended. The ranks named are ranks of group 'ranks [2, 3]': group rank 0
    # is global rank 2, 1 is 3': the store's host, global rank 0, read as global rank 2, the survivor itself
    error = killed("killed_in_tp_store_gone", tmp_path)
    message = error.get("message", "")
    assert "lost the key-value store" in message, error
    assert "(global rank 0, started without torchrun's agent)" in message, message
    assert "group rank 0 is global rank 2" not in message, message
    assert not re.search(r"(?<!group )\brank 0 failed", message), message
