"""Two processes started with one rank, told apart at ``init_distributed``'s start (triton_dist_tune/group/claims.py),
and the starts that must go on as before: ranks renumbered after ``destroy_process_group`` in the same processes
(swapped, fewer), a rank started again by hand after it ended at its start. Real processes, gloo, rank 0 hosting the
store (no torchrun agent), as a launch by hand or mpiexec with ``MASTER_PORT`` set starts them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness import HERE, base_env, describe, ended_result, free_port, run_ranks, spawn, tuner_env

RESTART = Path(HERE) / "scenarios" / "restart_cases.py"
CLAIMS = Path(HERE) / "scenarios" / "claims_cases.py"
TWICE = "global rank 1 was claimed by two processes"
#: the init timeout of these tests (s): a duplicate is named within a quarter of it
INIT_S = 40
#: runs a rank in a pid namespace of its own (as in test_layout.py)
UNSHARED = ("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", '"$@"; exit $?', "sh")


def _alike(tmp_path: Path, port: int, world: int, rank: int, wrap: tuple[str, ...] = (), init_s: float = INIT_S,
           **extra: str):
    """A process of one job (``PMIX_NAMESPACE`` job-A) started with ``RANK=rank`` by hand (global rank 0 hosts the
    store on ``port``; ``init_s``: its init timeout), all-reducing 1 (restart_cases.py ``all_reduce_own_value``)."""
    env = tuner_env(tmp_path, 20, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT=str(init_s), **extra)
    return spawn(RESTART, ["all_reduce_own_value"],
                 base_env({**env, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                           "MASTER_PORT": str(port), "MASTER_ADDR": "127.0.0.1", "PMIX_NAMESPACE": "job-A",
                           "JOB_VALUE": "1"}), wrap)


def _started_alike(tmp_path: Path, port: int, world: int, ranks: list[int],
                   wraps: dict[int, tuple[str, ...]] | None = None, **extra: str) -> list:
    """Processes started with the rank numbers ``ranks`` (``wraps``: an index into ``ranks`` -> the command that runs
    that process, a fresh interpreter), each waiting for a file this touches once every one of them is ready to
    call ``init_distributed`` (its imports done): they call it together, and each times its start from there (a
    fresh interpreter is ready seconds after a fork, tens of seconds on a loaded machine: timed from the fork's
    start, the forks' starts held its imports, 2.5-3.6 s idle and 18.8 s beside 8 busy processes, past the quarter of
    the init timeout that the duplicate is named within)."""
    go = tmp_path / "go"
    ready = [tmp_path / f"ready.{i}" for i in range(len(ranks))]
    procs = [_alike(tmp_path, port, world, rank, (wraps or {}).get(i, ()), GO_FILE=str(go), READY_FILE=str(ready[i]),
                    **extra) for i, rank in enumerate(ranks)]
    for path in ready:
        _wait_for(path, procs)  # (each waits for the file 60 s at most)
    go.touch()
    return procs


def _wait_for(path: Path, procs: list, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert all(p.poll() is None for p in procs) and time.monotonic() < deadline, [p.communicate() for p in procs]
        time.sleep(0.02)


@pytest.mark.timeout(120)
def test_a_rank_started_twice_while_another_never_starts_is_named_at_once_on_every_process(tmp_path):
    """``WORLD_SIZE=3``, ``RANK=0,1,1``: the second claimant of rank 1 ends at once naming the rank, both processes
    and ``RANK=1``; rank 0, told through the store, ends the start and tells the first claimant, naming rank 2 that
    no process joined as; all within a quarter of the init timeout. Before: every process waited the init timeout
    and read "ranks [2] ... never did" (GroupTimeoutError), not that rank 1 was there twice."""
    said = [ended_result(proc, 90) for proc in _started_alike(tmp_path, free_port(), 3, [0, 1, 1])]
    assert all(r.get("error") == "AutotuneError" and TWICE in r["message"] for r in said), said
    assert all("two processes of the job were started with RANK=1" in r["message"] for r in said), said
    second = [r for r in said if "then this one, pid " in r["message"]]
    assert len(second) == 1 and second[0]["rank"] == 1, said
    told = [r for r in said if r is not second[0]]
    assert all("no process has joined as rank 2 so far" in r["message"] for r in told), said
    assert "rank 1 took part, but rank 0 ended the job's start" in next(r for r in told if r["rank"] == 1)["message"]
    assert all("\n" not in r["message"] and r["seconds"] < INIT_S / 4 for r in said), said


@pytest.mark.timeout(120)
def test_a_rank_started_twice_at_once_in_a_job_of_two_is_named_and_never_ends_in_gloo(tmp_path):
    """``WORLD_SIZE=2``, ``RANK=0,1,1`` together: the second claimant ends at once with one line naming rank 1 and
    both processes; where rank 0 reads its report before every rank took part the start ends on every process with
    that line, else rank 0 and the first claimant all-reduce (2.0), and the second, come after the start and waiting
    for a new one, is named as the job ends. Before: both took part in the naming and went into torch's
    ``init_process_group``: one failed in gloo, or waited the init timeout for "ranks [0]"."""
    # (the job, if it starts, holds its store until a process has ended, or until it is up and both processes of
    # rank 1 have begun their check of its claim: a second one that came after the start waits in it, and is named
    # as the job ends; one that came after the job ended would find no store)
    hold, up, arrived = tmp_path / "hold", tmp_path / "up", tmp_path / "arrived"
    procs = _started_alike(tmp_path, free_port(), 2, [0, 1, 1], HOLD_FILE=str(hold), UP_FILE=str(up),
                           ARRIVE_FILE=str(arrived))
    deadline = time.monotonic() + 90
    while all(p.poll() is None for p in procs) and not (up.exists() and len(list(tmp_path.glob("arrived.*"))) == 2) \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    hold.touch()
    said = [ended_result(proc, 90) for proc in procs]
    second = [r for r in said if "then this one, pid " in r.get("message", "")]
    assert len(second) == 1 and second[0]["rank"] == 1 and TWICE in second[0]["message"], said
    assert "started with RANK=1" in second[0]["message"] and second[0]["seconds"] < INIT_S / 4, said
    others = [r for r in said if r is not second[0]]
    halted = all(r.get("error") == "AutotuneError" and TWICE in r["message"] for r in others)
    assert halted or all(r.get("sum") == 2.0 for r in others), said


@pytest.mark.timeout(150)
@pytest.mark.parametrize("where", ["this pid namespace", "another pid namespace"])
def test_a_rank_started_again_while_its_job_runs_is_refused_within_its_init_timeout_and_the_job_goes_on(tmp_path,
                                                                                                         where):
    """``WORLD_SIZE=2``: ranks 0 and 1 start and all-reduce (rank 0 holds the store); then a second process started
    as rank 1 (in ``another pid namespace``: under ``unshare --pid``, the same host name), whose init timeout is 5 s,
    waits that long for a new start of the job (none comes) and ends naming rank 1 claimed twice and both processes;
    the job goes on. Before the claims: its hello was never answered and it waited the whole init timeout for
    "ranks [0]"; with claims that named a process by host name and pid, the one in another pid namespace could read
    as the first claimant's process."""
    wrap: tuple[str, ...] = ()
    if where == "another pid namespace":
        from test_layout import unshare_refused

        refused = unshare_refused()
        if refused:
            pytest.skip(refused)
        wrap = UNSHARED
    port, up, hold = free_port(), tmp_path / "up", tmp_path / "hold"
    job = _started_alike(tmp_path, port, 2, [0, 1], UP_FILE=str(up), HOLD_FILE=str(hold))
    _wait_for(up, job)
    said = ended_result(_alike(tmp_path, port, 2, 1, wrap, init_s=5), 90)
    hold.touch()
    assert [ended_result(p, 60).get("sum") for p in job] == [2.0, 2.0], said
    assert said.get("error") == "AutotuneError" and TWICE in said["message"], said
    assert "then this one, pid " in said["message"] and said["seconds"] < 20, said
    assert (said["message"].count(", pid namespace ") == 2) == (where == "another pid namespace"), said


