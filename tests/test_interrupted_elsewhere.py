"""Interruptions the fault docs once listed as not covered (docs/fault-tolerance.md, "Interruptions on one rank"): a
late rank whose first exchange back is a plain ``autotune`` step, a ``contextual_autotune`` rank interrupted while it
applies a run's result (an interruption inside ``key_fn`` is still not covered there). Real ranks (gloo), real
Triton kernels (interpreter)."""

from __future__ import annotations

import pytest
from harness import HERE, assert_calls_after_a_late_result_agree, describe, run_ranks, tuner_env

COUNTED_OUT = HERE / "scenarios" / "counted_out_cases.py"


@pytest.mark.timeout(150)
def test_a_contextual_rank_back_past_the_grace_through_a_plain_autotune_step_raises_at_its_counted_out_agreement(
        tmp_path):
    """Rank 1 is interrupted at the summary line of the group's first ``contextual_autotune`` call (after its last
    exchange) and comes back 6 s later, past rank 0's grace (2 s), sync_every=2; its first exchange back is an
    ``autotune`` tuning (key 8), which rank 0 makes after its agreement at call 2. Rank 0 counts rank 1 out at that
    agreement (RankFailedError); the two key-8 tunings pair; rank 1's agreement at call 2 raises the same
    RankFailedError, writing nothing, and calls 3 and 4 (the agreement at call 4) go on together. Before: rank 1's
    agreement at call 2 paired with rank 0's at call 4: both raised ExchangeError (ranks at different steps)."""
    env = {**tuner_env(tmp_path, 20), "PASSOVER_GRACE_S": "2", "LEAVER": "1", "SYNC_EVERY": "2",
           "PLAN_0": "c64*2,a8,c64*2", "PLAN_1": "c64!,z6,a8,c64*3"}
    results = run_ranks(COUNTED_OUT, 2, ["plan"], timeout=120, env=env)
    assert all(r.returncode == 0 for r in results), describe(results)
    said = {(r["rank"], r["op"], r["j"] if r["op"] != "a8" else 0, r.get("calls")): r
            for result in results for r in result.results if "op" in r}
    calls = {(r["rank"], r["calls"]): r for (rank, op, _, _), r in said.items() if op.startswith("c")}
    plain = [r for (rank, op, _, _), r in said.items() if op == "a8"]
    assert calls[(1, 1)]["error"] == "KeyboardInterrupt", describe(results)
    assert calls[(0, 2)]["error"] == "RankFailedError" and calls[(0, 2)]["seconds"] < 15, calls
    assert calls[(1, 2)]["error"] == "RankFailedError" and calls[(1, 2)]["seconds"] < 15, calls
    assert len(plain) == 2 and all(p["error"] is None for p in plain) and plain[0]["value"] == plain[1]["value"], plain
    for n in (3, 4):
        assert all(calls[(r, n)]["error"] is None and calls[(r, n)]["seconds"] < 15 for r in (0, 1)), calls
    ends = {r["rank"]: r for result in results for r in result.results if r.get("what") == "end"}
    assert ends[0]["agreed"] == ends[1]["agreed"] and ends[0]["exchanges"] == ends[1]["exchanges"], ends



@pytest.mark.timeout(150)
def test_a_contextual_rank_back_past_the_grace_through_a_plain_autotune_step_interrupted_again_still_raises_there(
        tmp_path):
    """As above, but rank 1's key-8 tuning (its first exchange back, which read its record counted out at the
    agreement at call 2) is interrupted again, at its decision's line (after that tuning's last exchange), and rank 1
    calls again at once. Rank 1's agreement at call 2 still raises RankFailedError, writing nothing, and calls 3 and
    4 go on together. Found by the closing review R87: the second leave dropped the step kept from the first record
    (``LeavingChannel._out_at``), and rank 1's agreement at call 2 met rank 0's at call 4 (ExchangeError on both),
    then rank 1 waited T (20 s) at its own call 4."""
    env = {**tuner_env(tmp_path, 20), "PASSOVER_GRACE_S": "2", "LEAVER": "1", "SYNC_EVERY": "2",
           "PLAN_0": "c64*2,a8,c64*2", "PLAN_1": "c64!,z6,a8!,c64*3"}
    results = run_ranks(COUNTED_OUT, 2, ["plan"], timeout=120, env=env)
    assert all(r.returncode == 0 for r in results), describe(results)
    said = [r for result in results for r in result.results if "op" in r]
    calls = {(r["rank"], r["calls"]): r for r in said if r["op"].startswith("c")}
    plain = {r["rank"]: r for r in said if r["op"].startswith("a8")}
    assert calls[(1, 1)]["error"] == "KeyboardInterrupt" and plain[1]["error"] == "KeyboardInterrupt", describe(results)
    assert plain[0]["error"] is None, plain
    assert calls[(0, 2)]["error"] == calls[(1, 2)]["error"] == "RankFailedError", calls
    for n in (3, 4):
        assert all(calls[(r, n)]["error"] is None and calls[(r, n)]["seconds"] < 15 for r in (0, 1)), calls


