"""Interruptions the fault docs once listed as not covered (docs/fault-tolerance.md, the ``BaseException`` row): a
late rank whose first exchange back is a plain ``autotune`` step, a ``contextual_autotune`` rank interrupted while it
applies a run's result, an interruption inside ``key_fn``. Real ranks (gloo), real Triton kernels (interpreter)."""

from __future__ import annotations

import pytest
from harness import HERE, describe, run_ranks, tuner_env

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
