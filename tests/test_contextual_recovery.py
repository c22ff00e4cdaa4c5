"""Contextual resume (issue 17) with real ranks, real signals and real journals: every rank takes its resume
decisions (the configs left out, the config launched first) from the journals the whole group gathered, with the
journal's blame rules; two groups of one job never read or delete each other's journals. The scenarios are in
tests/scenarios/contextual_recovery_cases.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import HERE, describe, run_ranks, tuner_env

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
    those two were: the journal ended ``started``, and the next attempt took config 1 for a crash suspect. (The
    other rank learns of it at its next exchange, after the timeout: contextual tuning has no failure board.)"""
    env = tuner_env(tmp_path, 10, FAULT_DIR=str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    ranks = run_ranks(CASES, 2, ["cancelled"], env={**env, "ATTEMPT": "0"}, timeout=100)
    assert ranks[1].returncode == 0 and ranks[1].results == [{"rank": 1, "cancelled": True}], describe(ranks)
    cache = Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"])
    (journal,) = [p for p in cache.rglob("*.journal") if ".rank1" in p.name]
    last = records(journal)[-1]
    assert (last["state"], last["index"]) == ("interrupted", 1), last


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
