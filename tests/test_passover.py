"""A rank interrupted after its turn's last exchange (``group/passover.py``): its peers' next tuning goes on where
the rank calls again at once, and raises RankFailedError naming the interruption within a short grace where it does
not (its process ended, or it calls the tuner no more), never the exchange's whole deadline. Real ranks (gloo)."""

from __future__ import annotations

import pytest
from harness import HERE, assert_calls_after_a_late_result_agree, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "passover_cases.py"
#: the exchanges' deadline of these tests (s): a wait for it is 4x the bound of a prompt answer (:data:`PROMPT_S`)
T = 60
#: the most seconds a prompt answer may take here (the grace is 5 s; the ranks of a loaded host are slow)
PROMPT_S = 15
#: where the interrupted rank calls again at once: the peers' grace for that call (s), longer than the default 5 s,
#: which a loaded CI host's ranks once took more than to call again (the peers raised), with a deadline that keeps it
#: (the grace is at most a quarter of it), and the most seconds the exchange paired with that call may take
AGAIN = {"PASSOVER_GRACE_S": "25"}
T_AGAIN, AGAIN_S = 120, 60
#: where it calls again late: the peers' grace (s), shorter than the default, which the rank's call comes 8 s after
LATE = {"PASSOVER_GRACE_S": "2"}


def said_by(results) -> dict:
    return {(r["rank"], r.get("what", r.get("n"))): r for result in results for r in result.results}


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("n", "leaver", "then"), [(2, 1, "ends"), (2, 0, "ends"), (3, 1, "lives"),
                                                   (3, 0, "lives")])
def test_a_rank_interrupted_after_its_last_exchange_that_never_calls_again_is_raised_within_the_grace(
        tmp_path, n, leaver, then):
    """Rank ``leaver`` is interrupted right after its turn's last exchange (A), then its process ends (``ends``) or
    lives on without calling the tuner (``lives``). Every other rank's next turn (C) raises RankFailedError naming
    the interruption within seconds, all at the same exchange count. Before the grace (the pass-over of 217ffa74,
    reverted in 7e8fe4cc), C waited the whole deadline T and said the rank never arrived."""
    results = run_ranks(CASES, n, ["left_after_the_last_exchange"],
                        env={**tuner_env(tmp_path, T), "LEAVER": str(leaver), "THEN": then}, timeout=180)
    said = said_by(results)
    peers = [r for r in range(n) if r != leaver]
    assert said[(leaver, "A")]["error"] == "KeyboardInterrupt", describe(results)
    assert all(results[r].returncode == 0 for r in peers), describe(results)
    for rank in peers:
        told = said[(rank, "C")]
        assert told["error"] == "RankFailedError", told
        assert f"group rank {leaver} was interrupted (KeyboardInterrupt)" in told["message"], told
        assert f"group rank(s) [{leaver}] left the tuning" in told["message"], told
        assert told["seconds"] < PROMPT_S, told  # not the deadline T (60 s)
    assert len({said[(r, "C")]["seq"] for r in peers}) == 1, said


@pytest.mark.timeout(200)
def test_four_ranks_interrupted_after_their_last_exchange_cost_their_peers_one_grace(tmp_path):
    """6 ranks; ranks 1-4 are interrupted right after their turn's last exchange (A) and live on without calling the
    tuner. Ranks 0 and 5 raise RankFailedError at their C within one grace (5 s), both naming an interruption.
    Before, rank 0 settled the four records one after another, each with a grace of its own: 20 s (with T = 8 s,
    rank 0 took T and rank 5 raised GroupTimeoutError saying rank 0 "never arrived"; the closing review's F5)."""
    results = run_ranks(CASES, 6, ["left_after_the_last_exchange"], timeout=180,
                        env={**tuner_env(tmp_path, T), "LEAVER": "1,2,3,4", "THEN": "lives"})
    said = said_by(results)
    assert all(results[r].returncode == 0 for r in (0, 5)), describe(results)
    for rank in (0, 5):
        told = said[(rank, "C")]
        assert told["error"] == "RankFailedError" and "was interrupted (KeyboardInterrupt)" in told["message"], told
        assert told["seconds"] < 12, told  # one grace of 5 s, not four (20 s)


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("leaver", "threads"), [(1, "0"), (0, "0"), (1, "1"), (0, "1")])
def test_a_rank_interrupted_after_its_last_exchange_and_calling_again_leaves_three_ranks_in_step(tmp_path, leaver,
                                                                                                  threads):
    """On 3 ranks, rank ``leaver`` is interrupted right after its turn's last exchange (A), catches it and makes
    exchange C at once, as the others do in their next turn: C and D pair up on every rank, with no error, at the
    same exchange counts. ``threads``: C and D run on a second thread of every rank, which waits for the group's
    turn while A's thread holds it. Before (main): the others' C raised RankFailedError naming the rank (spurious:
    its own C was coming)."""
    results = run_ranks(CASES, 3, ["left_after_the_last_exchange"], timeout=180, env={
        **tuner_env(tmp_path, T_AGAIN), **AGAIN, "LEAVER": str(leaver), "THEN": "again", "THREADS": threads})
    said = said_by(results)
    assert all(result.returncode == 0 for result in results), describe(results)
    assert said[(leaver, "A")]["error"] == "KeyboardInterrupt", said
    for what in ("C", "D"):
        each = [said[(r, what)] for r in range(3)]
        assert all(e["error"] is None and e["value"] == [0, 1, 2] for e in each), each
        assert all(e["seconds"] < AGAIN_S for e in each), each
        assert len({e["seq"] for e in each}) == 1, each
    assert said[(leaver, "left record")]["kept"] is False, said  # deleted once every rank is past it (was: kept)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("then", ["ends", "again"])