@pytest.mark.timeout(150)
def test_a_rank_started_again_while_its_job_runs_is_named_when_the_job_ends_meanwhile(tmp_path):
    """As above, but the job ends (its store with it) 1 s after the second process began to wait for a new start
    (its init timeout 60 s): it ends at once naming rank 1 claimed twice. Before, it waited at most 3 s, and a job
    ending within them left it a raw ``DistNetworkError`` of the store it read (2 of 3 runs of the closing review's
    F7, where the duplicate was started together with a job that lasted a second)."""
    port, up, hold, arrived = free_port(), tmp_path / "up", tmp_path / "hold", tmp_path / "arrived"
    job = _started_alike(tmp_path, port, 2, [0, 1], UP_FILE=str(up), HOLD_FILE=str(hold))
    _wait_for(up, job)
    second = _alike(tmp_path, port, 2, 1, init_s=60, ARRIVE_FILE=str(arrived))
    deadline = time.monotonic() + 60  # (the second process alone says when its check begins)
    while not list(tmp_path.glob("arrived.*")):
        assert second.poll() is None and time.monotonic() < deadline, second.communicate()
        time.sleep(0.02)
    time.sleep(1)
    hold.touch()
    assert [ended_result(p, 60).get("sum") for p in job] == [2.0, 2.0]
    said = ended_result(second, 60)
    assert said.get("error") == "AutotuneError" and TWICE in said["message"], said
    assert "then this one, pid " in said["message"] and said["seconds"] < 30, said


