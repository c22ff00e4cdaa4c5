"""Review A: ``autotune`` on bad or unusual input, on 1 and 2 gloo ranks. Real ranks where the defect needs them."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import describe, run_ranks, tuner_env

from triton_dist_tune.errors import describe_error

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "review_a_cases.py"


class StrFails(Exception):
    def __str__(self) -> str:
        raise ValueError("no text")


def test_describe_error_of_an_exception_whose_str_raises():
    assert describe_error(StrFails()) == "StrFails: <str() of the StrFails raised ValueError>"


@pytest.mark.timeout(300)
def test_a_config_raising_an_exception_without_text_on_one_rank_is_left_out_on_every_rank(tmp_path):
    """A config raised, on rank 1 only, an exception whose ``str()`` raises: the tuner's own description of it
    raised on rank 1, which left the protocol (ExchangeError: 'at another step of the protocol') while rank 0 raised
    RankFailedError ('ended their process to leave a collective'). Now the config is left out on every rank and
    both choose config 1."""
    results = run_ranks(SCENARIO, 2, ["error_without_text"], env=tuner_env(tmp_path, timeout=60), timeout=240)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        assert r.result["ok"] == [2.0, 2.0, 2.0, 2.0], describe(results)
        assert r.result["decided"] == 1, describe(results)


@pytest.mark.timeout(300)
def test_a_key_a_rank_tuned_alone_before_init_is_tuned_by_the_group_after_it(tmp_path):
    """Called before ``init_distributed`` in a 2-rank job, each rank tuned alone (with a warning) and chose
    differently; the choice went into the default group's table, so after ``init_distributed`` the same key kept
    running rank 0's choice on rank 0 and rank 1's on rank 1, for the life of the process. Now the group tunes it."""
    results = run_ranks(SCENARIO, 2, ["alone_before_init"], env=tuner_env(tmp_path, timeout=60), timeout=240)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert results[0].result["before"] != results[1].result["before"], describe(results)  # alone: they differ
    assert results[0].result["after"] == results[1].result["after"], describe(results)
    assert results[0].result["decided"] == results[1].result["decided"] is not None, describe(results)