def test_the_reviews_case_a_rank_interrupted_at_its_decisions_line(tmp_path, then):
    """The closing review's reproduction (``tune_exit_after_last``): rank 1's rank log raises KeyboardInterrupt at
    the decision's line of key 8. ``ends``: its process ends, and rank 0's tuning of key 16 raises RankFailedError
    naming the interruption within seconds (with the pass-over of 217ffa74 it waited T). ``again``: rank 1 calls key
    16 at once, and both tune it together with no error (before, on main: rank 0's call raised RankFailedError);
    then both call key 8 again, which the interrupted rank had decided too (the decision is kept once agreed, before
    its line is logged), and both tune key 32 (before: rank 1 tuned key 8 again, against rank 0's key 32, and both
    raised MismatchError, then rank 1's key 32 waited T)."""
    results = run_ranks(CASES, 2, ["tune_left_at_the_decision"], timeout=180, env={
        **(tuner_env(tmp_path, T_AGAIN) | AGAIN if then == "again" else tuner_env(tmp_path, T)), "THEN": then})
    said = said_by(results)
    assert said[(1, 8)]["error"] == "KeyboardInterrupt" and said[(0, 8)]["error"] is None, describe(results)
    assert results[0].returncode == 0, describe(results)
    if then == "ends":
        told = said[(0, 16)]
        assert told["error"] == "RankFailedError" and "group rank 1 was interrupted" in told["message"], told
        assert told["seconds"] < PROMPT_S, told
        return
    assert results[1].returncode == 0, describe(results)
    for what in (16, "8 again", 32):
        both = [said[(r, what)] for r in (0, 1)]
        assert all(b["error"] is None for b in both) and both[0]["value"] == both[1]["value"], both
        assert all(b["seconds"] < AGAIN_S for b in both), both
    assert said[(0, "8 again")]["value"] == said[(0, 8)]["value"], said  # key 8's decision, served from memory


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("then", "at"), [("same", "wait"), ("other", "wait"), ("exchange", "wait"),
                                         ("capture", "wait"), ("decided", "wait"), ("same", "read"),
                                         ("same", "kept"), ("same", "twice")])
