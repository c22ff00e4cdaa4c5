"""Issue 40's blame mechanisms on real gloo ranks, real kills and real journals (docs/fault-tolerance.md, "Blame
needs evidence from the config's own run"):

- a config is failed only by its own error: a sample one rank did not take, because it stopped its step at another
  config's failure, is missing, not failed, and is taken again before the round closes;
- blame in ``contextual_autotune`` needs the same evidence as in ``autotune``: every launch a crash could end inside
  is journaled (race launches too), and an attempt ended by the function's own error blames no config."""

from __future__ import annotations

import logging

import pytest
from harness import HERE, describe, run_cases, run_ranks, tuner_env

from triton_dist_tune.faults.journal import Journal
from triton_dist_tune.measure.guarding import Guarding
from triton_dist_tune.records import Outcome

CASES = HERE / "scenarios" / "blame_cases.py"
SAMPLE_CASES = ["sample_fails_exhaustive", "sample_fails_search"]


@pytest.fixture(scope="module")
def sample_jobs(tmp_path_factory):
    """Both modes of the failing sample, one after another in one job of 2 ranks."""
    return run_cases(CASES, 2, SAMPLE_CASES, env=tuner_env(tmp_path_factory.mktemp("blame"), 20), timeout=150)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("case", SAMPLE_CASES)
def test_a_sample_failing_on_one_rank_fails_that_config_alone(sample_jobs, case):
    """Config 4 passes its warm-up, then raises on rank 1 in the first sample of the first round; the five configs
    after it in that round's order get no sample on rank 1. Before: each was failed with "no sample" on every rank
    (exhaustive, ``n_repeat=1``: AllConfigsFailedError; the search: never screened again), and logging printed a
    traceback for each (``%.4f`` of a missing time). Now they are measured in a make-up step and the fastest,
    config 0, is chosen on every rank."""
    results = sample_jobs[case]
    for r in results:
        out = r.result
        assert out["failing"] == 4, describe(results)  # the premise: the first config of round 0's order
        assert out["result"] == {"ok": 0}, describe(results)
        by_index = {o["index"]: o for o in out["outcomes"]}
        assert by_index[4]["state"] == "failed" and "config 4 fails in its sample on rank 1" in by_index[4]["error"]
        for index in (0, 1, 2, 3, 5):
            assert by_index[index]["state"] in ("measured", "stopped"), by_index[index]
            assert by_index[index]["samples"] >= 1 and by_index[index]["per_rank"], by_index[index]
        assert "Logging error" not in r.stderr and "no sample" not in r.stderr, r.stderr[-3000:]


def test_a_final_outcome_without_a_time_is_logged_without_a_traceback(tmp_path, caplog):
    """Guarding._final formats a missing time as "-" (before: ``%.4f`` of None, a logging traceback)."""

    class Measured(Guarding):
        def __init__(self) -> None:
            self.journal = Journal(tmp_path / "j.journal")
            self.log = logging.getLogger("triton_dist_tune.test_blame")
            self.label = "[t]"

    with caplog.at_level(logging.INFO, logger="triton_dist_tune.test_blame"):
        Measured()._final(Outcome(3, "{x: 1}", "stopped", samples=0))
    assert "config 3 stopped: group time - ms +-0.0% over 0 sample(s) (" in caplog.text
    assert "this rank's own time - ms (the median of its own samples): {x: 1}" in caplog.text


# -- contextual_autotune: blame needs the same evidence as in autotune --------------------------------------------


def contextual_attempts(tmp_path, case: str, flag: str) -> list[list]:
    """Three jobs of ``case`` on 2 ranks in one cache folder: the first two with ``flag``=1, the last with 0."""
    env = tuner_env(tmp_path, 30, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    return [run_ranks(CASES, 2, [case], env={**env, "ATTEMPT": str(a), flag: "1" if a < 2 else "0"}, timeout=90)
            for a in range(3)]


@pytest.mark.timeout(300)
def test_a_contextual_crash_inside_a_race_launch_is_blamed_on_that_launch(tmp_path):
    """Two attempts are SIGKILLed inside config 0's first race launch (after the warm-ups of configs 0, 1, 2).
    The third leaves config 0 out as crashed and chooses config 1, the fastest of the rest. Before: each
    (config, state) was journaled once per attempt, so the race launch wrote nothing, and the last ``started``
    record named config 2 (warmed up last): config 2 was left out and config 0 measured again."""
    first, second, third = contextual_attempts(tmp_path, "killed_in_race", "KILL")
    assert [r.returncode for r in first + second] == [-9] * 4, describe(first + second)
    assert all(r.returncode == 0 for r in third), describe(third)
    for r in third:
        out = r.result
        assert out["states"] == ["failed", "measured", "measured"], out
        assert out["errors"][0].startswith("crashed: ranks [0, 1] were inside this config when 2"), out
        assert out["chosen"] == 1 and 0 not in out["launched"], out


@pytest.mark.timeout(300)
def test_the_functions_own_error_in_contextual_tuning_blames_no_config(tmp_path):
    """Two jobs whose tuned function raises its own error (after its kernel and all_reduce) in run 2, config 1's
    warm-up: every rank raises AutotuneError. The third job leaves no config out and chooses config 1. Before:
    the journals ended on config 1's ``started`` record, as after a crash, and config 1 was left out as "crashed
    ... ended without an error"."""
    first, second, third = contextual_attempts(tmp_path, "function_raises", "RAISE")
    for r in first + second:
        assert r.returncode == 0 and r.result["error"] == "AutotuneError", describe(first + second)
        assert "a transient error of the function's own I/O" in r.result["message"]
    for r in third:
        out = r.result
        assert out["states"] == ["measured"] * 3 and out["chosen"] == 1, describe(third)
