"""Settings that change the steps of a tuning are agreed: ranks whose environments differ in one get the same
``MismatchError`` naming it, at the first exchange, instead of running different steps (real gloo ranks)."""

from __future__ import annotations

import pytest
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "agreement_cases.py"


def run(case, tmp_path, per_rank_env):
    results = run_ranks(CASES, 2, [case], env=tuner_env(tmp_path, 20), timeout=100, per_rank_env=per_rank_env)
    assert all(r.returncode == 0 for r in results), describe(results)
    return [r.result for r in results]


@pytest.mark.timeout(120)
def test_always_tune_on_one_rank_only_is_a_clear_error_on_every_rank(tmp_path):
    results = run("always_tune_differs", tmp_path, {1: {"TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1"}})
    for result in results:
        assert result["result"]["error"] == "MismatchError", results
        message = result["result"]["message"]
        assert "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE" in message and "ranks [0]: off" in message
        assert "ranks [1]: on" in message
        assert result["seconds"] < 5  # at the first agreement (the deadline is 20 s)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("variable, value", [("TRITON_DIST_AUTOTUNE_MAX_RUNS", "50"),
                                             ("TRITON_DIST_AUTOTUNE_SYNC_EVERY", "4")])
def test_contextual_steps_set_differently_on_one_rank_are_a_clear_error_on_every_rank(tmp_path, variable, value):
    results = run("contextual_steps_differ", tmp_path, {1: {variable: value}})
    messages = [result["result"].get("message") for result in results]
    for result in results:
        assert result["result"].get("error") == "MismatchError", results
        assert variable in result["result"]["message"]
        assert f"{variable.rsplit('_', 1)[-1].lower()}" in result["result"]["message"]
        assert result["seconds"] < 5  # at the end of the first run (the deadline is 20 s)
    assert messages[0] == messages[1]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("texts, shown", [(("v2", "v3"), ("'v2'", "'v3'")),
                                          (("x" * 150 + "2", "x" * 150 + "3"), ("sha256", "151 characters"))],
                         ids=["short", "long, differing past what is shown"])
def test_cache_key_extra_that_differs_between_ranks_is_a_clear_error_on_every_rank(tmp_path, texts, shown):
    """Group rank 0 alone reads the cache, for the entry its own ``cache_key_extra`` names. Before, a rank whose
    text differed (a version read from its own environment) was never told: it was served rank 0's entry, and the
    decision was written under rank 0's text. Now the first agreement carries the text (a long one as its start,
    length and hash) and every rank raises the same ``MismatchError`` naming it, at once."""
    results = run("cache_key_extra_differs", tmp_path, {0: {"EXTRA": texts[0]}, 1: {"EXTRA": texts[1]}})
    messages = {result["result"].get("message") for result in results}
    for result in results:
        assert result["result"].get("error") == "MismatchError", results
        message = result["result"]["message"]
        assert "differ in cache_key_extra" in message and all(s in message for s in shown), message
        assert result["seconds"] < 5  # at the first agreement (the deadline is 20 s)
    assert len(messages) == 1, messages


@pytest.mark.timeout(120)
def test_a_cache_key_extra_function_returning_a_number_still_tunes(tmp_path):
    """The agreement's text of ``cache_key_extra`` is made of what its function returns, as the entry's name is:
    a function returning 7 tuned as before the text was agreed (where the agreement took the text as given, every
    rank raised ``TypeError`` before its first exchange)."""
    results = run("cache_key_extra_not_text", tmp_path, {})
    assert [result["result"].get("ok") for result in results] in ([16, 16], [32, 32]), results


@pytest.mark.timeout(120)
def test_an_undecided_policy_set_on_one_rank_only_is_a_clear_error_on_every_rank(tmp_path):
    # not agreed (serving takes one exchange, tuning none before its first agreement): the step check of every
    # exchange names both steps at once
    results = run("undecided_differs", tmp_path, {1: {"TRITON_DIST_AUTOTUNE_UNDECIDED": "first"}})
    for result in results:
        assert result["result"].get("error") == "ExchangeError", results
        assert "TRITON_DIST_AUTOTUNE_UNDECIDED" in result["result"]["message"]
        assert result["seconds"] < 5  # at once (the deadline is 20 s)


@pytest.mark.timeout(200)
def test_contextual_always_tune_on_one_rank_only_never_lets_the_ranks_choose_apart(tmp_path):
    """The journals of an earlier job hold config 0 failed (a cut kept them); a later job sets ALWAYS_TUNE on rank 1
    only, which leaves other jobs' records out of rank 1's view alone. Before, rank 0 resumed config 0 as failed and
    launched config 1 while rank 1 launched config 0: neither rank's step ever counted, the stalled track was forced,
    and the ranks chose apart (rank 0 config 1, rank 1 config 0), with no error. Now every rank gets the same
    MismatchError naming the variable at the call's first exchange, as ``autotune``'s ranks do."""
    env = tuner_env(tmp_path, 20)
    first = run_ranks(CASES, 2, ["contextual_always_tune_differs"], timeout=100,
                      env={**env, "PHASE": "1", "TRITON_DIST_AUTOTUNE_MAX_RUNS": "1",
                           "TRITON_DIST_AUTOTUNE_JOB_ID": "job-a"})
    assert all(r.returncode == 0 for r in first), describe(first)
    assert [r.result["chosen"] for r in first] == [[1], [1]], describe(first)  # forced: a cut, journals kept
    results = run("contextual_always_tune_differs", tmp_path, {0: {"TRITON_DIST_AUTOTUNE_JOB_ID": "job-b"},
                                                               1: {"TRITON_DIST_AUTOTUNE_JOB_ID": "job-b",
                                                                   "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1"}})
    chosen = [result["chosen"] for result in results]
    errors = [result["result"].get("error") for result in results]
    assert errors == ["MismatchError", "MismatchError"], (chosen, results)
    for result in results:
        message = result["result"]["message"]
        assert "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE" in message and "ranks [0]: off" in message, message
        assert "ranks [1]: on" in message, message
