"""A ``contextual_autotune`` rank interrupted inside a hot call's new-key settlement. Real ranks (gloo)."""

from __future__ import annotations

import pytest
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "newkey_interrupted_cases.py"
#: the exchanges' deadline (s), and the most a call may take here
T, PROMPT_S = 20, 10


@pytest.mark.timeout(150)
@pytest.mark.parametrize("at", ["in the wait", "after now", "in the last compare"])
def test_a_rank_interrupted_in_a_new_key_settlement_leaves_no_peer_waiting(tmp_path, at):
    """Rank 0 is interrupted (SIGINT) while its hot call waits in the settlement of key 128, after its ``add``; rank
    1, a second late, completes the count (``now``) and goes on to tune the key. Promised (docs/fault-tolerance.md,
    the ``BaseException`` row): no rank waits for ``T``; every later call ends alike on both ranks. Before, rank 1
    raised ``GroupTimeoutError`` after ``T + T/10`` at the journal exchange, and the key stayed pending: now rank 0
    writes ``later`` first (rank 1 returns). ``after now``: rank 0 completes the count and is interrupted as its
    settlement returns: rank 1 goes on to tune and raises ``RankFailedError`` at once (before: ``T + T/10``).
    ``in the last compare``: rank 0 settles key 128 alone (rank 1 met only a decided key) and is interrupted as it
    writes ``later``: the key is ``later`` everywhere, so no peer hears of it and the next calls tune the key on both
    ranks (before, rank 0's promise stood: its "left" record made rank 1 raise ``RankFailedError`` in call 2)."""
    results = run_ranks(CASES, 2, ["interrupted_in_the_settlement"], env={**tuner_env(tmp_path, T), "AT": at,
                                                                     "TRITON_DIST_AUTOTUNE_NEW_KEY_GRACE":
                                                                     "1" if at == "in the last compare" else "10"},
                        timeout=120)
    assert all(r.returncode == 0 for r in results), describe(results)
    said = {(r["rank"], r["what"]): r for result in results for r in result.results}
    assert said[(0, 1)]["error"] == "KeyboardInterrupt", describe(results)
    assert said[(1, 1)]["error"] == (None if at != "after now" else "RankFailedError"), describe(results)
    assert said[(1, 1)]["seconds"] < PROMPT_S, describe(results)
    for i in (2, 3):
        assert said[(0, i)]["error"] == said[(1, i)]["error"] and said[(0, i)]["seconds"] < PROMPT_S, describe(results)
    assert said[(0, 3)]["decided"] == said[(1, 3)]["decided"], describe(results)
    if at == "in the last compare":  # every key ended "later": no peer learns of the interruption; key 128 is tuned
        assert said[(1, 2)]["error"] is None and any(d.startswith("(128,") for d in said[(1, 3)]["decided"]), \
            describe(results)