PASSOVER = HERE / "scenarios" / "passover_cases.py"


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("n", "at", "then"), [(2, "applying last", "same"), (3, "applying last", "other"),
                                               (2, "applying decided", "same"), (3, "applying decided", "other"),
                                               (2, "decision line", "same"), (3, "decision line", "other"),
                                               (2, "signal in apply", "same"), (3, "signal in apply", "other")])
def test_a_contextual_rank_interrupted_as_it_applies_a_runs_result_ends_its_calls_as_its_peers_do(tmp_path, n, at,
                                                                                                  then):
    """Rank 1 is interrupted after a run's exchange of a ``contextual_autotune`` tuning call of key 64 returned:
    ``applying ...`` as it begins to apply the result (the exchange after the final run, the call's last, or run 5's,
    which decides the key), ``decision line`` at its rank log's line of the first key that result decides (two keys
    decided there: 64 and 128, under ALWAYS_TUNE, rank 1's configs costing the other way round from its second call),
    ``signal in apply``: SIGINT while it applies that result's first step (the chaos run's case, job seed 707996490).
    Then every rank calls key 64 again and key 128 (``then``: in that order, or the other). Promised: the peers wait
    no deadline, every later call ends alike on every rank (no error, one config per key everywhere, the group's),
    and the decisions agree. ``applying``: rank 1 applies the result at its next call, as where the interruption
    ends its wait for it. ``decision line``, ``signal in apply``: rank 1 applies the rest of the result before the
    interruption is raised on (the signal's handler runs then). Before: the result stayed unapplied on rank 1
    (``applying last``: its next call was the group's first again, alone, and waited T + T/10 at the journal
    exchange; ``applying decided``, ``decision line``, ``signal in apply``: a key its peers
    decided there was theirs alone, and rank 1 tuned it again alone and chose the other config)."""
    env = {**tuner_env(tmp_path, 30), "AT": at, "NEXT": then, "SIG": "INT"}
    if not at.endswith("last"):
        env |= {"TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1", "LATE_COST": "1"}
    if at in ("decision line", "signal in apply"):
        env["TWO"] = "1"
    results = run_ranks(PASSOVER, n, ["contextual_interrupted_waiting_for_its_result"], timeout=180, env=env)
    said = {(r["rank"], r["what"]): r for result in results for r in result.results}
    assert all(r.returncode == 0 for r in results), describe(results)
    assert said[(1, "first")]["error"] == "KeyboardInterrupt", describe(results)
    for rank in (r for r in range(n) if r != 1):
        first = said[(rank, "first")]
        assert first["runs"] == 7, first
        assert first["error"] == (None if at.endswith("last") else "RankFailedError"), first
        assert first["seconds"] < 20, first
    assert_calls_after_a_late_result_agree(said, n, then, tmp_path / "logs" / "rank-1.log", at.startswith("applying"),
                                           15)



HELD = HERE / "scenarios" / "held_signal_cases.py"


@pytest.mark.timeout(150)
def test_a_signal_while_a_rank_applies_an_error_result_still_reaches_its_handler(tmp_path):
    """The function raises on rank 1 in a run of a ``contextual_autotune`` tuning; as each rank logs that error,
    inside its application of the run's exchange result, a SIGTERM comes, whose handler (the program's) sets a flag.
    Promised: every rank raises the error, and the handler runs on every rank (the held signal is raised to it as the
    application raises), its handler put back. Before (the closing review of the eighty-second session): the
    application raised before the held signals were raised, and the handler never ran: a graceful shutdown lost."""
    results = run_ranks(HELD, 2, ["signal_while_an_error_is_applied"], timeout=120, env=tuner_env(tmp_path, 20))
    assert all(r.returncode == 0 for r in results), describe(results)
    said = [r for result in results for r in result.results]
    assert len(said) == 2 and all(r["error"] == "AutotuneError" for r in said), describe(results)
    assert all(r["handler_ran"] and r["handler_back"] for r in said), describe(results)
