"""``autotune_pg`` and ``autotune_replicas`` given wrongly: a clear error, at once, on every rank that can know
(scenarios: tests/scenarios/layout_cases.py)."""

from __future__ import annotations

import json
import os
import signal

import pytest
from harness import HERE, base_env, describe, run_cli, run_process, run_ranks, stopping_at, tuner_env

CASES = HERE / "scenarios" / "layout_cases.py"
T = 40  # the exchanges' timeout: "at once" below is under a quarter of it


@pytest.fixture
def env(tmp_path):
    return tuner_env(tmp_path, timeout=T)


def four_ranks(case: str, env: dict[str, str]):
    results = run_ranks(CASES, 4, [case], env=env, timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    return results


def every_rank_at_once(results, error: str, text: str) -> None:
    """Every rank raised ``error`` with ``text`` in its message, in under a quarter of the timeout (not after it)."""
    for r in results:
        assert r.result["error"] == error, describe(results)
        assert text in r.result["message"], r.result
        assert r.result["seconds"] < T / 4, r.result


@pytest.mark.timeout(120)
def test_a_replica_group_this_rank_is_not_in_is_named_as_autotune_replicas(env):
    results = four_ranks("replicas_not_a_member", env)
    error = results[3].result
    assert error["error"] == "BadInputError", describe(results)
    assert error["message"].startswith("autotune_replicas: this rank is not a member"), error  # was: autotune_pg


@pytest.mark.timeout(60)
def test_comm_null_as_autotune_pg_is_a_bad_input_naming_it(env):
    proc = run_process(CASES, ["mpi_comm_null"], env=env, timeout=50)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")][-1]
    # was: mpi4py's own MPI_ERR_COMM (an MPI.Exception, not an AutotuneError) from the channel's Idup
    assert '"error": "BadInputError"' in result and "MPI.COMM_NULL" in result, proc.stdout


@pytest.mark.timeout(120)
def test_replicas_that_overlap_the_tp_group_are_a_clear_error_on_every_rank(env):
    # was: ExchangeError 'group rank(s) [1] are at another step of the protocol ... a setting ... differs'
    every_rank_at_once(four_ranks("replicas_overlap_the_group", env), "BadInputError",
                       "autotune_replicas: its group 'default' shares ranks")


@pytest.mark.timeout(120)
def test_autotune_replicas_on_some_ranks_of_a_group_only_is_a_mismatch_on_every_rank(env):
    # was: rank 3 ExchangeError 'group rank 0 (global rank 2) sent something that is not an outcome (None):
    # another process wrote under the tuner's keys', the others GroupTimeoutError after T
    every_rank_at_once(four_ranks("replicas_on_some_ranks_only", env), "MismatchError",
                       "differ in autotune_replicas (the replica count): ranks [0]: 2; ranks [1]: not given")


@pytest.mark.timeout(120)
def test_autotune_replicas_missing_on_one_rank_whose_replica_partner_passes_it_is_an_error_on_every_rank_at_once(
        env):
    # rank 2 alone passes no autotune_replicas: it agrees with its TP peer 3 only, while rank 0 waits for it across
    # replicas. Was: ranks 2 and 3 MismatchError at once, ranks 0, 1 and 3 GroupTimeoutError after T (rank 3's own
    # mismatch lost behind its timeout waiting for rank 1)
    results = four_ranks("replicas_missing_on_one_rank", env)
    for r in results:
        assert r.result["error"] in ("MismatchError", "BadInputError"), describe(results)
        assert "differ in autotune_replicas (the replica count)" in r.result["message"], r.result
        assert r.result["seconds"] < T / 4, r.result
    assert [r.result["error"] for r in results[2:]] == ["MismatchError", "MismatchError"], describe(results)
    assert "global rank 2 raised MismatchError" in results[0].result["message"], results[0].result


@pytest.mark.timeout(120)
def test_replicas_that_differ_in_cache_key_extra_are_a_mismatch_on_every_rank(env):
    # the replicas keep one decision, read and written by replica 0's group rank 0 under its own text. Was: every
    # rank tuned and served that decision, and replica 1's text was never looked at
    every_rank_at_once(four_ranks("replicas_differ_in_cache_key_extra", env), "MismatchError",
                       "differ in cache_key_extra: replicas [0]: 'v2'; replicas [1]: 'v3'")


@pytest.mark.timeout(120)
def test_replicas_that_see_other_shapes_are_a_mismatch_naming_the_replicas_group_by_its_ranks(env):
    # one replica's batch of another shape. Was: "the replicas linked by group '3' differ in key" (torch's internal
    # name of the group, a number of new_group's calls, which the user never wrote), where the same error inside a
    # group says "the ranks of group 'ranks [0, 1]'"
    results = four_ranks("replicas_differ_in_key", env)
    every_rank_at_once(results, "MismatchError", "differ in key: replicas [0]: 4; replicas [1]: 8")
    for r in results:
        linked = "ranks [0, 2]" if r.rank % 2 == 0 else "ranks [1, 3]"
        assert f"the replicas linked by group '{linked}' differ in key" in r.result["message"], r.result


#: the exchanges' timeout of the tests of groups created in different orders: the ranks raise well within a quarter
#: of it (a waiting rank writes its group's name from 2 s into a wait on, and reads a missing rank's from 3 s on)
NAMES_T = 60


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["groups_created_in_another_order_on_one_rank",
                                  "groups_created_in_another_order_on_one_rank_coming_late"])