def test_a_rank_interrupted_waiting_for_its_decisions_last_result_keeps_the_decision_at_its_next_call(tmp_path,
                                                                                                     then, at):
    """Rank 1 is interrupted inside its wait for the result of key 8's last exchange, which rank 0 gives only once
    it caught it: rank 0 kept the decision, and rank 1 keeps it at its next call on the group (it reads that result
    first), whether that call is of key 8 again (``same``: served, as rank 0's is, then both tune key 16 together)
    or of another tuned function (``other``: tuned together, then key 8 is served on both), or an exchange of the
    group's channel (``exchange``: read before it). Before: rank 1 tuned key 8 again, against rank 0's key 16
    (``same``) or after its other call (``other``, ``exchange``): MismatchError, then a wait of T. ``read``: the
    interruption comes once rank 1 has read that result, before its call took it (before: as in the wait); ``kept``:
    where the tuning keeps the decision, after the exchange (before: as in the wait).
    ``capture``: as ``same``, the call of key 8 again made as if inside a CUDA graph's capture, whose check that
    the key is decided reads that result too (before: CaptureError, the key not decided there).
    ``twice``: a second interruption inside rank 1's call "8 again", while it waits for that result, leaves it to
    read at the next call, "8 third" (before: it was dropped, and "8 third" tuned key 8 alone).
    ``decided``: rank 1's next call is of a key both ranks decided before (another function's), which makes no
    exchange: it reads that result too (before: the key stayed undecided on rank 1 until its next tuning call, its
    decisions unlike rank 0's meanwhile: found by ``chaos.py --faults interrupt``, seed 10303, job seed
    1283081148, whose rank 2 called nothing but a decided key after its interruption)."""
    results = run_ranks(CASES, 2, ["tune_interrupted_waiting_for_the_decision"], timeout=180,
                        env={**tuner_env(tmp_path, T_AGAIN), **AGAIN, "NEXT": then, "AT": at})
    said = said_by(results)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert said[(1, 8)]["error"] == "KeyboardInterrupt" and said[(0, 8)]["error"] is None, describe(results)
    served = said[(1, "8 third" if at == "twice" else "8 again")] if then in ("same", "capture") else None
    if at == "twice":
        assert said[(1, "8 again")]["error"] == "KeyboardInterrupt", describe(results)
    if then == "decided":
        assert said[(1, "4 again")]["error"] is None and said[(1, "4 again")]["late_keys"] == [8], describe(results)
    if served is not None:
        assert served["error"] is None and served["value"] == said[(0, 8)]["value"], describe(results)
    for what in ("8 once more", 16):
        both = [said[(r, what)] for r in (0, 1)]
        assert all(b["error"] is None for b in both) and both[0]["value"] == both[1]["value"], both
        assert all(b["seconds"] < AGAIN_S for b in both), both
    assert said[(0, "8 once more")]["value"] == said[(0, 8)]["value"], describe(results)
    # rank 1's own journals removed, as rank 0's are (was: its key-8 journal kept; rank 0's key-16 one may be seen
    # here an instant before rank 0 removes it)
    assert [name for name in said[(1, "decided")]["journals"] if name.endswith(".rank1.journal")] == [], \
        describe(results)
    assert said[(0, "decided")]["keys"] == said[(1, "decided")]["keys"] == ([8] if then in ("other", "exchange")
                                                                           else [8, 16]), \
        describe(results)
    log = (tmp_path / "logs" / "rank-1.log").read_text()
    assert "[late key=8] the decision's last exchange, which an interruption ended this rank's wait for, read at " \
           "this rank's next call on the group: kept" in log, log[-3000:]


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("n", "leaver"), [(2, 1), (3, 0)])
def test_a_rank_calling_again_past_the_grace_meets_its_peers_call_again(tmp_path, n, leaver):
    """Rank ``leaver`` is interrupted right after its turn's last exchange (A), catches it and makes exchange C only
    past its peers' grace: their C raises RankFailedError naming it within seconds, and their call again of C pairs
    with its C, then D on every rank: no rank is an exchange apart (its record was settled ``out``, and counted by
    every rank)."""
    results = run_ranks(CASES, n, ["left_after_the_last_exchange"],
                        env={**tuner_env(tmp_path, T), **LATE, "LEAVER": str(leaver), "THEN": "late"}, timeout=180)
    said = [r for result in results for r in result.results]
    assert all(result.returncode == 0 for result in results), describe(results)
    peers = [r for r in range(n) if r != leaver]
    for rank in peers:
        first, again = [s for s in said if s["rank"] == rank and s["what"] == "C"]
        assert first["error"] == "RankFailedError" and first["seconds"] < PROMPT_S, first
        assert again["error"] is None and again["value"] == list(range(n)), again
    mine = [s for s in said if s["rank"] == leaver and s["what"] == "C"]
    assert len(mine) == 1 and mine[0]["error"] is None and mine[0]["value"] == list(range(n)), mine
    each = [s for s in said if s["what"] == "D"]
    assert len(each) == n and all(e["error"] is None and e["seconds"] < PROMPT_S for e in each), each
    assert len({e["seq"] for e in each}) == 1, each
    assert [s["kept"] for s in said if s["what"] == "left record"] == [False], said  # (was: kept in the store)


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("n", "leaver", "then"), [(2, 0, "ends"), (3, 1, "ends"), (3, 0, "again")])
def test_a_rank_interrupted_at_the_end_of_a_contextual_tuning_call(tmp_path, n, leaver, then):
    """Rank ``leaver``'s rank log raises KeyboardInterrupt at the line ending a ``contextual_autotune`` tuning call,
    after its last exchange; then every rank calls an ``autotune`` key. ``ends``: the rank's process ends, and the
    others' call raises RankFailedError naming the interruption within seconds (with 217ffa74's pass-over: T).
    ``again``: the rank calls that key too, and all tune it together with no error (on main: RankFailedError)."""
    results = run_ranks(CASES, n, ["contextual_left_at_its_end"], timeout=180, env={
        **(tuner_env(tmp_path, T_AGAIN) | AGAIN if then == "again" else tuner_env(tmp_path, T)), "LEAVER": str(leaver),
        "THEN": then})
    said = said_by(results)
    peers = [r for r in range(n) if r != leaver]
    assert said[(leaver, "runs")]["error"] == "KeyboardInterrupt", describe(results)
    assert all(said[(r, "runs")]["error"] is None and results[r].returncode == 0 for r in peers), describe(results)
    if then == "ends":
        for rank in peers:
            told = said[(rank, "next")]
            assert told["error"] == "RankFailedError", told
            assert f"group rank {leaver} was interrupted" in told["message"], told
            assert told["seconds"] < PROMPT_S, told
        return
    each = [said[(r, "next")] for r in range(n)]
    assert all(e["error"] is None and e["seconds"] < AGAIN_S for e in each), each
    assert len({e["value"] for e in each}) == 1, each


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("n", "at", "then", "sig"), [(2, "last", "same", "INT"), (2, "last", "other", "INT"),
                                                      (3, "last", "same", "TERM"), (2, "decided", "same", "INT"),
                                                      (3, "decided", "other", "INT"), (2, "summary", "same", "INT"),
                                                      (3, "summary", "other", "INT")])