@pytest.mark.timeout(150)
def test_a_rank_started_twice_in_another_pid_namespace_during_the_start_is_named(tmp_path):
    """``WORLD_SIZE=3``, ``RANK=0,1`` and a second ``RANK=1`` under ``unshare --pid`` (same host name, its own pid
    namespace, where its pid may equal the first's): named at once on every process, as in this namespace. The
    reverted claims named a process by host name and pid: this duplicate went undetected (the whole init timeout,
    "ranks [2]")."""
    from test_layout import unshare_refused

    refused = unshare_refused()
    if refused:
        pytest.skip(refused)
    said = [ended_result(proc, 90) for proc in _started_alike(tmp_path, free_port(), 3, [0, 1, 1], {2: UNSHARED})]
    assert all(r.get("error") == "AutotuneError" and TWICE in r["message"] for r in said), said
    assert all(r["message"].count(", pid namespace ") == 2 for r in said), said
    assert all(r["seconds"] < INIT_S / 4 for r in said), said


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("case", "zero_late"), [("swapped_after_destroy", "0"), ("shrunk_after_destroy", "0"),
                                                 ("shrunk_after_destroy", "2")])
def test_ranks_renumbered_after_destroy_in_the_same_processes_start_again(tmp_path, case, zero_late):
    """Three ranks start, all-reduce and ``destroy_process_group``; then, in the same processes (rank 0 keeps its
    store), ranks 1 and 2 swap their numbers, or rank 1 leaves (its process alive 8 s more) and rank 2 goes on as
    rank 1 of 2; every rank of the new start joins it and all-reduces its ranks' numbers. With the reverted claims
    (one per rank number for the store's life) both were refused as "claimed by two processes". ``zero_late``: rank
    0 starts again that many seconds after the others, so the new rank 1 reads the first start's size (3) in rank
    0's store: it waits for the new one; before, it was refused at once ("the job's ranks disagree on its size"),
    which a loaded run of the suite met by chance."""
    env = tuner_env(tmp_path, 20, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT=str(INIT_S), LINGER_S="8", ZERO_LATE_S=zero_late)
    results = run_ranks(CLAIMS, 3, [case], env=env, timeout=130)
    assert [r.returncode for r in results] == [0, 0, 0], describe(results)
    first = [r.results[0] for r in results]
    assert [(s["step"], s.get("rank"), s.get("sum")) for s in first] == [(1, r, 3.0) for r in range(3)], first
    again = [r.results[-1] for r in results]
    if case == "swapped_after_destroy":
        swapped = [(2, 0, 3.0), (2, 2, 3.0), (2, 1, 3.0)]
        assert [(s["step"], s.get("rank"), s.get("sum")) for s in again] == swapped, again
    else:
        assert again[1] == {"step": 2, "left": True}, again
        fewer = [(s["step"], s.get("rank"), s.get("sum")) for s in (again[0], again[2])]
        assert fewer == [(2, 0, 1.0), (2, 1, 1.0)], again
    assert all(s["seconds"] < INIT_S / 4 for s in again if "seconds" in s), again