def test_a_group_that_ranks_created_in_other_orders_is_said_to_be_named_otherwise_there(tmp_path, case):
    # rank 0 knows the TP group as torch's group '1', rank 1 as '2': their channels live under different names and
    # never meet. Each rank, waiting at its group's first exchange, writes the name it waits under and reads the
    # other's: both raise BadInputError within seconds, naming both names. Was: GroupTimeoutError after T on both,
    # whose message could only guess at this cause ("Or they know this group by another name"). Rank 1 coming 1.5 s
    # late: rank 0 raises a look before rank 1 reads its name, which rank 0 leaves in the store for it. Both then
    # tune on the default group, rank 0 5 s late: rank 1 reads the key rank 0 left before its wait began, and waits
    # (before: BadInputError on rank 1 after 3 s, "global rank 0 at the group it knows as '1'", and rank 0 then
    # waited T for it and raised GroupTimeoutError)
    results = run_ranks(CASES, 2, [case], env=tuner_env(tmp_path, NAMES_T), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r, (name, there) in zip(results, (("1", "2"), ("2", "1")), strict=True):
        first = r.results[0]
        assert first["error"] == "BadInputError", describe(results)
        message = first["message"]
        assert f"the first exchange of the group torch named '{name}' (by the order of" in message, first
        assert f"global rank {1 - r.rank} at the group torch named '{there}'" in message, first
        assert "global ranks [0, 1]" in message and "use_local_synchronization=True" in message, first
        assert first["seconds"] < NAMES_T / 4, first
        if case.endswith("late"):
            assert r.results[1]["error"] is None, describe(results)


@pytest.mark.timeout(120)
def test_a_rank_whose_wait_began_before_the_other_named_rank_left_reads_its_key(tmp_path):
    # rank 0 alone tunes on the default group, the others on a group of all four; rank 3 comes 1.5 s late, its ticket
    # after rank 0 found the others waiting elsewhere: rank 0 lingers 3 s before it leaves its key, so rank 3 counts
    # it too (without the linger, rank 3 waited T and raised GroupTimeoutError). Every rank is told that some tune
    # on the default group (before: "by the order of this rank's new_group calls", of the default group too)
    results = run_ranks(CASES, 4, ["groups_in_another_order_on_rank_0_of_four_rank_3_late"],
                        env=tuner_env(tmp_path, 20), timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert [r.result["error"] for r in results] == ["BadInputError"] * 4, describe(results)
    assert all(r.result["seconds"] < 15 for r in results), describe(results)
    assert all("the default group (torch's '0')" in r.result["message"] and "autotune_pg=" in r.result["message"]
               for r in results), describe(results)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["groups_created_in_one_order_both_tuned", "groups_created_in_one_order_a_rank_late"])
def test_groups_of_the_same_ranks_created_in_one_order_are_tuned_early_rank_or_late(tmp_path, case):
    # two groups of the same ranks on every rank, created in one order, tuned one after the other: no rank is told
    # its peer waits elsewhere, whether both come at once or one comes 5 s late to each group's first exchange (the
    # other waits past its look at the late rank's name, which the late rank has not written: it is not waiting)
    results = run_ranks(CASES, 2, [case], env=tuner_env(tmp_path, NAMES_T), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        assert [x["error"] for x in r.results] == [None, None], describe(results)
    if case.endswith("late"):
        waited = [results[0].results[0]["seconds"], results[1].results[1]["seconds"]]
        assert all(w > 3.5 for w in waited), describe(results)  # (past the first read of the late rank's name)


@pytest.mark.timeout(150)
def test_a_rank_stopped_as_its_first_wait_ends_with_its_name_still_up_is_waited_for_at_another_group(tmp_path):
    # rank 1 waited at group '1''s first exchange until it wrote its name there and is stopped (SIGSTOP, 12 s) as
    # that wait ends, before it deletes its key; the call ends there on both ranks (rank 1's key_fn raises), and rank
    # 0 waits for rank 1 at group '2', reading rank 1's key naming '1'. The keys that wait waited for are all in the
    # store (rank 1 met rank 0 there): it is waited for, and both tune group '2' once rank 1 goes on. Before: rank 0
    # raised BadInputError 6 s into its wait ("global rank 1 at the group torch named '1'"), and rank 1 then waited
    # T for it (GroupTimeoutError)
    stopper = stopping_at(tmp_path / "stop-me.rank1", resume_after=12.0)
    results = run_ranks(CASES, 2, ["groups_in_one_order_a_rank_stopped_as_its_first_wait_ends"],
                        env=tuner_env(tmp_path, NAMES_T, FAULT_DIR=str(tmp_path)), timeout=130)
    stopper.join(timeout=5)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        assert [x["error"] for x in r.results] == ["BadInputError", None], describe(results)
    assert results[0].results[1]["seconds"] > 6.5, describe(results)  # (rank 0 waited past its look and linger)


@pytest.mark.timeout(120)
def test_groups_of_the_same_ranks_tuned_from_two_threads_in_other_orders_are_waited_for(tmp_path):
    # each rank's first wait stands 5 s at one group while its peer's stands at the other (threads of each process
    # come to both): legitimate, so nothing is written or read, and both tunings complete. A look at the names here
    # would have read the peer waiting at the other group and raised
    results = run_ranks(CASES, 2, ["groups_tuned_from_two_threads_in_other_orders"],
                        env=tuner_env(tmp_path, NAMES_T), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        assert [x["error"] for x in r.results] == [None, None], describe(results)
        assert max(x["seconds"] for x in r.results) > 3.5, describe(results)  # (a wait past the looks' start)


@pytest.mark.timeout(120)
def test_a_replica_that_forgot_autotune_replicas_is_among_the_causes_its_partners_are_told(tmp_path):
    # replica 1 tunes its TP group alone (no autotune_replicas) and goes on; replica 0 waits for it across replicas
    # until T. Was: the causes named another autotune_pg or key, a crash, a hang or autotune=False, not the option
    # that differs
    results = run_ranks(CASES, 4, ["replicas_given_by_one_replica_only"], env=tuner_env(tmp_path, 4), timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert [r.result["error"] for r in results] == ["GroupTimeoutError", "GroupTimeoutError", None, None], \
        describe(results)
    for r in results[:2]:
        assert f"at '[replicas_one_side] agree across replicas' for group ranks [1] (global [{r.rank + 2}]), which " \
               "never arrived" in r.result["message"], r.result
        assert "called the tuned function with another autotune_pg, autotune_replicas or key" in r.result["message"]


#: the exchanges' timeout of the tests of ranks gone before their first call: their peers raise well within a
#: quarter of it (a rank is looked at once a second from 2 s into a wait on, :mod:`triton_dist_tune.group.departed`)
GONE_T = 60


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("case", "rank_3_ends", "named"), [
    ("a_rank_killed_before_its_first_call", -signal.SIGKILL,
     "Gone: group rank 1 (global 3) is gone without counting out (its process, pid "),
    ("a_rank_crashing_before_its_first_call", 1,
     "Gone: group rank 1 (global 3) ended its process without coming (exited on an uncaught RuntimeError)."),
])
def test_a_rank_gone_before_its_first_call_is_named_so_by_its_peer_within_seconds(tmp_path, case, rank_3_ends, named):
    # rank 3 is killed, or its program ends on an uncaught error (its exit hooks run and count it out, saying how),
    # before its TP group's first exchange: no beat of it exists yet, but its process record names a process of this
    # host that /proc no longer has, or its count-out says how it ended: its peer raises within seconds, without the
    # group-name hint (a dead rank names no group). Was: the peer waited T (60 s); a crash counted out as "exited
    # normally"; before that, "which never arrived: they crashed, hung, or called ..." and the hint
    results = run_ranks(CASES, 4, [case], env=tuner_env(tmp_path, GONE_T), timeout=130)
    assert [r.returncode for r in results] == [0, 0, 0, rank_3_ends], describe(results)
    assert [r.result["error"] for r in results[:3]] == [None, None, "GroupTimeoutError"], describe(results)
    said = results[2].result["message"]
    assert "for group ranks [1] (global [3]), which will not come" in said and named in said, said
    assert "another name" not in said, said
    assert results[2].result["seconds"] < GONE_T / 4, results[2].result


@pytest.mark.timeout(150)
def test_ranks_that_ended_their_process_without_calling_are_named_so_by_their_peers_within_seconds(tmp_path):
    # ranks 2 and 3 exit normally without calling (their exits count them out of the job); ranks 0 and 1, waiting
    # for them on the default group, read their count-outs and raise within seconds. Was: they waited T (60 s), then
    # said so; before that, "which never arrived: they crashed, hung, or called ..." alone
    results = run_ranks(CASES, 4, ["two_ranks_end_their_job_without_calling"], env=tuner_env(tmp_path, GONE_T),
                        timeout=130)
    assert [r.returncode for r in results] == [0, 0, 0, 0], describe(results)
    for r in results[:2]:
        said = r.result["message"]
        assert r.result["error"] == "GroupTimeoutError", describe(results)
        # (rank 1 may look after rank 0 gave up and ended: it names rank 0 too, as a rank that came and ended)
        assert ("group rank 2 (global 2) ended its process without coming (exited normally); group rank 3 (global 3) "
                "ended its process without coming (exited normally).") in said, said
        assert "), which will not come: Gone: group rank " in said, said
        assert "group rank 0 (global 0) ended its process without coming" not in said, said
        assert r.result["seconds"] < GONE_T / 4, r.result


@pytest.mark.timeout(120)
def test_a_rank_late_but_alive_before_its_first_call_is_waited_for(tmp_path):
    # rank 3 comes to its TP group's first exchange 4 s after rank 2, which looks at whether it has ended at 2 s and
    # once a second after: it is alive and has not counted out, so rank 2 waits, and every tuning succeeds
    results = run_ranks(CASES, 4, ["a_rank_late_but_alive_before_its_first_call"], env=tuner_env(tmp_path, GONE_T),
                        timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert [r.result["error"] for r in results] == [None] * 4, describe(results)
    assert results[2].result["seconds"] > 3, results[2].result  # (it did wait, through looks at 2 and 3 s)


@pytest.mark.timeout(120)
def test_the_cache_listing_tells_a_layouts_decision_from_a_tp_groups_own(tmp_path):
    # the same key tuned as 2 replicas of 2 ranks, and by a TP group alone: two entries. Was: both listed with
    # ranks 2 and group 'ranks [0, 1]', nothing in the file or the listing telling which serves the layout
    env = tuner_env(tmp_path)
    results = four_ranks("one_key_tuned_as_replicas_then_alone", env)
    assert all(res["error"] is None for r in results for res in r.results), describe(results)
    listed = run_cli(["list", "--json"], base_env(env))
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)["entries"]
    assert sorted((e["key"], e["group_size"], e["replicas"] or 1) for e in entries) == [("4", 2, 1), ("4", 2, 2)], \
        entries
    table = run_cli(["list"], base_env(env)).stdout
    rows = [line.split() for line in table.splitlines() if line.split()[1:2] == ["4"]]
    assert sorted(row[6] for row in rows) == ["2", "2x2"], table  # the ranks column
    layout = next(e for e in entries if e["replicas"] == 2)
    shown = run_cli(["show", layout["name"]], base_env(env)).stdout
    assert "replica 0 of 2 tuned as one (autotune_replicas): serves each replica's group" in shown, shown


@pytest.mark.timeout(120)
def test_a_timeout_names_group_rank_0_among_the_ranks_that_never_arrived(tmp_path):
    # ranks 2 and 3 wait on the default group, where ranks 0 and 1 never come (they tune on their TP group). Rank 0
    # gathers an exchange and writes no message of its own: before, the timeout named group ranks [1] alone, and so
    # did the progress lines while they waited (a line a second here, T = 6 s)
    env = tuner_env(tmp_path, 6, TRITON_DIST_AUTOTUNE_PROGRESS_S="1")
    results = run_ranks(CASES, 4, ["tp_group_on_two_ranks_default_group_on_two"], env=env, timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert [r.result["error"] for r in results] == [None, None, "GroupTimeoutError", "GroupTimeoutError"], \
        describe(results)
    for r in results[2:]:
        assert "for group ranks [0, 1] (global [0, 1]), which never arrived" in r.result["message"], r.result
        progress = [line for line in r.stderr.splitlines() if "has waited" in line]
        # (the first line may come before any look read the log: it names rank 1 alone, as before)
        assert progress and "for group ranks [0, 1] (global [0, 1])" in progress[-1], progress


@pytest.mark.timeout(120)
def test_a_short_wait_does_not_name_group_rank_0_that_came_before_it(tmp_path):
    # rank 0 came first and waited; rank 1's wait of 0.3 s ran out before rank 0's first look (1 s into its wait)
    # logged its arrival. Was: "for group ranks [0, 2] ..., which never arrived" (no look found rank 0 in the log)
    results = run_ranks(CASES, 3, ["rank_0_waiting_first_and_a_short_wait_timing_out"], env=tuner_env(tmp_path, 60),
                        timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert [r.result["error"] for r in results] == [None, "GroupTimeoutError", None], describe(results)
    assert "for group ranks [2] (global [2]), which never arrived" in results[1].result["message"], results[1].result


@pytest.mark.timeout(120)
def test_a_rank_that_times_out_leaves_rank_0s_arrival_for_the_ranks_that_come_later(tmp_path):
    # rank 0 waits at a barrier and logs its arrival at its first look; rank 1 logs itself too, then gives up
    # (deadline 2 s); rank 2 comes after that. Was: rank 1 deleted the log as its wait ended, rank 0's entry with
    # it, and rank 2's timeout named "group ranks [0, 3] ..., which never arrived" (rank 0 was waiting there)
    results = run_ranks(CASES, 4, ["rank_0_waiting_while_a_rank_that_logged_itself_times_out"],
                        env=tuner_env(tmp_path, 60), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert [r.result["error"] for r in results] == [None, "GroupTimeoutError", "GroupTimeoutError", None], \
        describe(results)
    assert "for group ranks [3] (global [3]), which never arrived" in results[2].result["message"], \
        results[2].result


@pytest.mark.timeout(120)
def test_a_tp_groups_decisions_are_kept_in_decided_in_under_the_group_identity_as_documented(env):
    # docs/autotune.md and docs/api.md said only that `.tuner.decided` maps a key to its config: a TP group's
    # decisions are never there, and the pages now say where they are
    for r in four_ranks("where_decisions_are_kept", env):
        tp_name, tp_ranks = r.result["tp"]
        across_name, across_ranks = r.result["across"]
        tp_id, across_id = ("torch", tp_name, tuple(tp_ranks)), ("torch", across_name, tuple(across_ranks))
        assert r.result["decided"] == [2], r.result
        assert r.result["decided_in"] == sorted([repr((tp_id, 3)), repr((tp_id, across_id, 5))]), r.result


@pytest.mark.timeout(120)
def test_a_key_fn_that_raises_on_one_rank_of_a_layout_is_an_error_on_every_rank_at_once(env):
    # was: ranks 1 and 3 (its replica group) BadInputError at once; ranks 0 and 2 GroupTimeoutError after T
    every_rank_at_once(four_ranks("key_fn_raises_on_one_rank", env), "BadInputError",
                       "key_fn failed: ValueError: no key on rank 1")


@pytest.mark.timeout(120)
def test_a_wrong_group_on_one_rank_is_a_bad_input_error_on_every_rank_at_once(env):
    """Rank 3 passes a replica group it is not in; the others pass theirs and wait for it. Rank 3 tells the job
    (a note in its store), so ranks 1 and 2, waiting for it, raise BadInputError quoting its error, and rank 0,
    waiting for rank 1, learns it from rank 1's note in turn. Before: ranks 0-2 waited T (40 s) at their first
    exchange and raised GroupTimeoutError, guessing why."""
    results = four_ranks("replicas_wrong_on_one_rank", env)
    every_rank_at_once(results, "BadInputError", "autotune_replicas: this rank is not a member")
    for r in results[:3]:
        assert "will not come: global rank" in r.result["message"], r.result
    assert "global rank 3 raised BadInputError" in results[1].result["message"], results[1].result
    assert "global rank 3 raised BadInputError" in results[2].result["message"], results[2].result


@pytest.mark.timeout(60)
def test_a_rank_that_calls_again_with_a_right_group_withdraws_its_note(env):
    """The note a wrong group posts is withdrawn by the rank's next call with a right group: marked (when, and the
    group that call resolved), so that a peer already waiting for the rank still reads it, while a wait that begins
    later does not (a rank that caught the error and called again is waited for normally by its peers afterwards);
    the rank's first call after twice the timeout deletes it."""
    proc = run_process(CASES, ["note_withdrawn"], env=env, timeout=50)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    bad, posted, good, marked, later, after = lines
    assert bad["error"] == "BadInputError" and "autotune_pg must be a torch.distributed ProcessGroup" in bad["message"]
    assert posted["posted"] == {"0": bad["message"]}, posted
    assert good["error"] is None and marked["withdrawn"] and marked["text"] == bad["message"], lines
    assert marked["count"] == 1, lines  # (a world of one: its group reads no notes, so the mark names none)
    assert later["error"] is None and after == {"after": {}, "count": 0}, lines


@pytest.mark.timeout(120)
def test_ranks_that_catch_a_wrong_group_error_and_call_again_tune_in_step(env):
    """After a wrong group on one rank, every rank catches the BadInputError and calls again with the right group,
    the wrong rank late. Its note of the first call, already answered, is not raised again, and the rank that
    waited for it in the first call is back in step with it. Before: the waiting rank raised BadInputError again,
    quoting the note of the first call (then every rank did, through its note)."""
    results = run_ranks(CASES, 2, ["called_again_after_a_wrong_group"], env=env, timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        first, again, cached = r.results
        assert first["error"] == "BadInputError", describe(results)
        assert again["error"] is None and cached["error"] is None, describe(results)


@pytest.mark.timeout(240)
def test_a_wrong_groups_note_is_posted_without_waiting_for_a_slow_new_client_of_the_store(tmp_path):
    """Every new client of the job's store takes 20 s to connect here (the clone wrapped to sleep first: torch's
    reverse DNS lookup of the store's address on a slow resolver, docs/operations.md, made deterministic). Before, a
    wrong autotune_pg's note made two clients on the caller's thread before its error was raised (its beat's, and
    the one its exit marks the note on): 40 s for the wrong rank, and its peer, which posts the error on in turn,
    waited for its note and then for its own two. Now both connect on other threads: each rank raises in under a
    quarter of the 20 s, rank 1 asks for no client on its calling thread, and its exit still marks the note (on the
    job's client while its own is connecting) within ENDED_WAIT_S."""
    from triton_dist_tune.group.unresolved import ENDED_WAIT_S

    results = run_ranks(CASES, 2, ["wrong_group_beside_slow_clones"], env=tuner_env(tmp_path, timeout=120),
                        timeout=200)
    assert all(r.returncode == 0 for r in results), describe(results)
    (waited, marked), (wrong, ended) = results[0].results, results[1].results
    assert wrong["error"] == "BadInputError" and "autotune_pg must be" in wrong["message"], describe(results)
    assert waited["error"] == "BadInputError" and "global rank 1 raised BadInputError" in waited["message"], waited
    assert wrong["seconds"] < 5 and waited["seconds"] < 5, (wrong, waited)
    assert ended["on_caller"] == 0 and ended["end_s"] < 2 * ENDED_WAIT_S and marked["marked"], (ended, marked)


def first_call_stopped_rank_1s_group(results) -> None:
    """Every rank ended; in the first call rank 1 (a wrong autotune_pg) and rank 0, which waited for it, raised
    BadInputError, and ranks 2 and 3 (the other TP group) tuned."""
    assert all(r.returncode == 0 for r in results), describe(results)
    first = [r.results[0] for r in results]
    assert first[1]["error"] == "BadInputError", describe(results)
    assert first[0]["error"] == "BadInputError" and "global rank 1 raised BadInputError" in first[0]["message"]
    assert first[2]["error"] is None and first[3]["error"] is None, describe(results)


@pytest.mark.timeout(120)
def test_a_note_stops_no_rank_outside_the_call_it_was_about(env):
    """Rank 1's wrong autotune_pg stops rank 0, which waits for it in the same call; ranks 2 and 3 (the other TP
    group) tune. Then every rank tunes another function on the whole job, rank 1 late: its note, still in the
    store, is about the first function's call, so ranks 2 and 3 wait for rank 1 and every rank tunes, in under half
    the deadline. Before: ranks 2 and 3 raised BadInputError quoting rank 1's stale note at once, and ranks 0 and 1
    then waited T (40 s) for them and raised GroupTimeoutError."""
    results = run_ranks(CASES, 4, ["stale_note_of_another_group"], env=env, timeout=100)
    first_call_stopped_rank_1s_group(results)
    for r in results:
        second = r.results[1]
        assert second["error"] is None, describe(results)
        assert second["seconds"] < T / 2, second  # rank 1 is 4 s late: no rank waits its deadline (40 s)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", ["at_once", "late"])
def test_a_note_stops_no_rank_outside_the_call_it_was_about_when_the_same_function_is_called_again(env, answer):
    """As above, but every rank then calls the same function again (the same key) on the whole job, rank 1 4 s late.
    Rank 0 answered rank 1's note in the first call, waiting in their TP group; a note answered in another group by
    a rank of the group now waiting is about that earlier call, so ranks 2 and 3 wait for rank 1 and every rank
    tunes. ``late``: rank 0 calls 1.5 s late, and ranks 2 and 3, who have ended a call of the function since the
    note was posted, wait for its answer. Before: ranks 2 and 3 raised BadInputError quoting rank 1's stale note at
    once (the note is scoped by the function's name), and ranks 0 and 1 then waited T (40 s) for them and raised
    GroupTimeoutError."""
    env = {**env, **({"ANSWER_LATE": "1"} if answer == "late" else {})}
    results = run_ranks(CASES, 4, ["stale_note_same_function"], env=env, timeout=100)
    first_call_stopped_rank_1s_group(results)
    for r in results:
        second, third = r.results[1:]
        assert second["error"] is None and third["error"] is None, describe(results)
        assert second["seconds"] < T / 2, second  # rank 1 is 4 s late: no rank waits its deadline (40 s)


@pytest.mark.timeout(240)
def test_the_pass_on_note_of_a_rank_late_to_the_next_call_stops_no_rank(tmp_path):
    """Rank 1 calls with a wrong autotune_pg; rank 0, waiting for it in their TP group, raises it and posts its own
    note passing the error on; ranks 2 and 3 tune the key on theirs. Every rank then calls the same function again
    on the whole job, rank 1 4 s late and rank 0 20 s late (over the 10 s grace for an unanswered note), its note
    still in the store.
    Its note was passed on in a call on the TP group {0, 1} alone (the note names its call's groups), so it is not
    about a wait on the whole job: ranks 2 and 3 wait for rank 0 as for any late rank, and every rank tunes. Before:
    ranks 2 and 3 raised BadInputError in the second call, at 4.0 s, quoting rank 0's note of the first (rank 0
    answered it itself, so no other rank's answer marked it stale, and they had ended their first call before it
    was posted: no grace either); the scenario's third call then met the others' second. The deadline here is 60 s,
    40 s more than rank 0 is late: no rank waits it."""
    results = run_ranks(CASES, 4, ["stale_pass_on_note"], env=tuner_env(tmp_path, timeout=60), timeout=200)
    assert all(r.returncode == 0 for r in results), describe(results)
    first = [r.results[0] for r in results]
    assert first[1]["error"] == "BadInputError", describe(results)
    assert first[0]["error"] == "BadInputError", describe(results)
    assert "global rank 1 raised BadInputError" in first[0]["message"], describe(results)
    assert first[2]["error"] is None and first[3]["error"] is None, describe(results)
    for r in results:
        second, third = r.results[1:]
        assert second["error"] is None and third["error"] is None, describe(results)


def test_a_notes_call_groups_are_read_back_and_a_damaged_list_names_none():
    """A pass-on note names its call's groups (``[name, [global ranks]]`` pairs); a list that is not of such pairs
    (another process's, damaged) names none, and the note is read as one without them (its groups not said)."""
    from triton_dist_tune.group.note import parse_about as _about

    line = json.dumps({"about": ["f"], "posted": 1.0, "groups": [["1", [0, 1]], ["default", [0, 1, 2, 3]]]})
    assert _about(line) == (("f",), 1.0, (("1", (0, 1)), ("default", (0, 1, 2, 3))))
    for groups in ([["1", [0, "1"]]], [["1"]], "1", [[1, [0]]]):
        assert _about(json.dumps({"about": ["f"], "posted": 1.0, "groups": groups})) == (("f",), 1.0, None)
    assert _about(json.dumps(["f"])) == (("f",), None, None)


@pytest.mark.timeout(150)
def test_a_peer_waiting_for_a_wrong_rank_that_calls_again_at_once_elsewhere_raises_its_note(tmp_path):
    """Rank 0 waits for rank 1 in their TP group; rank 1 calls with a group it is not in (BadInputError, a note),
    catches it and calls again at once on its replica group {1, 3}, with rank 3, which resolves well and withdraws
    the note within milliseconds. Rank 0, waiting since before, raises the note's BadInputError (it reads notes
    once a second). Before: that call deleted the note before rank 0 read it, and rank 0 waited its whole deadline
    (60 s here) and raised GroupTimeoutError."""
    _, waited = wrong_then_at_once_another(tmp_path, "wrong_group_then_at_once_another", 60)
    assert waited["error"] == "BadInputError", waited
    assert "global rank 1 raised BadInputError" in waited["message"], waited


def wrong_then_at_once_another(tmp_path, case: str, timeout: float, wrap=None, **extra: str) -> tuple[dict, dict]:
    """Run a scenario of 4 gloo ranks where rank 1 calls with a group it is not in, then at once on its replica
    group {1, 3} with rank 3, and rank 0 waits for it on their TP group (``timeout``: the tuner's; ``wrap``, ``extra``:
    :func:`harness.run_ranks`'s, more tuner variables); checks rank 1's two calls and rank 3's, and returns rank 1's
    wrong call's result and rank 0's."""
    results = run_ranks(CASES, 4, [case], env=tuner_env(tmp_path, timeout=timeout, **extra), timeout=130, wrap=wrap)
    assert all(r.returncode == 0 for r in results), describe(results)
    wrong, again = results[1].results
    assert wrong["error"] == "BadInputError" and "not a member" in wrong["message"], describe(results)
    assert again["error"] is None and results[3].result["error"] is None, describe(results)
    return wrong, results[0].result


@pytest.mark.timeout(150)
def test_a_peer_that_waits_only_after_a_wrong_ranks_note_is_withdrawn_times_out_naming_its_error(tmp_path):
    """Rank 1 calls with a group it is not in (BadInputError, a note), then on its replica group {1, 3} with rank 3
    (the note withdrawn); only then does rank 0 call on its TP group {0, 1} and wait for rank 1, which never comes
    there. Rank 0 cannot tell that call from a later one rank 1 may still make on that group (see
    group/unresolved.py), so it waits its deadline (8 s here) and raises GroupTimeoutError, whose message names
    rank 1's withdrawn note and quotes its error. Before: the message only guessed (crashed, hung, another
    autotune_pg or key)."""
    wrong, waited = wrong_then_at_once_another(tmp_path, "wrong_group_withdrawn_before_a_peer_waits", 8)
    assert waited["error"] == "GroupTimeoutError", waited
    assert "global rank 1 raised BadInputError" in waited["message"], waited
    assert wrong["message"][:200] in waited["message"], waited


@pytest.mark.timeout(150)
def test_a_peer_that_waits_only_after_a_wrong_rank_has_ended_stops_at_once_naming_it(tmp_path):
    """As the test above, but rank 1 then ends its process normally (its exit hooks run), and rank 0 calls only
    after that (ordered through the store). Rank 1's exit marked its withdrawn note ended: it can never come to any
    exchange again, so rank 0 raises GroupTimeoutError at once (under a quarter of its 60 s deadline), naming rank 1
    as ended and quoting its note's error. Before: rank 0 waited its whole deadline."""
    wrong, waited = wrong_then_at_once_another(tmp_path, "wrong_group_withdrawn_then_ended", 60)
    assert waited["error"] == "GroupTimeoutError", waited
    assert "global rank 1, which has ended" in waited["message"], waited
    assert wrong["message"][:200] in waited["message"], waited
    assert waited["seconds"] < 60 / 4, waited


#: runs a rank in a pid namespace of its own (its note's process then reads as on another host); ``sh`` stays the
#: namespace's init, so that the rank's SIGKILL of itself lands (the init of a namespace ignores signals it sent)
UNSHARED = ("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", '"$@"; exit $?', "sh")


def unshare_refused() -> str | None:
    """Why :data:`UNSHARED` cannot run here (no ``unshare``, or not permitted), or None."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return "no unshare (util-linux) on this machine"
    done = subprocess.run([*UNSHARED, "true"], capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else f"unshare --pid is not permitted here: {done.stderr.strip()[:300]}"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("where", ["this host", "another pid namespace"])
def test_a_peer_that_waits_only_after_a_wrong_rank_was_killed_stops_at_once_naming_it(tmp_path, where):
    """As the test above, but rank 1 SIGKILLs itself after its calls: no exit hook marks its note. The note names
    the process that posted it (host, pid, start time). On ``this host`` rank 0 reads that process gone from
    ``/proc`` and raises GroupTimeoutError at once (under a quarter of its 60 s deadline). In ``another pid
    namespace`` (rank 1 under ``unshare --pid``, as a rank of another host would be) rank 0 cannot read it there:
    rank 1's note said that it beats (a thread of its process advances a key of its own in the job's store every
    second while its note stands), and rank 0 reads it gone once that beat has not moved for
    TRITON_DIST_AUTOTUNE_LOST_S (6 s here) by its own clock, within a third of its 90 s deadline. Either way the
    error names rank 1 as gone and quotes its note's error. Before: rank 0 waited its whole deadline."""
    if where == "this host":
        case, deadline, how, wrap, extra = "wrong_group_withdrawn_then_killed", 60, "is gone: it was killed", None, {}
    else:
        refused = unshare_refused()
        if refused:
            pytest.skip(refused)
        case, deadline, how, wrap = "wrong_group_withdrawn_then_killed_elsewhere", 90, "no sign of life", {1: UNSHARED}
        extra = {"TRITON_DIST_AUTOTUNE_LOST_S": "6"}
    results = run_ranks(CASES, 4, [case], env=tuner_env(tmp_path, timeout=deadline, **extra), timeout=200, wrap=wrap)
    assert results[1].returncode in (128 + signal.SIGKILL, -signal.SIGKILL), describe(results)
    assert all(results[r].returncode == 0 for r in (0, 2, 3)), describe(results)
    wrong, again = results[1].results
    assert wrong["error"] == "BadInputError" and again["error"] is None, describe(results)
    waited = results[0].result
    assert waited["error"] == "GroupTimeoutError", waited
    assert "global rank 1, which has ended" in waited["message"], waited
    assert how in waited["message"], waited
    assert wrong["message"][:200] in waited["message"], waited
    assert waited["seconds"] < deadline / (4 if where == "this host" else 3), waited


@pytest.mark.timeout(150)
def test_a_live_wrong_rank_in_another_pid_namespace_is_not_read_gone_by_its_beat(tmp_path):
    """As test_a_peer_that_waits_only_after_a_wrong_ranks_note_is_withdrawn_times_out_naming_its_error, with rank 1
    in a pid namespace of its own and LOST_S 5 s (a quarter of the deadline): rank 1 lives on (in the scenario's
    closing barrier: torch's collectives release the GIL, so its beat goes on), and rank 0 waits its deadline (20 s)
    as before and names the withdrawn note; it never reads rank 1 as gone."""
    refused = unshare_refused()
    if refused:
        pytest.skip(refused)
    wrong, waited = wrong_then_at_once_another(tmp_path, "wrong_group_withdrawn_before_a_peer_waits", 20,
                                               wrap={1: UNSHARED}, TRITON_DIST_AUTOTUNE_LOST_S="5")
    assert waited["error"] == "GroupTimeoutError", waited
    assert "has ended" not in waited["message"] and "global rank 1 raised BadInputError" in waited["message"], waited
    assert waited["seconds"] >= 20, waited


@pytest.mark.timeout(120)
def test_a_notes_beat_advances_while_on_and_a_waiting_rank_reads_it_lost_by_its_own_clock_only(monkeypatch):
    """group/beat.py: this process's beat adds to its counter every second while on (one at once, on the caller's
    store), not once stopped, nor once its store's host is gone; a waiting rank reads a note's process
    gone only once the counter has not moved for LOST_S by its own clock (at least three of the note's beats),
    never for a note that does not say it beats, a counter that moved, or a note posted again (another root or
    time); ``beat_s`` is read only as a positive number."""
    import time
    import types

    from triton_dist_tune.group import beat as beats
    from triton_dist_tune.group.note import Note, parse_beat

    assert [parse_beat(line) for line in ('{"beat_s": 1.0}', '{"beat_s": 2}', '{"beat_s": 0}', '{"beat_s": "1"}',
                                          '{"beat_s": true}', '[1]', 'not json', '{}')] == [1.0, 2.0] + [None] * 6
    server, host = store_in_a_process_of_its_own()
    beat = beats.Beat()
    try:
        assert beat.start(host, "beat/1") and int(host.add("beat/1", 0)) == 1
        assert within(20, lambda: int(host.add("beat/1", 0)) >= 3)  # the thread's beats, one a second
        beat.stop()
        time.sleep(2 * beats.BEAT_S + 0.5)  # (a beat under way when stopped lands)
        stopped = int(host.add("beat/1", 0))
        time.sleep(2 * beats.BEAT_S + 0.5)
        assert int(host.add("beat/1", 0)) == stopped
        gone_server, gone = store_in_a_process_of_its_own()
        assert beat.start(gone, "beat/1") and beat._on is not None
        gone_server.kill()  # the store's host ends: the beat's connection is lost, its one new connection fails
        gone_server.wait()  # too, and it stops (two failures, not one a second)
        assert within(30, lambda: beat._on is None)

        clock = [100.0]
        monkeypatch.setattr(beats, "time", types.SimpleNamespace(monotonic=lambda: clock[0], sleep=time.sleep))
        silence, note = beats.Silence(), Note("1.1", ("f",), "its error", 5.0, beat_s=1.0)
        assert silence.lost(host, "beat/1", 1, note._replace(beat_s=None), 6.0) is None  # no beat said: no rule
        assert silence.lost(host, "beat/1", 1, note, 6.0) is None  # first read: the clock starts
        clock[0] += 5.9
        assert silence.lost(host, "beat/1", 1, note, 6.0) is None
        clock[0] += 0.2
        assert silence.lost(host, "beat/1", 1, note, 6.0) == pytest.approx(6.1)
        host.add("beat/1", 1)  # a sign of life: the clock starts again
        assert silence.lost(host, "beat/1", 1, note, 6.0) is None
        clock[0] += 7
        assert silence.lost(host, "beat/1", 1, note._replace(posted=6.0), 6.0) is None  # a new note: starts again
        clock[0] += 2
        assert silence.lost(host, "beat/1", 1, note._replace(posted=6.0), 1.0) is None  # at least three beats
        clock[0] += 1
        assert silence.lost(host, "beat/1", 1, note._replace(posted=6.0), 1.0) == pytest.approx(3)
    finally:
        beat.stop()
        server.kill()
        server.wait()


def store_in_a_process_of_its_own():
    """A TCPStore whose server runs in a process of its own (killed to make its host gone), and a client of it with
    a 3 s timeout: (the server's process, the client)."""
    import datetime
    import subprocess
    import sys

    import torch.distributed as dist

    server = subprocess.Popen([sys.executable, "-c", "import time, torch.distributed as d; "
                               "s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False); "
                               "print(s.port, flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    return server, dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=3))


def within(seconds: float, done) -> bool:
    """Whether ``done()`` holds within ``seconds``, polled (a loaded machine may run a beat thread late)."""
    import time

    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)
    return done()


def sockets() -> set[int]:
    """This process's file descriptors that are sockets."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                found.add(int(fd))
        except OSError:  # (closed meanwhile)
            pass
    return found


@pytest.mark.timeout(120)
def test_a_beat_whose_connection_is_reset_while_the_store_lives_goes_on():
    """group/beat.py: the beat's own connection to the store reset (shut down under it; the store's server lives):
    it connects again at its next beat, and its counter goes on moving (before: it stopped until the next note, and
    a peer on another host would have read the live process gone after LOST_S)."""
    import socket
    import time

    from triton_dist_tune.group import beat as beats

    server, host = store_in_a_process_of_its_own()
    beat = beats.Beat()
    try:
        before = sockets()
        assert beat.start(host, "beat/1")
        assert within(20, lambda: int(host.add("beat/1", 0)) >= 3)
        theirs = sockets() - before  # the beat's clone of the store (its thread's, at its first beat): one connection
        assert len(theirs) == 1
        for fd in theirs:
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        reset = int(host.add("beat/1", 0))
        assert within(20, lambda: int(host.add("beat/1", 0)) >= reset + 3), "the beat stopped at the reset"
        assert beat._on is not None
        time.sleep(0.1)
    finally:
        beat.stop()
        server.kill()
        server.wait()


@pytest.mark.timeout(60)
def test_the_ended_mark_is_the_notes_own_and_a_store_gone_at_exit_holds_no_exit():
    """Notes.end (the exit hook) rewrites this process's note with an ``ended`` time, its other fields kept; with
    the store's host gone it returns (no error, no wait for the store's timeout); after a fork, the child marks
    nothing (its parent's note)."""
    import atexit
    import datetime
    import gc
    import time

    import torch.distributed as dist

    from triton_dist_tune.group.note import parse_about, parse_marks
    from triton_dist_tune.group.unresolved import ENDED_WAIT_S, Notes

    host = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
    notes = Notes()
    notes._said = ("1.1", {"about": ["f"], "posted": 1.0, "withdrawn": 2.0, "to": [["4", [1, 3]]]}, "its error")
    notes._end_with(host, "note/1")
    atexit.unregister(notes.end)  # (this test's process: its end is this test's)
    assert within(10, lambda: notes._end[0].now()[1])  # its own client, made on a helper thread
    notes._end = (notes._end[0], notes._end[1], -1)  # as in a forked child: another process's note
    notes.end()
    assert not host.check(["note/1"])
    notes._end = (notes._end[0], notes._end[1], os.getpid())
    notes.end()
    root, about, text = host.get("note/1").decode().split("\n", 2)
    assert (root, text, parse_about(about)) == ("1.1", "its error", (("f",), 1.0, None))
    withdrawn, to, ended = parse_marks(about)
    assert (withdrawn, to) == (2.0, (("4", (1, 3)),)) and ended is not None and ended > 2.0
    del host, root
    gc.collect()  # the host's server ends; the note's clone of the store is left
    started = time.monotonic()
    notes.end()
    assert time.monotonic() - started < 10 * ENDED_WAIT_S


@pytest.mark.timeout(60)
def test_a_notes_process_reads_gone_only_on_its_own_host_once_it_has_ended():
    """A note's process (group/note.py): this process is not gone; a child is gone once killed (a zombie, then
    reaped: no such pid), and a pid that started at another time is another process; a process of another host or
    pid namespace is never read as gone (it cannot be told)."""
    import subprocess
    import sys
    import time

    from triton_dist_tune.group.note import process_gone, this_process

    me = this_process()
    assert me is not None and not process_gone(tuple(me))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        host, pid, start = this_process()[0], child.pid, None
        with open(f"/proc/{pid}/stat") as stat:
            start = int(stat.read().rpartition(")")[2].split()[19])
        assert not process_gone((host, pid, start))
        assert process_gone((host, pid, start + 1))  # the pid used again by another process
        assert not process_gone(("another-boot:1", pid, start + 1))
        child.kill()
        while open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[0] not in "ZX":
            time.sleep(0.01)  # (the kill lands within milliseconds)
        assert process_gone((host, pid, start))  # a zombie: ended, not reaped yet
    finally:
        child.kill()
        child.wait()
    assert process_gone((host, pid, start))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("callable_", ["prune_fn", "ref_prog"])
def test_a_prune_fn_or_ref_prog_that_raises_on_one_rank_of_a_layout_is_an_error_on_every_rank_at_once(env, callable_):
    # was: ranks 0 and 1 (its TP group) BadInputError at once; ranks 2 and 3 (the other replica) waited T (40 s): for
    # prune_fn at 'prune (across replicas)' for partners that had left; for ref_prog, having passed the preparation
    # of their own group, they measured their share and then waited for a replica that never came
    said = {"prune_fn": "prune_fn raised ValueError: no pruning on rank 1",
            "ref_prog": "ref_prog raised ValueError: no reference on rank 1"}[callable_]
    every_rank_at_once(four_ranks(f"{callable_}_raises_on_one_rank", env), "BadInputError", said)