def test_a_rank_interrupted_waiting_for_a_contextual_runs_result_applies_it_at_its_next_call(tmp_path, n, at, then,
                                                                                             sig):
    """Rank 1 is interrupted (SIGINT, or SIGTERM: SystemExit) inside its wait for the result of a run's exchange of
    a ``contextual_autotune`` tuning call of key 64, which rank 0 gives only once rank 1 caught it; then every rank
    calls key 64 again and a new key 128 (``then``: in that order, or the other). Rank 1 reads that result at its
    next call and applies it as its peers did.
    ``last``: the exchange after the final run, the call's last: the others' call returned; rank 1's next calls run
    in step with theirs (key 64 served, one run; key 128 tuned together). Before: its call again was the group's
    first call on it alone, which waited T + T/10 at the journal exchange (GroupTimeoutError), and so did every
    later one.
    ``decided``: the exchange that decides key 64 (under ALWAYS_TUNE, rank 1's configs costing the other way round
    from its second call): the others raise RankFailedError naming the interruption (they were still in the call),
    and every rank's call again serves key 64 with the config the group chose, in one run. Before: rank 1 tuned key
    64 again alone (7 runs; the others ran their decision untimed) and chose the other config: the ranks ran
    different configs for one key.
    ``summary``: rank 1 is interrupted at its rank log's summary line of that call instead, after its last exchange
    (the call counts as ended on every rank before that line: before, only once it returned, and rank 1's call
    again waited T + T/10 at the journal exchange, as with ``last``)."""
    env = {**tuner_env(tmp_path, 30), "AT": at, "NEXT": then, "SIG": sig}
    if at == "decided":
        env |= {"TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1", "LATE_COST": "1"}
    results = run_ranks(CASES, n, ["contextual_interrupted_waiting_for_its_result"], timeout=180, env=env)
    said = said_by(results)
    assert all(r.returncode == 0 for r in results), describe(results)
    interruption = "KeyboardInterrupt" if sig == "INT" else "SystemExit"
    assert said[(1, "first")]["error"] == interruption, describe(results)
    peers = [r for r in range(n) if r != 1]
    for rank in peers:  # (7 runs on the virtual clock: the scenario's exchanges 5 and 6 are the ones it names)
        first = said[(rank, "first")]
        assert first["runs"] == 7, first
        if at != "decided":
            assert first["error"] is None, first
        else:
            assert first["error"] == "RankFailedError" and "group rank 1 was interrupted" in first["message"], first
    assert_calls_after_a_late_result_agree(said, n, then, tmp_path / "logs" / "rank-1.log", at != "summary",
                                           PROMPT_S)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("n", "then"), [(2, "hot"), (3, "hot"), (2, "capture"), (2, "max_runs"), (3, "max_runs")])
def test_a_contextual_rank_interrupted_waiting_for_a_result_reads_it_at_its_next_call_hot_or_bounded(tmp_path, n,
                                                                                                     then):
    """Rank 1 is interrupted (SIGINT) inside its wait for a result the review of abcc24d9 found left unapplied.
    ``hot`` (and ``capture``: that call made as inside a CUDA graph's capture): call 1 (size 128, a new key met in a
    hot call by every rank, so tuned there) is interrupted at the exchange that decides key 128; the others raise
    RankFailedError; call 2 runs hot on every rank and launches the group's choice, BLOCK 128. Before: rank 1's call 2
    (not the group's first, no agreement due) ran hot with key 128 undecided there, so with its local default
    BLOCK 64 (the others: 128), after waiting the new-key grace, until the agreement ``sync_every`` calls on; in a
    capture it raised CaptureError alone. ``max_runs``: call 0 reaches ``max_runs``; the interruption is in the wait
    of its last exchange (after the bound's extra run); the others' call returned, and call 1 runs hot on every
    rank. Before: that exchange's result was never read, and rank 1's call 1 and every later one was the group's
    first again, alone: GroupTimeoutError after T + T/10 at the journal exchange."""
    env = {**tuner_env(tmp_path, 30), "PLAN": "64,128,128", "AT_CALL": "1", "AT": "end of run 6"}
    if then == "capture":
        env["CAPTURE"] = "2"
    if then == "max_runs":
        env |= {"PLAN": "64,64", "AT_CALL": "0", "AT": "(after max_runs)", "MAX_RUNS": "3"}
    results = run_ranks(HERE / "scenarios" / "contextual_late_cases.py", n, ["interrupted_then_called"], timeout=100,
                        env=env)
    said = said_by(results)
    assert all(r.returncode == 0 for r in results), describe(results)
    last = len(env["PLAN"].split(",")) - 1
    assert said[(1, last - 1)]["error"] == "KeyboardInterrupt", describe(results)
    each = [said[(r, last)] for r in range(n)]
    assert all(e["error"] is None and e["runs"] == 1 and e["seconds"] < PROMPT_S for e in each), each
    assert len({str(e["last"]) for e in each}) == 1, each  # one config on every rank
    if then != "max_runs":
        assert each[0]["last"] == [[128, 128]], each


LATE_MORE = HERE / "scenarios" / "contextual_late_more_cases.py"


def _calls_by_index(results) -> dict:
    """(call index) -> {rank: what that call gave}, for the calls made from two threads at once: a list each."""
    calls: dict = {}
    for result in results:
        for r in result.results:
            if isinstance(r.get("what"), int):
                calls.setdefault(r["what"], {}).setdefault(r["rank"], []).append(r)
    return calls


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("n", "how"), [
    (2, "thread"), (2, "two threads"),
    (3, "two leavers"), (3, "leavers apart"), (3, "leavers apart, 2 last"),
    (3, "two cancelled"), (4, "subgroup"), (2, "raises"), (2, "agreement"), (3, "agreement")])