@pytest.mark.timeout(150)
def test_a_new_process_replacing_a_rank_whose_process_lingers_joins_the_jobs_next_start(tmp_path):
    """Ranks 0 and 1 start and all-reduce; rank 1's process lingers out of the job; a new process started as rank 1
    comes at once, and rank 0 starts again 8 s after its first start: the new process joins that start (the sum of
    the ranks is 1 on both). Before, the new process, finding rank 1 held by a live process of the last start,
    waited at most min(3 s, init timeout / 4) for a new start and was refused as its second claimant, and rank 0
    waited its init timeout for "ranks [1]" (the closing review's F6): it now waits up to its init timeout."""
    env = tuner_env(tmp_path, 20, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT="20", GAP_S="8")
    results = run_ranks(CLAIMS, 3, ["replaced_while_it_lingers"], env=env, timeout=130,
                        per_rank_env={r: {"WORLD_SIZE": "2"} for r in (0, 1)} | {2: {"WORLD_SIZE": "2", "RANK": "1",
                                                                                    "ROLE": "new"}})
    assert [r.returncode for r in results] == [0, 0, 0], describe(results)
    said = [(s["step"], s.get("rank"), s.get("sum"), s.get("left")) for r in results for s in r.results]
    assert said == [(1, 0, 1.0, None), (2, 0, 1.0, None), (1, 1, 1.0, None), (2, None, None, True),
                    (2, 1, 1.0, None)], describe(results)


@pytest.mark.timeout(150)
def test_a_rank_that_ended_at_its_start_and_is_started_again_by_hand_joins_its_job(tmp_path):
    """``WORLD_SIZE=3``: rank 0 and a first rank 1 start; rank 1 claims its number in the start, then is killed
    (SIGKILL) before it confirms the start's name, while rank 0 waits for rank 2; a new rank 1 and rank 2 are
    started by hand on the same host. The new rank 1 takes over the claim of the process that ended, and the job
    all-reduces (3.0 on every rank). The first rank 1 stalls after its claim, so the kill comes between claim and
    confirmation: killed once its claim key was in the store, at a moment the test could not hold, the test failed
    1 of 5 fresh-clone CI runs (every process without a sum after 65 s; the errors were not printed). A rank killed
    after it confirmed is not covered here."""
    import signal

    port, claimed = free_port(), tmp_path / "claimed"
    first = [_alike(tmp_path, port, 3, 0), _alike(tmp_path, port, 3, 1, CLAIMED_FILE=str(claimed))]
    _wait_for(claimed, first)
    first[1].send_signal(signal.SIGKILL)
    first[1].wait(timeout=30)
    again = [_alike(tmp_path, port, 3, rank) for rank in (1, 2)]
    assert [ended_result(p, 90).get("sum") for p in (first[0], *again)] == [3.0, 3.0, 3.0]
