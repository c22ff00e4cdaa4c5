"""The process hosting the job's key-value store frozen (SIGSTOP, a debugger, a host paused) while the other ranks
tune with it: they end within the documented bound, naming it, as when it is killed (docs/fault-tolerance.md).
Found by ``benchmarks/chaos.py`` (seeds 2107977240, 824312892). Scenario: tests/scenarios/frozen_host_cases.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness import ROOT, describe, run_ranks, tuner_env

SCRIPT = ROOT / "tests" / "scenarios" / "frozen_host_cases.py"
T = 4.0


def frozen_host_run(tmp_path: Path, case: str, timeout: float, **env: str) -> tuple[list, float]:
    """``case`` on 2 ranks whose rank 0 (the store's host) stops itself (never continued: killed once rank 1 has
    ended), ``env`` added to the tuner's (``T``): every rank's result, and when rank 0 stopped (``time.time()``)."""
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {**tuner_env(tmp_path, timeout=T), "FAULT_DIR": str(faults), **env}
    results = run_ranks(SCRIPT, 2, [case], env=env, timeout=timeout, stuck=[0])
    return results, float((faults / "frozen").read_text())


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("collective", "at"), [("0", "1"), ("0", "2"), ("1", "1")],
                         ids=["at-a-warm-up-exchange", "at-a-sample-exchange", "inside-a-collective"])
def test_peers_of_a_frozen_store_host_end_within_the_bound_naming_it(tmp_path: Path, collective: str, at: str):
    """Rank 0 of 2 (the store's host) stops itself in config 1's warm-up (or its first sample). Rank 1 waits for it
    at the exchange after that run (no collective in the function: the warm-up's exchange is inside its guarded
    phase, a sample's is not) or inside the function's all_reduce. Either way it must end with
    the library's error, naming rank 0 or its store, within ``3 T + 10`` s of the freeze (the bound for a lost peer
    is ``T + max(1, T/10)``). Before: every store request to a frozen host blocks without end (torch's client has
    no timeout on a reply; a blocking wait that times out waits for its cancel's reply), so rank 1 waited at a
    sample's exchange until rank 0 was continued (52 s in the chaos run, for ever here: TimeoutError), and inside
    a guarded phase (the warm-up's exchange, the collective) the watchdog's read of rank 0's beat blocked until the
    faulthandler backstop ended it (exit 1, every thread's stack)."""
    results, frozen = frozen_host_run(tmp_path, "frozen_host", 90, COLLECTIVE=collective, AT_CALL=at)
    peer = results[1]
    assert peer.returncode in (3, 86), describe(results)
    if peer.returncode == 3:
        said = peer.result
        assert said["error"] in ("GroupTimeoutError", "RankFailedError"), said
        assert "global rank 0" in said["message"] or "global [0]" in said["message"], said
        assert said["ended"] - frozen < 3 * T + 10, said
    else:  # inside a run: its watchdog ends it, blaming no config on a frozen peer (as for any frozen peer)
        assert "rank 0 showed no sign of life" in peer.stderr, peer.stderr[-3000:]
        assert "recorded as hung" not in peer.stderr, peer.stderr[-3000:]
    assert time.time() - frozen < 3 * T + 20, describe(results)


@pytest.mark.timeout(120)
def test_a_campaign_unit_waiting_at_a_round_for_a_frozen_store_host_ends_naming_it(tmp_path: Path):
    """A campaign of units of one rank each has no failure board: its rounds are watched by a progress watch. Rank 0
    (the store's host) stops itself inside its second key's tuning; rank 1, its key tuned, waits for it at the round.
    It must end with the library's error within ``3 T + 10`` s of the freeze. Before, the watch's requests to the
    frozen host blocked without end (torch's client bounds no reply): rank 1 waited until rank 0 was continued."""
    results, frozen = frozen_host_run(tmp_path, "frozen_host_in_a_campaign", 90)
    peer = results[1]
    assert peer.returncode == 3, describe(results)
    said = peer.result
    assert said["error"] in ("GroupTimeoutError", "RankFailedError"), said
    assert "did not answer" in said["message"], said
    assert said["ended"] - frozen < 3 * T + 10, said


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["campaign", "autotune", "board", "watch"])
def test_a_rank_at_an_exchange_without_a_board_ends_when_the_store_host_freezes(tmp_path: Path, where: str):
    """Rank 0 (the store's host) stops itself once both ranks have the group; rank 1 goes on to an exchange that
    neither a failure board nor a progress watch covers: a campaign's agreement on its keys, or a tuned function's
    first exchange (its agreement on the key and config space, before its board opens), or rank 0 stops as its
    failure board (or a campaign's progress watch) opens: rank 1's board's first requests come before any beat is
    watched. It must end with the
    library's error saying the store did not answer, within ``3 T + 10`` s of the freeze. Before, nothing read the
    host's silence there: rank 1's request waited without end (torch's client bounds no reply; TimeoutError)."""
    results, frozen = frozen_host_run(tmp_path, "frozen_host_before_an_exchange", 60, WHERE=where)
    peer = results[1]
    assert peer.returncode == 3, describe(results)
    said = peer.result
    assert said["error"] == "GroupTimeoutError", said
    assert "did not answer" in said["message"] and "global rank 0" in said["message"], said
    assert said["ended"] - frozen < 3 * T + 10, said


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["naming", "connect"])
def test_init_distributed_ends_when_the_store_host_freezes_naming_its_address(tmp_path: Path, where: str):
    """Rank 0 (the store's host) stops itself inside ``init_distributed``: once rank 1 has said hello in the naming
    of the attempt (rank 1 waits for the reply), or before rank 1 connects (rank 1's connect reaches a host whose
    kernel accepts it and whose process never answers). Rank 1 must end with one line naming the store's address
    within ``3 T + 10`` s (``T + max(1, T/10)`` for a request or a connect in flight), far within
    ``init_distributed``'s own ``timeout_s`` (60 s here, the bound it has for a host that never starts). Before,
    rank 1 waited without end in the naming's wait, or in torch's connect (each try reads its reply without a time
    limit; TimeoutError); then the connect ended only at that ``timeout_s`` (torch tries again on a new connection
    after each cut until its timeout: 8 s in this test then; 65 s after the freeze with 60 s, on a loaded machine)."""
    results, frozen = frozen_host_run(tmp_path, "frozen_host_in_init", 90, WHERE=where, INIT_TIMEOUT="60")
    peer = results[1]
    assert peer.returncode == 3, describe(results)
    said = peer.result
    assert said["error"] == "GroupTimeoutError", said
    assert "did not answer" in said["message"] and "127.0.0.1:" in said["message"], said
    assert "\n" not in said["message"], said
    assert said["ended"] - frozen < 3 * T + 10, said


@pytest.mark.timeout(120)
def test_a_healthy_store_is_asked_nothing_in_short_exchanges_and_once_a_second_in_a_long_one(tmp_path: Path):
    """The cost of watching exchanges for a frozen host (``store_silence.answering``), counted: 20 exchanges one
    after another ask the store no question (an exchange shorter than ``min(1, window/5)`` s asks none, nor do
    such exchanges back to back), and rank 1 waiting 3 s for rank 0 at an exchange asks about one a second (2 or
    3; rank 0, which writes the result at once, none). No rank cuts the store. (At most 3 in the quick part, not one
    per exchange: a rank of a loaded machine may wait a second at one or two of them.)"""
    env = tuner_env(tmp_path, timeout=T)
    results = run_ranks(SCRIPT, 2, ["healthy_host_questions"], env=env, timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        assert r.result["quick"] <= 3 and not r.result["cut"], r.result
    assert results[0].result["slow"] <= 1, results[0].result
    assert 1 <= results[1].result["slow"] <= 4, results[1].result


@pytest.mark.timeout(120)
def test_a_rank_exiting_normally_while_the_store_host_is_frozen_ends(tmp_path: Path):
    """Rank 0 (the store's host) stops itself; rank 1 then exits normally, and its exit hook counts it out in the
    store (``group/exits.py``). Its process must end within ``LINGER_S + max(1, LINGER_S/10)`` s and a few (the
    count-out is watched as an exchange is, with the linger's 5 s for ``T``: an exit never waits the tuning's
    ``T``). Before, its count-out waited without end for the frozen host (TimeoutError)."""
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {**tuner_env(tmp_path, timeout=T), "FAULT_DIR": str(faults)}
    results = run_ranks(SCRIPT, 2, ["frozen_host_at_exit"], env=env, timeout=60, stuck=[0])
    ended = time.time()
    assert results[1].returncode == 0, describe(results)
    assert ended - results[1].result["exiting"] < 20, describe(results)


@pytest.mark.timeout(120)
def test_a_rank_waiting_for_a_host_that_starts_late_prints_no_failed_connect(tmp_path: Path):
    """Rank 1 waits 4 s in ``init_distributed`` for rank 0's store to listen (a host not started yet, not a frozen
    one). Its prober asks nothing until a connection of its own to the store is established: a connect of the
    prober's to a port nobody listens on fails after its 2 s timeout, and torch prints each such failure with its
    C++ stack (before this rule: rank 1's stderr had ``TCP client failed to connect``)."""
    results = run_ranks(SCRIPT, 2, ["late_host"], env=tuner_env(tmp_path, timeout=T), timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert "failed to connect" not in results[1].stderr, results[1].stderr[-3000:]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["post", "withdraw"])
def test_a_rank_telling_the_job_of_a_wrong_group_while_the_store_host_is_frozen_ends(tmp_path: Path, where: str):
    """Rank 0 (the store's host) stops itself; rank 1 then makes the store requests of a wrong-group note
    (``group/unresolved.py``): it posts one (a wrong ``autotune_pg``: the note is written before ``BadInputError``
    is raised), or deletes the one it posted and withdrew before the freeze (a call on a group of its own, twice the
    timeout after the withdrawal). It must end within ``3 T + 10`` s of the freeze: with its own ``BadInputError``
    (the note not written), or its call's result (a group of one rank needs no store). Before, those requests ran in
    no section (``store_silence.answering``): they waited without end for the frozen host (TimeoutError)."""
    results, frozen = frozen_host_run(tmp_path, "frozen_host_and_a_wrong_group", 60, WHERE=where)
    said = results[1].result
    if where == "post":
        assert results[1].returncode == 3, describe(results)
        assert said["error"] == "BadInputError" and "autotune_pg" in said["message"], said
    else:
        assert results[1].returncode == 0 and said["error"] is None, describe(results)
    assert said["ended"] - frozen < 3 * T + 10, said


@pytest.mark.timeout(120)
@pytest.mark.parametrize("frozen", [True, False], ids=["host-frozen", "host-well"])
def test_a_rank_with_a_wrong_group_note_exiting_normally_ends_leaving_no_thread(tmp_path: Path, frozen: bool):
    """Rank 1 posts a wrong-group note (a wrong ``autotune_pg``, its error caught), then rank 0 (the store's host)
    stops itself (or not) and rank 1 exits normally: its exit hooks mark the note ended (``Notes.end``) and count it
    out (``exits.linger``). It must end with status 0, within ``20`` s of its exit's start, without an abort, and
    with no thread of the tuner alive at its last exit hook (a thread alive at the interpreter's finalization can
    abort the process: ``test_tune_dist.py::test_no_thread_of_the_tuner_outlives_the_interpreter``). Before, the
    note's beat thread was alive there, frozen host or not (it idled for a next note; with the host frozen it was
    blocked in a request), and with the host frozen the exit took 2 s (the mark's bound) and the count-out's 6 s."""
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {**tuner_env(tmp_path, timeout=T), "FAULT_DIR": str(faults), "WHERE": "exit" if frozen else "exit_healthy"}
    results = run_ranks(SCRIPT, 2, ["frozen_host_and_a_wrong_group"], env=env, timeout=60, stuck=[0] if frozen else [])
    ended = time.time()
    for r in results[1:] if frozen else results:
        assert r.returncode == 0 and "terminate called" not in r.stderr, describe(results)
        exiting, threads = (said for said in r.results if "exiting" in said or "threads" in said)
        assert threads["threads"] == ["MainThread"], describe(results)
        assert ended - exiting["exiting"] < 20, describe(results)