def test_a_contextual_rank_interrupted_waiting_for_a_result_stays_in_step_threads_leavers_subgroups(tmp_path, n, how):
    """Review of ceece99d, each with real ranks: rank 1 (``subgroup``: global rank 3, in TP groups {0,1} and {2,3},
    the other group going on alone) is interrupted inside its wait for a run's exchange result. ``thread``: its
    next calls come from a thread of their own, the main thread busy; ``two threads``: from two threads at once, on
    every rank (the interruption at the group's first call's last exchange); ``two leavers``: ranks 1 and 2 both,
    at the exchange that decides key 128 (SIGINT); ``leavers apart``: rank 2 at run 5's exchange, rank 1 at run 6's,
    which the peers end with RankFailedError (rank 2 left), and ``2 last`` the other way round (before, the rank left
    at run 6's read that verdict at its next call and raised it there alone, the others' call returning, key 128
    undecided: a fresh-clone CI's red); ``agreement``: at the agreement at call 3 (``sync_every`` 3), which finds
    key 128 pending on rank 0 (met there alone in call 2) and opens a tuning window (before, the rank did not know
    it: its next call ran hot while its peers tuned, waiting ``T + T/10`` at the journal exchange, then
    ``ExchangeError``; a chaos run's job, seed 467565331); ``two cancelled``: both by a cancelled task's
    CancelledError, at the first call's last exchange; ``raises``: the next call, tuning new key 128 on every
    rank, raises the function's own error on rank 1. Every rank of a group runs the same config for each key in
    each later call, and ends each with the same outcome (the same AutotuneError for ``raises``), none waiting for
    the timeout."""
    env = {**tuner_env(tmp_path, 30), "PLAN": "64,128,128,128", "AT_CALL": "1", "AT": "end of run 6", "LEAVERS": "1"}
    env |= {"thread": {"THREAD": "1"},
            "two threads": {"PLAN": "64,64+64,128+64", "AT_CALL": "0"},
            "two leavers": {"LEAVERS": "1,2"},
            "leavers apart": {"LEAVERS": "1,2", "AT_2": "end of run 5"},
            "leavers apart, 2 last": {"LEAVERS": "1,2", "AT_1": "end of run 5"},
            "two cancelled": {"PLAN": "64,64,128", "AT_CALL": "0", "LEAVERS": "1,2", "SIG": "CANCEL"},
            "subgroup": {"GROUP": "tp2", "LEAVERS": "3", "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1"},
            "raises": {"PLAN": "64,128,64", "AT_CALL": "0", "RAISE": "1:1"},
            "agreement": {"PLAN": "64,128,128,128,128", "PLAN_1": "64,64,128,128,128", "AT_CALL": "2",
                          "AT": "agreement at call 3", "SYNC_EVERY": "3"}}[how]
    results = run_ranks(LATE_MORE, n, ["late"], timeout=100, env=env)
    assert all(r.returncode == 0 for r in results), describe(results)
    calls, at, leavers = _calls_by_index(results), int(env["AT_CALL"]), [int(r) for r in env["LEAVERS"].split(",")]
    assert all(calls[at][r][0]["error"] in ("KeyboardInterrupt", "CancelledError") for r in leavers), calls[at]
    groups = [[0, 1], [2, 3]] if how == "subgroup" else [list(range(n))]
    for index in sorted(calls):
        if index <= at:
            continue
        for members in groups:
            each = [sorted((c["n"], str(c["final"]), c["error"]) for c in calls[index][r]) for r in members]
            assert all(e == each[0] for e in each), (index, calls[index])
            assert all(c["seconds"] < PROMPT_S for r in members for c in calls[index][r]), calls[index]
    if how == "raises":
        assert {c["error"] for r in range(n) for c in calls[1][r]} == {"AutotuneError"}, calls[1]
    else:
        assert all(c["error"] is None for index in calls if index > at for r in range(n) for c in calls[index][r])


@pytest.mark.timeout(120)
def test_a_contextual_rank_interrupted_at_a_calls_last_result_and_back_past_the_grace_stays_in_step(tmp_path):
    """Rank 1 is interrupted inside its wait for the result of the group's first call's last exchange (the peers'
    call returns) and calls again 6 s later, past the peers' grace (2 s), sync_every=2. Observed: rank 0's
    agreement at call 2 meets rank 1's "left" record, settles it out after the grace and raises RankFailedError;
    rank 1's call 2 reads its result and makes its agreement, which pairs with rank 0's agreement at call 4: both
    raise ExchangeError (ranks at another step), and so does every later agreement, one call number apart for
    good (pending keys are never tuned); rank 1's last agreement waits T (GroupTimeoutError)."""
    env = {**tuner_env(tmp_path, 8), "PLAN": "64,64,64,64", "AT_CALL": "0", "AT": "end of run 6", "LEAVERS": "1",
           "SYNC_EVERY": "2", "DELAY": "6", "PASSOVER_GRACE_S": "2"}
    results = run_ranks(LATE_MORE, 2, ["late"], timeout=100, env=env)
    assert all(r.returncode == 0 for r in results), describe(results)
    calls = _calls_by_index(results)
    assert calls[0][1][0]["error"] == "KeyboardInterrupt", calls[0]
    for index in (1, 2, 3):
        errors = [calls[index][r][0]["error"] for r in range(2)]
        assert errors[0] == errors[1] and not {"ExchangeError", "GroupTimeoutError"} & set(errors), calls[index]


