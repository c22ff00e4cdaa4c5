"""Contextual resume (issue 17) with real ranks, real signals and real journals: every rank takes its resume
decisions (the configs left out, the config launched first) from the journals the whole group gathered, with the
journal's blame rules; two groups of one job never read or delete each other's journals. The scenarios are in
tests/scenarios/contextual_recovery_cases.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from harness import HERE, describe, journaled, parse_results, run_ranks, stopping_at, torchrun_command, tuner_env

from triton_dist_tune.faults.journal import Journal

CASES = HERE / "scenarios" / "contextual_recovery_cases.py"


def launches(folder: Path, rank: int, attempt: str) -> list[int]:
    """The configs rank ``rank`` launched in ``attempt``, in order (one line per launch, from the config's hook)."""
    lines = (folder / f"calls.rank{rank}").read_text().split("\n")
    return [int(line.split()[1]) for line in lines if line.split()[:1] == [attempt]]


def records(path: Path) -> list[dict]:
    journal = Journal(path, create=False)
    try:
        return journal.read()
    finally:
        journal.close()


@pytest.mark.timeout(150)
def test_resume_after_sigterm_and_sigkill_launches_the_same_config_on_every_rank_and_leaves_nothing_out(tmp_path):
    """Attempt 0 ends with rank 0 SIGTERMed inside config 1 and rank 1 SIGKILLed inside config 0 (its last
    warmed-up one): the journals end in different configs. Attempt 1: one view for both ranks, so both launch the
    same config in every run; the interruption blames nothing and the crash makes config 0 a suspect, measured
    again: no config that never failed is left out, and config 0 (the fastest) is chosen."""
    env = tuner_env(tmp_path, 30, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    first = run_ranks(CASES, 2, ["killed"], env={**env, "ATTEMPT": "0"}, timeout=100)
    assert first[0].returncode == 143 and first[1].returncode == -9, describe(first)
    assert [launches(tmp_path / "faults", r, "0") for r in (0, 1)] == [[0, 1], [0]]
    cache = Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"])
    ends = {int(p.name.split(".rank")[1][0]): records(p)[-1] for p in cache.rglob("*.journal")}
    assert (ends[0]["state"], ends[0]["index"], ends[1]["state"], ends[1]["index"]) == \
        ("interrupted", 1, "started", 0), ends

    second = run_ranks(CASES, 2, ["killed"], env={**env, "ATTEMPT": "1"}, timeout=100)
    assert all(r.returncode == 0 for r in second), describe(second)
    seen = [launches(tmp_path / "faults", r, "1") for r in (0, 1)]
    assert seen[0] == seen[1], seen  # the same config in every run, on both ranks
    assert seen[0][0] == 0 and sorted(set(seen[0])) == [0, 1, 2], seen
    for r in second:
        (res,) = r.results
        assert res["ok"] and res["chosen"] == 0 and "failed" not in res["states"], res
    assert not list(cache.rglob("*.journal"))  # decided: the journals are gone


@pytest.mark.timeout(150)
def test_a_cancelled_task_on_one_rank_is_journaled_as_an_interruption(tmp_path):
    """A ``BaseException`` that is no ``Exception`` (``asyncio.CancelledError``) raised in the function on rank 1
    while config 1 runs: journaled ``interrupted`` (it blames no config), as Ctrl-C and SIGTERM are. Before, only
    those two were: the journal ended ``started``, and the next attempt took config 1 for a crash suspect."""
    env = tuner_env(tmp_path, 10, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    ranks = run_ranks(CASES, 2, ["cancelled"], env={**env, "ATTEMPT": "0"}, timeout=100)
    assert ranks[1].returncode == 0 and ranks[1].results == [{"rank": 1, "cancelled": True}], describe(ranks)
    cache = Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"])
    (journal,) = [p for p in cache.rglob("*.journal") if ".rank1" in p.name]
    last = records(journal)[-1]
    assert (last["state"], last["index"]) == ("interrupted", 1), last


@pytest.mark.timeout(150)
@pytest.mark.parametrize("error", ["cancel", "raise"])
def test_a_rank_left_waiting_in_the_functions_collective_blames_no_config(tmp_path, error):
    """Rank 1's function is cancelled (``asyncio.CancelledError``) or raises its own error in run 2, after its launch
    of config 1 and before the all_reduce; rank 1 stays alive. Rank 0, waiting in the all_reduce, reads rank 1's
    report on the call's failure board and, its run no longer moving, is ended by its watchdog after the grace
    (``failure_grace(T)``: 5 s of T = 20 s) with the peer exit status 87, as ``autotune``'s ranks are: it journals
    config 1 ``interrupted``, never ``hung``, and says so. Before, contextual tuning had no failure board: rank 0
    journaled config 1 ``hung`` and the next attempt left it out, although no rank hung in it (the function's own
    error and an interruption blame no config); then, with the board, it still waited the whole T (300 s by
    default) and ended with exit status 86."""
    env = tuner_env(tmp_path, 20, FAULT_DIR=str(tmp_path / "faults"), ERROR=error)
    (tmp_path / "faults").mkdir()
    ranks = run_ranks(CASES, 2, ["left_waiting"], env={**env, "ATTEMPT": "0"}, timeout=100, stuck=[1])
    assert ranks[0].returncode == 87, describe(ranks)  # ended from the board, not at its deadline (86)
    assert "rank 1 failed in run 1" in ranks[0].stderr and "while this rank was still inside" in ranks[0].stderr
    assert "journaled interrupted (no config is blamed)" in ranks[0].stderr, describe(ranks)
    cache = Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"])
    (journal,) = [p for p in cache.rglob("*.journal") if ".rank0" in p.name]
    states = {r["state"] for r in records(journal) if r.get("index") == 1}
    assert "interrupted" in states and "hung" not in states, records(journal)


@pytest.mark.timeout(150)
def test_on_three_ranks_both_ranks_left_waiting_are_ended_after_the_grace_and_blame_no_config(tmp_path):
    """As above on 3 ranks (rank 1 raises its own error, ranks 0 and 2 wait in the all_reduce): both are ended after
    the grace (exit 87) and journal config 1 ``interrupted``. Before, rank 0, which hosts the store, ended at its
    grace a moment before rank 2's ran out, and rank 2, no longer able to read the board, waited its deadline T and
    journaled config 1 ``hung`` (exit 86: 4 of 6 runs of the closing review's F4, 2 of 2 on the code before the
    watch): the grace of the reports read before now goes on where the board can no longer be read."""
    env = tuner_env(tmp_path, 20, FAULT_DIR=str(tmp_path / "faults"), ERROR="raise")
    (tmp_path / "faults").mkdir()
    ranks = run_ranks(CASES, 3, ["left_waiting"], env={**env, "ATTEMPT": "0"}, timeout=100, stuck=[1])
    assert (ranks[0].returncode, ranks[2].returncode) == (87, 87), describe(ranks)
    cache = Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"])
    for rank in (0, 2):
        (journal,) = [p for p in cache.rglob("*.journal") if f".rank{rank}" in p.name]
        states = {r["state"] for r in records(journal) if r.get("index") == 1}
        assert "interrupted" in states and "hung" not in states, records(journal)


@pytest.mark.timeout(150)
def test_a_rank_busy_after_the_collective_when_its_peer_raised_is_not_ended(tmp_path):
    """Rank 1 raises after the all_reduce in run 2; rank 0 is not waiting for it and goes on with other work (7 s)
    for longer than the grace (5 s of T = 20 s). Its thread is inside no collective, so the watchdog leaves it be:
    its run ends and both ranks raise the same AutotuneError, catchable, instead of rank 0 being ended with exit
    status 87 five seconds after rank 1's report (as it was with the grace counted from the report, or from the
    run's last launch: the review's D2)."""
    env = tuner_env(tmp_path, 20, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    ranks = run_ranks(CASES, 2, ["raised_after_the_collective"], env={**env, "ATTEMPT": "0"}, timeout=100)
    assert [r.returncode for r in ranks] == [0, 0], describe(ranks)
    for r in ranks:
        (res,) = r.results
        assert res["error"] == "AutotuneError" and "rank 1's own error after the collective" in res["text"], res


@pytest.mark.timeout(150)
def test_a_rank_left_waiting_in_the_final_run_is_ended_and_its_peer_names_the_error(tmp_path):
    """Rank 1 raises before the all_reduce in the call's final run (every key decided). The final
    run is under the watchdog too: rank 0, inside the all_reduce, reads rank 1's report and is ended after the grace
    (exit 87, nothing journaled: no timed launch in flight), and rank 1, waiting at the exchange after the run, raises
    at once, naming its own error. Before, the final run was not watched: rank 0 waited in the all_reduce until rank 1's
    process ended, and rank 1 raised GroupTimeoutError after T + T/10 saying rank 0 'never arrived' (the review's
    D1)."""
    env = tuner_env(tmp_path, 20, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    ranks = run_ranks(CASES, 2, ["raised_in_the_final_run"], env={**env, "ATTEMPT": "0"}, timeout=100)
    assert ranks[0].returncode == 87, describe(ranks)
    assert "Nothing was journaled (no timed launch was in flight in the run)" in ranks[0].stderr, describe(ranks)
    (res,) = ranks[1].results
    # (rank 0 hosts the job's store here: rank 1 reads that its process ended, or, with torchrun's agent, the board)
    assert "never arrived" not in res["text"] and "rank 1's own error in the final run" in res["text"], res


@pytest.mark.timeout(150)
def test_a_rank_waiting_on_a_healthy_peer_in_a_subgroup_when_another_raised_is_not_ended(tmp_path):
    """3 ranks: rank 1 raises after the world all_reduce in run 2, and ranks 0 and 2 go on with all_reduces on the
    subgroup [0, 2] for about 8 s (rank 2 computing between them). Every rank ends the call with the same
    AutotuneError naming rank 1's error, exit status 0. Before, rank 0, inside a collective when it read rank 1's
    report, was ended after the grace (exit 87, "waiting for that rank": it waited on rank 2), and the other ranks,
    whose store rank 0 hosted, lost it (the closing review's F1): the grace now counts only inside a collective whose
    group holds the rank that reported."""
    env = tuner_env(tmp_path, 20, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    ranks = run_ranks(CASES, 3, ["busy_in_a_subgroup"], env={**env, "ATTEMPT": "0"}, timeout=120)
    assert [r.returncode for r in ranks] == [0, 0, 0], describe(ranks)
    for r in ranks:
        (res,) = r.results
        assert res["error"] == "AutotuneError" and "rank 1's own error after the world all_reduce" in res["text"], res


@pytest.mark.timeout(150)
def test_a_final_run_longer_than_the_timeout_ends_normally(tmp_path):
    """No rank fails; the call's final run (every key decided, its launches untimed) takes 12 s with T = 6 s: both
    ranks return the right result. With the final run watched for the peers' reports (the last commit), its
    deadline ended both ranks at T (exit 86: "run 6 did not finish within 6 s"; the closing review's F2): the
    final run has no deadline, as before that commit."""
    env = tuner_env(tmp_path, 6, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    ranks = run_ranks(CASES, 2, ["slow_final_run"], env={**env, "ATTEMPT": "0", "SLOW": "12"}, timeout=120)
    assert [r.returncode for r in ranks] == [0, 0], describe(ranks)
    assert [r.result.get("ok") for r in ranks] == [True, True], describe(ranks)


@pytest.mark.timeout(150)
def test_a_rank_left_waiting_in_a_hot_call_that_turned_tuning_blames_no_config(tmp_path):
    """As above, in a call that began hot and went on as a tuning call (every rank met a new key). Before, such a
    call opened no failure board: rank 1's report went nowhere and rank 0 journaled the config ``hung``."""
    env = tuner_env(tmp_path, 20, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    ranks = run_ranks(CASES, 2, ["left_waiting_in_a_hot_call_turned_tuning"], env={**env, "ATTEMPT": "0"},
                      timeout=100, stuck=[1])
    assert ranks[0].returncode == 87, describe(ranks)  # ended from the board after the grace, not at T (86)
    assert "journaled interrupted (no config is blamed)" in ranks[0].stderr, describe(ranks)
    cache = Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"])
    states = {r["state"] for p in cache.rglob("*.journal") if ".rank0" in p.name for r in records(p)}
    assert "interrupted" in states and "hung" not in states, states


@pytest.mark.timeout(200)
def test_a_rank_stopped_through_its_deadline_in_a_contextual_run_goes_on_and_blames_no_config(tmp_path):
    """Rank 1 (T = 8 s) stopped (SIGSTOP) in run 2, just after its launch of config 1, and continued 3 s past its
    deadline; it goes on 1.5 s later; rank 0 (T = 30 s) waits in the all_reduce. The deadline counts the time the
    process ran (``watchdog.Guard.credit_pauses``): the run finishes within it and the call goes on, choosing on both
    ranks with config 1 measured. Before, ``contextual_autotune``'s watchdog journaled config 1 ``hung`` (left out);
    then, since the seventieth session, ``interrupted`` with the pause, exit 86 (a suspect a rerun measured). (T was 4
    s: once, under the suite's load, rank 1's run took more than 4 s of its own running time, exit 86.)"""
    env = tuner_env(tmp_path, 8, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    stopper = stopping_at(tmp_path / "faults" / "stop-me.rank1", 8 + 3)
    per_rank = {0: {"TRITON_DIST_AUTOTUNE_TIMEOUT": "30"}, 1: {"TRITON_DIST_AUTOTUNE_TIMEOUT": "8"}}
    first = run_ranks(CASES, 2, ["stopped"], env={**env, "ATTEMPT": "0"}, timeout=100, per_rank_env=per_rank)
    stopper.join(timeout=5)
    assert all(r.returncode == 0 for r in first), describe(first)
    assert (tmp_path / "faults" / "stop-me.rank1").exists()  # it was stopped there
    for r in first:
        (res,) = r.results
        assert res["ok"] and res["chosen"] == 0 and res["states"][1] != "failed", res


@pytest.mark.timeout(200)
def test_a_rank_waiting_for_a_frozen_peer_in_a_contextual_run_blames_no_config(tmp_path):
    """Rank 1 (T = 30 s) stopped (SIGSTOP) in run 2, just after its launch of config 1, for 12 s; rank 0 (T = 4 s)
    waits for it in the all_reduce until its deadline. Its watchdog reads rank 1's beat on the call's board standing
    still: config 1 is journaled ``interrupted`` naming rank 1 (``rank 1 showed no sign of life``), exit 86, and the
    rerun measures config 1 and chooses on both ranks. Before, ``contextual_autotune`` read no beats at its deadline
    (``autotune`` did): rank 0 journaled config 1 ``hung`` and the rerun left it out."""
    env = tuner_env(tmp_path, 4, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    cache = Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"])
    # rank 1 stands still until rank 0's watchdog has journaled the run (it exits next)
    stopper = stopping_at(tmp_path / "faults" / "stop-me.rank1", 12, until=lambda: journaled(cache, 0))
    per_rank = {0: {"TRITON_DIST_AUTOTUNE_TIMEOUT": "4"}, 1: {"TRITON_DIST_AUTOTUNE_TIMEOUT": "30"}}
    first = run_ranks(CASES, 2, ["stopped"], env={**env, "ATTEMPT": "0"}, timeout=100, per_rank_env=per_rank)
    stopper.join(timeout=5)
    assert first[0].returncode == 86, describe(first)
    assert "rank 1 showed no sign of life" in first[0].stderr and "recorded as hung" not in first[0].stderr, \
        describe(first)
    said = {p.name: records(p) for p in cache.rglob("*.journal")}
    assert not any(r["state"] == "hung" for rs in said.values() for r in rs), said
    (own,) = [rs for name, rs in said.items() if ".rank0" in name]
    assert [r["state"] for r in own if r.get("index") == 1][-1] == "interrupted", own
    again = run_ranks(CASES, 2, ["stopped"], env={**env, "ATTEMPT": "1"}, timeout=100)
    assert all(r.returncode == 0 for r in again), describe(again)
    for r in again:
        (res,) = r.results
        assert res["ok"] and res["chosen"] == 0 and res["states"][1] != "failed", res


def torchrun(case: str, env: dict[str, str], restarts: int) -> subprocess.CompletedProcess:
    cmd, full_env = torchrun_command(["--standalone", "--nproc-per-node", "2", "--max-restarts", str(restarts),
                                      "--monitor-interval", "0.1"], CASES, [case], env)
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=200)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kill_ranks", ["1,1", "1,0"])
def test_a_rank_sigtermed_by_torchrun_at_the_exchange_blames_no_config(tmp_path, kill_ranks):
    """Under ``torchrun --max-restarts 2``, a rank is SIGKILLed in run 2 of attempts 0 and 1 (``kill_ranks``: rank
    1 both times, or rank 1 then rank 0; after config 0's warm-up, before its own launch of config 1); the other
    has launched config 1 and waits at the exchange that ends the run, where torchrun's SIGTERM reaches it
    (``SystemExit``). That interruption blames nothing: attempt 2 leaves out config 0 only (the crashes) and
    chooses config 1. Before, the SystemExit raised at the exchange was not journaled, rank 0's journal ended
    ``started`` in config 1 twice, and attempt 2 left config 1 out too (``crashed: ranks [0] ...``) and chose the
    slowest config, 2. With the killed rank alternating, each rank's journal holds one end in config 0, and the
    two count as the two attempts the records name (before: the most of one rank, 1: a suspect, launched a third
    time)."""
    env = tuner_env(tmp_path, 5, FAULT_DIR=str(tmp_path / "faults"), KILL_ATTEMPTS="0,1", KILL_RANKS=kill_ranks)
    (tmp_path / "faults").mkdir()
    proc = torchrun("restarted", env, restarts=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    results = parse_results(proc.stdout)
    waited = [str(1 - int(r)) for r in kill_ranks.split(",")]
    assert sorted((r["attempt"], r["rank"], r.get("error")) for r in results if "error" in r) == \
        [("0", int(waited[0]), "SystemExit"), ("1", int(waited[1]), "SystemExit")], results
    final = [r for r in results if "chosen" in r]
    assert sorted(r["rank"] for r in final) == [0, 1] and all(r["attempt"] == "2" for r in final), results
    ranks = sorted({int(r) for r in kill_ranks.split(",")})
    for res in final:
        assert res["ok"] and res["chosen"] == 1 and res["states"][0] == "failed", res
        assert res["errors"][0].startswith(f"crashed: ranks {ranks} were inside this config when 2"), res
        assert res["states"][1] != "failed" and res["states"][2] != "failed", res
    for rank in (0, 1):  # attempt 2 launches config 1 again (not left out) and never config 0
        assert 1 in launches(tmp_path / "faults", rank, "2") and 0 not in launches(tmp_path / "faults", rank, "2")


@pytest.mark.timeout(240)
def test_a_rank_waiting_at_an_exchange_hears_torchruns_sigterm_within_seconds(tmp_path):
    """The same job with the timeout of a real tuning (T = 60 s: the exchange's deadline is 66 s) and rank 1 killed
    in attempt 0 only: rank 0, waiting at the exchange that ends run 2, hears torchrun's SIGTERM within seconds,
    journals its config in flight ``interrupted``, and attempt 1 starts at once and chooses config 0 (rank 1's
    suspect, measured again). Before, a wait at an exchange of a group without a failure board (every contextual
    tuning) began with one blocking store wait of ``TRITON_DIST_AUTOTUNE_PROGRESS_S`` (30 s) or the whole deadline,
    whichever is shorter, during which Python runs no signal handler: rank 0 left 30 s after the signal (Ctrl-C
    too), just as torchrun's 30 s grace ran out and it sent SIGKILL (then nothing was journaled), and every restart
    waited that long."""
    env = tuner_env(tmp_path, 60, FAULT_DIR=str(tmp_path / "faults"), KILL_ATTEMPTS="0")
    (tmp_path / "faults").mkdir()
    proc = torchrun("restarted", env, restarts=1)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    results = parse_results(proc.stdout)
    errors = [r for r in results if "error" in r]
    assert len(errors) == 1, (results, proc.stderr[-3000:])  # before: none (rank 0 SIGKILLed by torchrun)
    interrupted = errors[0]
    assert (interrupted["attempt"], interrupted["rank"], interrupted["error"]) == ("0", 0, "SystemExit"), results
    killed = float((tmp_path / "faults" / "killed.attempt0").read_text())
    # from rank 1's kill: torchrun's look (0.1 s), its SIGTERM, a second or two (was 30 s, torchrun's grace); timed
    # from the kill, not from the call's start, so that a loaded machine's slower runs before it do not count
    assert interrupted["ended"] - killed < 7.5, (interrupted, killed)
    final = [r for r in results if "chosen" in r]
    assert sorted(r["rank"] for r in final) == [0, 1] and all(r["attempt"] == "1" for r in final), results
    for res in final:
        assert res["ok"] and res["chosen"] == 0 and "failed" not in res["states"], res


@pytest.mark.timeout(150)
def test_two_groups_of_one_job_never_read_or_delete_each_others_journals(tmp_path):
    """Ranks 2 and 3 (group A) tune first: config 1 raises there (journaled failed), then both are SIGKILLed
    inside config 2. Ranks 0 and 1 (group B) then tune the same kernel and key in the same cache folder: B
    measures every config (A's failure of config 1 is not B's) and, once decided, removes only its own journals:
    A's stay for A's next attempt."""
    env = tuner_env(tmp_path, 30, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    results = run_ranks(CASES, 4, ["two_groups"], env=env, timeout=120)
    assert [r.returncode for r in results] == [0, 0, -9, -9], describe(results)
    for r in results[:2]:
        (res,) = r.results
        assert res["ok"] and res["chosen"] == 0 and "failed" not in res["states"], res
        assert sorted(set(launches(tmp_path / "faults", r.rank, "0"))) == [0, 1, 2]
    left = sorted(Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"]).rglob("*.journal"))
    assert [p.name.split(".")[-2] for p in left] == ["rank0", "rank1"], left  # A's two journals, B's are gone
    for path in left:
        states = {(rec["index"], rec["state"]) for rec in records(path)}
        assert (1, "failed") in states and (2, "started") in states, (path, states)


@pytest.mark.timeout(150)
def test_closing_contenders_read_back_keep_their_drift_free_times(tmp_path):
    """Attempt 0 races 3 configs (``n_repeat=3``): config 2 leaves the screening, where 0 reads 0.5% ahead of 1;
    then 0 and 1 race 4 closing rounds, in which the machine runs at half, then twice the screening's speed and 1
    reads 10% ahead of 0 in every round. Their drift-free times choose 1. Each rank is SIGKILLed at the decision
    (Triton's listener), after the race's outcomes are journaled and before the journals are removed. Attempt 1
    reads all three back, races nothing and chooses among them: 1, by the same drift-free times (before: each
    contender's time was taken again as the median of all its samples, screening included, and 0 won, 1.0 ms
    against 1.005 ms)."""
    env = tuner_env(tmp_path, 30, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    first = run_ranks(CASES, 2, ["closing_read_back"], env={**env, "KILL_AT_DECISION": "1"}, timeout=100)
    assert [r.returncode for r in first] == [-9, -9], describe(first)
    decided = [r.result for r in first]
    assert decided[0] == decided[1] and decided[0]["chosen"] == 1, decided
    times = {int(i): t for i, t in decided[0]["times"].items()}
    assert times[1] < times[0] < 2.0, times  # drift-free: 1 leads by 10%
    journals = sorted(Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"]).rglob("*.journal"))
    assert len(journals) == 2, journals
    for path in journals:
        measured = {rec["index"]: rec for rec in records(path) if rec["state"] == "measured"}
        assert sorted(measured) == [0, 1, 2] and len(measured[0]["round_times"]) == 3 + 4, measured

    second = run_ranks(CASES, 2, ["closing_read_back"], env=env, timeout=100)
    assert all(r.returncode == 0 for r in second), describe(second)
    for r in second:
        res = r.result
        assert res["states"] == ["resumed"] * 3 and res["how"] == "tuned" and res["ok"], res
        assert res["chosen"] == 1, res  # before: 0, by the median of all its samples (1.0 against 1.005)
        assert {int(i): t for i, t in res["times"].items()} == times, (res["times"], times)


BIG = "1" + "0" * 400  # a JSON integer no float holds: math.isfinite raises OverflowError on it


@pytest.mark.timeout(200)
@pytest.mark.parametrize("damage", ["per_rank NaN", "per_rank huge", "time huge", "at huge"])
def test_a_journal_read_back_with_numbers_no_float_holds_costs_neither_the_run_nor_the_decision(tmp_path, damage):
    # a journal's measured record of config 2, damaged. Before: NaN per-rank times reached the cache's table, whose
    # write refused them: the decision was lost with a warning and the key tuned again by the next job; a 400-digit
    # integer raised OverflowError on every rank, at every attempt (per_rank: float(); time and at: isfinite; the
    # attempt's first record's wall time orders the attempts)
    env = tuner_env(tmp_path, 30, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    first = run_ranks(CASES, 2, ["closing_read_back"], env={**env, "KILL_AT_DECISION": "1"}, timeout=100)
    assert [r.returncode for r in first] == [-9, -9], describe(first)
    field, how = damage.split(" ")
    value = {"NaN": "NaN", "huge": BIG}[how]
    cache = Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"])
    for path in sorted(cache.rglob("*.journal")):
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            record = json.loads(line)
            if field == "at" and n == 0:
                record["at"] = f"@{value}@"
            elif field != "at" and record.get("state") == "measured" and record["index"] == 2:
                if field == "per_rank":
                    record["per_rank"] = f"@[{value}, 1.0]@"
                else:
                    record[field] = f"@{value}@"
            lines[n] = json.dumps(record).replace('"@', "").replace('@"', "")
        path.write_text("\n".join(lines) + "\n")
    second = run_ranks(CASES, 2, ["closing_read_back"], env=env, timeout=100)
    assert all(r.returncode == 0 for r in second), describe(second)
    assert not any("could not write" in r.stderr for r in second), describe(second)
    assert [r.result["chosen"] for r in second] == [1, 1], describe(second)
    assert any(p.suffix == ".json" for p in cache.rglob("*")), sorted(cache.rglob("*"))  # the decision is kept
