"""A rank interrupted as its store write of its part of an exchange returns, before its channel counted that part
written (a signal that came during the write; found by ``chaos.py --faults interrupt``'s ``write`` trigger). Real
ranks (gloo)."""

from __future__ import annotations

import pytest
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "interrupted_write_cases.py"
#: the exchanges' deadline (s), and the most seconds a call may take here (a wait for T is 4x that)
T, PROMPT_S = 60, 15


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("leaver", "at"), [(1, "3"), (0, "3"), (0, "decision written"), (1, "decision written")])
def test_a_rank_interrupted_as_its_exchange_write_returns_stays_in_step(tmp_path, leaver, at):
    """Group rank ``leaver`` is interrupted (SIGINT) as its write of its part of an exchange of the first call's
    tuning returns (rank 1: its message; rank 0: the exchange's result), held 0.5 s so that the peer reads that part
    first and goes on: exchange 3, or the tuning's last (``decision written``). The leaver catches it and calls on:
    every later call returns on both ranks, promptly, with the same decisions. Before, the rank wrote its "left"
    record over that part (its channel had not counted it written), which the peer had read already: its call again
    began one exchange behind the peer's, and both raised ExchangeError, then MismatchError at every call, and a
    GroupTimeoutError after T. At the decision, rank 0 (which awaits no result) did not keep the decision its peer
    kept: its next call of the key tuned it again, alone (MismatchError, then a GroupTimeoutError)."""
    env = {**tuner_env(tmp_path, T), "LEAVER": str(leaver), "AT": at, "HOLD": "0.5", "PLAN": "4,4,8,4,8"}
    results = run_ranks(CASES, 2, ["written_then_interrupted"], env=env, timeout=180)
    assert all(r.returncode == 0 for r in results), describe(results)
    said = {(r["rank"], r["what"]): r for result in results for r in result.results}
    assert said[(leaver, 0)]["error"] == "KeyboardInterrupt", describe(results)
    assert said[(1 - leaver, 0)]["error"] in (None, "RankFailedError"), describe(results)
    for i in range(1, 5):
        assert all(said[(r, i)]["error"] is None for r in (0, 1)), describe(results)
        assert all(said[(r, i)]["seconds"] < PROMPT_S for r in (0, 1)), describe(results)
    assert said[(0, 4)]["decided"] == said[(1, 4)]["decided"] and len(said[(0, 4)]["decided"]) == 2, \
        describe(results)