COUNTED_OUT = HERE / "scenarios" / "counted_out_cases.py"
#: where one rank calls again at once and another once its peers counted it out: a grace the prompt one meets on a
#: loaded host (the default is 5 s; a deadline of 40 s keeps 8), which every such test waits once
BACK_IN_TIME = {"PASSOVER_GRACE_S": "8"}


@pytest.mark.timeout(120)
def test_a_contextual_rank_0_back_past_the_grace_leaves_its_record_to_a_slower_peer(tmp_path):
    """Review of 6a1e7b96, 3 ranks: group rank 0 is interrupted at the summary line of the group's first
    contextual call (after its last exchange) and calls again 6 s later, past the peers' grace (2 s), sync_every=2.
    Rank 1 settles rank 0's record out at the agreement at call 2 and raises RankFailedError; rank 2 comes to that
    agreement 10 s late, after rank 0 came back and raised there too. Every rank raises RankFailedError at call 2,
    and calls 3 and 4 go on without error. Before: rank 0 deleted its record as it raised, which is that
    exchange's result: rank 2 waited T (20 s) for it (GroupTimeoutError), and every rank waited T at call 4."""
    env = {**tuner_env(tmp_path, 20), "PASSOVER_GRACE_S": "2", "LEAVER": "0", "SYNC_EVERY": "2",
           "PLAN": "c64*4", "PLAN_0": "c64!,z6,c64*3", "PLAN_2": "c64,z10,c64*3"}
    results = run_ranks(COUNTED_OUT, 3, ["plan"], timeout=100, env=env)
    assert all(r.returncode == 0 for r in results), describe(results)
    calls = {(r["rank"], r["calls"]): r for result in results for r in result.results if "calls" in r}
    assert calls[(0, 1)]["error"] == "KeyboardInterrupt", calls
    assert all(calls[(r, 2)]["error"] == "RankFailedError" for r in range(3)), calls
    assert all(calls[(r, c)]["error"] is None for r in range(3) for c in (3, 4)), calls


def rank_0_left_its_gather(tmp_path, plans: dict[str, str]) -> None:
    """3 ranks of ``counted_out_cases.py`` (sync_every=2, ranks 0 and 1 leavers, rank 2 calling 4 times) with rank 0's
    and rank 1's ``plans``: rank 1 left call 1, rank 0 its gather of the agreement at call 2; every rank raises at
    call 2 (rank 0 its interruption, ranks 1 and 2 RankFailedError), calls 3 and 4 run without error on every rank."""
    env = {**tuner_env(tmp_path, 20), "LEAVER": "0,1", "SYNC_EVERY": "2", "PLAN_2": "c64*4", **plans}
    results = run_ranks(COUNTED_OUT, 3, ["plan"], timeout=100, env=env)
    assert all(r.returncode == 0 for r in results), describe(results)
    calls = {(r["rank"], r["calls"]): r for result in results for r in result.results if "calls" in r}
    assert calls[(1, 1)]["error"] == "KeyboardInterrupt" and calls[(0, 2)]["error"] == "KeyboardInterrupt", calls
    assert calls[(1, 2)]["error"] == calls[(2, 2)]["error"] == "RankFailedError", calls
    assert all(calls[(r, c)]["error"] is None for r in range(3) for c in (3, 4)), calls


@pytest.mark.timeout(120)
def test_a_rank_0_interrupted_in_its_grace_for_a_peers_record_counts_that_peer_out_at_the_same_agreement(tmp_path):
    """3 ranks, sync_every=2 (found by ``chaos.py --faults interrupt``, seed 9696, job seed 378580353): rank 1 is
    interrupted at the summary line of the group's first contextual call, its "left" record at the agreement at call
    2; group rank 0, gathering that agreement, is interrupted inside its grace for that record, and calls again at
    once; rank 1 calls again once rank 0 has left. Every rank raises at call 2 (rank 0 its interruption, ranks 1 and
    2 RankFailedError), and calls 3 and 4 go on without error on every rank. Before: rank 1's record stayed
    unsettled, rank 1 set it back and made its agreement at call 2 at the next number, where ranks 0 and 2 made
    their agreement at call 4: ExchangeError on all three, and rank 1 then waited T at its own call 4."""
    rank_0_left_its_gather(tmp_path, {"PLAN_0": "c64,c64?,fleft0,c64*2", "PLAN_1": "c64!,wleft0,c64*3"})


@pytest.mark.timeout(120)
def test_a_rank_0_interrupted_in_its_grace_after_the_peer_came_back_leaves_at_the_exchange_made_again(tmp_path):
    """As above, but rank 1 calls again once rank 0's grace has begun, and sets its record back before rank 0's
    interruption comes (between two of rank 0's looks at it): rank 0 writes that record as the exchange's result
    (rank 2, past rank 1's turn, makes the step again at the next number), where rank 0's record now lies. Every
    rank raises at call 2 and calls 3 and 4 go on without error. Before: rank 0's record lay at the void exchange;
    rank 2 raised there, rank 1 made its agreement at call 2 at the next number, where rank 0's call again made its
    agreement at call 4 (ExchangeError on every rank, then T)."""
    rank_0_left_its_gather(tmp_path, {"PLAN_0": "c64,c64?,c64*2", "PLAN_1": "c64!,win_grace,c64*3",
                                      "GRACE_UNTIL": "back", "MARK_BACK": "back"})


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("r2_at", "delay"), [("", "4"), ("round 1", "4"), ("round 1", "0")])
def test_two_ranks_leaving_a_tuning_at_different_exchanges_end_the_next_calls_alike(tmp_path, r2_at, delay):
    """3 ranks tune key 8 (``autotune``): rank 2 is interrupted just before its message of the tuning's last exchange
    ("decision written") and calls again past the peers' grace; rank 1 inside its wait for that exchange's result,
    which is the RankFailedError every rank raises there (rank 2 counted out), and calls again at once. Every rank's
    "8 again" and key 16 then return the same values. Before: rank 1 raised that RankFailedError again at its "8
    again" alone (group/leaving.py), and rank 2 read the result of the exchange before the one it left (a sample's)
    as key 8's decision, served it alone, and called key 16 against its peers' key 8: MismatchError, then the
    peers waited T (function/decide.py). ``r2_at``: rank 2 is interrupted inside its wait for the last sample's
    result instead (its "left" record at the decision's exchange), and calls again past the grace or at once."""
    results = run_ranks(HERE / "scenarios" / "two_leavers_cases.py", 3, ["tune_leavers_apart"], timeout=130,
                        env={**tuner_env(tmp_path, 30), **LATE, "DELAY": delay, "R2_AT": r2_at})
    said = said_by(results)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert [said[(r, 8)]["error"] for r in range(3)] == ["RankFailedError", "KeyboardInterrupt", "KeyboardInterrupt"], \
        describe(results)
    for what in ("8 again", 16):
        each = [said[(r, what)] for r in range(3)]
        assert all(e["error"] is None and e["value"] == each[0]["value"] and e["seconds"] < PROMPT_S for e in each), \
            each
    assert all(said[(r, "decided")]["keys"] == [8, 16] for r in range(3)), describe(results)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("back_first", [1, 2])
def test_two_ranks_left_at_one_exchange_one_back_and_one_counted_out_raise_at_that_step_on_every_rank(
        tmp_path, back_first):
    """3 ranks, sync_every=2: ranks 1 and 2 are interrupted at the summary line of the group's first contextual
    call, both "left" records at the agreement at call 2; rank ``back_first`` calls again at once (its record set
    back within rank 0's grace), the other once rank 0's call 2 ended (counted out). Every rank raises
    RankFailedError at call 2 (the late rank counted out there), and calls 3 to 6 go on without error on every rank.
    Before (found by the closing review of the eighty-sixth session): the exchange was void for rank 0 (the first
    record in rank order decided), the late rank raised at call 2 alone, and its later agreements met its peers'
    earlier ones (ExchangeError, then a wait of T)."""
    late = 3 - back_first
    env = {**tuner_env(tmp_path, 40), **BACK_IN_TIME, "LEAVER": "1,2", "SYNC_EVERY": "2",
           "PLAN_0": "c64*2,fr0c2,c64*4", f"PLAN_{back_first}": "c64!,c64*5", f"PLAN_{late}": "c64!,wr0c2,c64*5"}
    results = run_ranks(COUNTED_OUT, 3, ["plan"], timeout=100, env=env)
    assert all(r.returncode == 0 for r in results), describe(results)
    calls = {(r["rank"], r["calls"]): r for result in results for r in result.results if "calls" in r}
    assert calls[(1, 1)]["error"] == calls[(2, 1)]["error"] == "KeyboardInterrupt", calls
    assert all(calls[(r, 2)]["error"] == "RankFailedError" for r in range(3)), calls
    assert all(calls[(r, c)]["error"] is None for r in range(3) for c in range(3, 7)), calls


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rank_0_back_first", [False, True])
def test_a_rank_0_interrupted_in_its_gather_that_counts_one_peer_out_before_the_other_comes_back_ends_it_alike(
        tmp_path, rank_0_back_first):
    """3 ranks, sync_every=2: ranks 1 and 2 are interrupted at the summary line of the group's first contextual
    call, both "left" records at the agreement at call 2; group rank 0, gathering it, is interrupted inside its
    grace and, leaving, reads both records unsettled; rank 2 comes back between that read and rank 0's
    compare-and-set of its record (held there), after rank 1's was settled out; rank 1 calls again once rank 0's
    call 2 ended. Every rank raises at call 2 (rank 0 its interruption, ranks 1 and 2 RankFailedError), and calls 3
    to 6 go on without error. Before: rank 0 wrote rank 2's record, found back, as the exchange's result and its own
    at the next number, where rank 2 raised; rank 1, counted out, raised at call 2 writing nothing, one exchange
    behind its peers for good (ExchangeError at call 4, then T). ``rank_0_back_first``: rank 2 reads rank 0's record
    only once rank 0 came back and set it back (before: the record settled lost the step it named, and rank 2 went on
    where its peers raised: ExchangeError at its call 2, found by CI under load)."""
    env = {**tuner_env(tmp_path, 20), "LEAVER": "0,1,2", "SYNC_EVERY": "2", "PLAN_0": "c64,c64?,fr0c2,c64*4",
           "PLAN_1": "c64!,wr0c2,c64*5", "PLAN_2": "c64!,wpeeked,c64*5", "HOLD_AT_0": "leaves its gather at",
           "HOLD_MARK_0": "peeked", "HOLD_UNTIL_0": "back", "MARK_BACK_2": "back"}
    if rank_0_back_first:  # rank 2 reads rank 0's record only once rank 0 set it back at its call 4
        env.update({"MARK_BACK_0": "r0back", "HOLD_AT_2": " is back", "HOLD_MARK_2": "r2held",
                    "HOLD_UNTIL_2": "r0back"})
    results = run_ranks(COUNTED_OUT, 3, ["plan"], timeout=100, env=env)
    assert all(r.returncode == 0 for r in results), describe(results)
    calls = {(r["rank"], r["calls"]): r for result in results for r in result.results if "calls" in r}
    assert calls[(1, 1)]["error"] == calls[(2, 1)]["error"] == "KeyboardInterrupt", calls
    assert [calls[(r, 2)]["error"] for r in range(3)] == ["KeyboardInterrupt", "RankFailedError", "RankFailedError"], \
        calls
    assert all(calls[(r, c)]["error"] is None for r in range(3) for c in range(3, 7)), calls


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3])
def test_rank_0_and_a_peer_left_after_one_turn_the_peer_back_in_time_and_rank_0_late_raise_alike(tmp_path, n):
    """``n`` ranks, sync_every=2: group rank 0 and rank 1 are interrupted at the summary line of the group's first
    contextual call (rank 0's record is the result of the agreement at call 2, rank 1's its part there); rank 1
    calls again at once, rank 0 once every peer's call 2 ended (past the grace). Every rank raises at call 2 (rank 0
    counted out there), and calls 3 to 6 go on without error on every rank. Before: rank 1 read nothing of rank 0's
    record and made its agreement at call 2 at the next number, where its peers made their agreement at call 4 (with
    2 ranks: rank 1 waited there until rank 0 came back, then ExchangeError)."""
    env = {**tuner_env(tmp_path, 40), **BACK_IN_TIME, "LEAVER": "0,1", "SYNC_EVERY": "2", "PLAN": "c64*2,fr2c2,c64*4",
           "PLAN_0": "c64!,wr1c2," + ("wr2c2," if n == 3 else "") + "c64*5", "PLAN_1": "c64!,c64,fr1c2,c64*4"}
    results = run_ranks(COUNTED_OUT, n, ["plan"], timeout=100, env=env)
    assert all(r.returncode == 0 for r in results), describe(results)
    calls = {(r["rank"], r["calls"]): r for result in results for r in result.results if "calls" in r}
    assert calls[(0, 1)]["error"] == calls[(1, 1)]["error"] == "KeyboardInterrupt", calls
    assert all(calls[(r, 2)]["error"] == "RankFailedError" for r in range(n)), calls
    assert all(calls[(r, c)]["error"] is None for r in range(n) for c in range(3, 7)), calls


@pytest.mark.timeout(120)
def test_rank_0_and_a_peer_left_after_one_turn_the_peer_back_in_time_through_a_plain_autotune_step(tmp_path):
    """3 ranks, sync_every=2: group rank 0 and rank 1 are interrupted at the summary line of the group's first
    contextual call (rank 0's record is the result of the agreement at call 2, rank 1's its part there); rank 1 comes
    back at once through an ``autotune`` tuning (key 8), so it settles rank 0's record itself after its grace, before
    rank 2 (3 s late to its call 2) reads it; rank 0 comes back once rank 2's call 2 ended. Rank 2 raises
    RankFailedError at its agreement at call 2 (rank 0 counted out there): so must ranks 0 and 1 at theirs, and key 8
    and calls 3 and 4 then go on without error on every rank. Found by the closing review R87: rank 1 settled rank
    0's record ``out`` at its own step (key 8's tuning), not the agreement its peers raised at; neither rank 0 nor
    rank 1 raised at call 2, and their agreements at call 2 met rank 2's at call 4 (ExchangeError, then T). Before
    this session (bee7f47a): rank 0 raised at call 2 (rank 2 settled its record), rank 1 did not."""
    env = {**tuner_env(tmp_path, 20), "PASSOVER_GRACE_S": "2", "LEAVER": "0,1", "SYNC_EVERY": "2",
           "PLAN_0": "c64!,wr2c2,a8,c64*3", "PLAN_1": "c64!,a8,c64*3", "PLAN_2": "c64,z3,c64,fr2c2,a8,c64*2"}
    results = run_ranks(COUNTED_OUT, 3, ["plan"], timeout=100, env=env)
    assert all(r.returncode == 0 for r in results), describe(results)
    said = [r for result in results for r in result.results if "op" in r]
    calls = {(r["rank"], r["calls"]): r for r in said if r["op"].startswith("c")}
    plain = [r for r in said if r["op"] == "a8"]
    assert calls[(0, 1)]["error"] == calls[(1, 1)]["error"] == "KeyboardInterrupt", calls
    assert [calls[(r, 2)]["error"] for r in range(3)] == ["RankFailedError"] * 3, calls
    assert len(plain) == 3 and all(p["error"] is None and p["value"] == plain[0]["value"] for p in plain), plain
    assert all(calls[(r, c)]["error"] is None for r in range(3) for c in (3, 4)), calls
