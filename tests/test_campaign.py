"""Tuning campaigns (issue 21) with real gloo ranks: keys spread over ranks and replicas, every decision on every
rank, a campaign killed with SIGKILL and rerun, and the undecided-key policy (``nearest``, ``first``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from harness import HERE, describe, run_ranks, tuner_env

from triton_dist_tune.errors import BadInputError
from triton_dist_tune.function.policy import numeric_distance
from triton_dist_tune.settings import Settings

SCRIPT = HERE / "scenarios" / "campaign_cases.py"
SIZES = [8 * (i + 1) for i in range(8)]


def best(size: int) -> int:
    return (size // 8) % 3


def calls_by_key(folder: Path, rank: int) -> Counter:
    path = folder / f"rank{rank}"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(int(line.split()[0]) for line in lines)


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "calls").mkdir(exist_ok=True)
    return tuner_env(tmp_path, timeout=20, CALLS_DIR=str(tmp_path / "calls"), **extra)


@pytest.mark.timeout(150)
def test_local_campaign_spreads_keys_and_nearest_serves_without_tuning(tmp_path):
    """4 ranks, a rank-local function, 8 keys: each rank tunes 2 keys (round-robin), every key is tuned exactly
    once in the job, every rank ends with all 8 (right) decisions and the cache holds 8 files. Then ``nearest``
    serves keys never tuned with no tuning call and no exchange, the same config on every rank; ``first`` too."""
    env = env_for(tmp_path)
    results = run_ranks(SCRIPT, 4, ["local"], env=env, timeout=140)
    assert all(r.returncode == 0 for r in results), describe(results)
    tuned_by: dict[int, int] = {}
    for rank in range(4):
        for size in calls_by_key(tmp_path / "calls", rank):
            if size in SIZES:
                assert size not in tuned_by, f"key {size} tuned on ranks {tuned_by[size]} and {rank}"
                tuned_by[size] = rank
    assert tuned_by == {size: i % 4 for i, size in enumerate(SIZES)}
    expected = {str(size): best(size) for size in SIZES}
    for r in results:
        out = r.result
        assert out["decided"] == expected, out
        assert [row["key"] for row in out["summary"]["keys"]] == [str(s) for s in SIZES]
        assert {row["state"] for row in out["summary"]["keys"]} == {"tuned"}
        assert all(row["margin"] is not None and row["margin"] > 0 for row in out["summary"]["keys"])
        assert out["exchanges"] == 0, "nearest/first exchanged on the control channel"
        assert sorted(out["policy_calls"]) == sorted([f"12 {best(16)}", f"61 {best(64)}"]), out["policy_calls"]
        assert out["nearest"] == [best(16), best(64), 0]
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 8
    assert "8 keys on 4 unit(s)" in results[0].stderr and "[campaign local] 8/8 keys" in results[0].stderr


@pytest.mark.timeout(150)
def test_replica_campaign_splits_keys_between_replicas(tmp_path):
    """4 ranks as 2 replicas of a 2-rank group, a collective function, 4 keys: replica 0 tunes keys 0 and 2,
    replica 1 keys 1 and 3 (both ranks of a replica in lock-step), and every rank holds the same 4 decisions."""
    env = env_for(tmp_path)
    results = run_ranks(SCRIPT, 4, ["replicas"], env=env, timeout=140)
    assert all(r.returncode == 0 for r in results), describe(results)
    for rank in range(4):
        keys = set(calls_by_key(tmp_path / "calls", rank))
        assert keys == ({8, 24} if rank < 2 else {8, 16, 32}), (rank, keys)  # 8: every rank's last call too
        assert calls_by_key(tmp_path / "calls", rank)[8] == calls_by_key(tmp_path / "calls", rank ^ 1)[8]
    expected = {str(size): best(size) for size in SIZES[:4]}
    assert all(r.result["decided"] == expected for r in results), describe(results)
    assert all(r.result["out"] == 2 * (best(8) + 1) for r in results)


@pytest.mark.timeout(200)
def test_campaign_killed_then_rerun_tunes_only_the_keys_left(tmp_path):
    """Every rank SIGKILLs itself as it builds the call of its second key (every rank builds the 8 calls once to
    compute the keys, then one per key it tunes: the 10th build), after the first round's 4 keys were decided and
    cached; the rerun tunes only the 4 keys left, and every rank ends with all 8 decisions. (A rank killed *while
    a config runs* is the recovery layer's case: that config is then left out as crashed, see test_faults.)"""
    env = env_for(tmp_path, KILL_AT_BUILD="10")
    killed = run_ranks(SCRIPT, 4, ["local"], env=env, timeout=140)
    assert any(r.returncode == -9 for r in killed), describe(killed)  # the others may lose rank 0 first
    first = {size for rank in range(4) for size in calls_by_key(tmp_path / "calls", rank)}
    assert first == set(SIZES[:4])
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 4
    for rank in range(4):
        (tmp_path / "calls" / f"rank{rank}").unlink(missing_ok=True)
    results = run_ranks(SCRIPT, 4, ["local"], env=env_for(tmp_path), timeout=140)
    assert all(r.returncode == 0 for r in results), describe(results)
    again = {size for rank in range(4) for size in calls_by_key(tmp_path / "calls", rank)} & set(SIZES)
    assert again == set(SIZES[4:])
    for r in results:
        states = {row["key"]: row["state"] for row in r.result["summary"]["keys"]}
        assert states == {str(s): "cached" if s in SIZES[:4] else "tuned" for s in SIZES}
        assert r.result["decided"] == {str(size): best(size) for size in SIZES}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("local", ["", "1"])
def test_a_build_that_gives_another_key_the_second_time_is_that_keys_error(tmp_path, local):
    """The campaign builds each call once for its key (the ranks agree on the keys), then again to tune it. A build
    whose second call for key 16 gives 17 rows tuned key 17 and learned its decision as key 16's (the summary said
    "17 tuned", the tuner's table held 16, measured on nothing of that shape). Now key 16 is a failed row naming
    both keys, on every rank, nothing is decided for it, and key 8 is tuned as usual."""
    results = run_ranks(SCRIPT, 2, ["unsteady_build"], env=env_for(tmp_path, LOCAL=local), timeout=140)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        rows = {row["key"]: row for row in r.result["summary"]["keys"]}
        assert sorted(rows) == ["16", "8"], rows
        assert rows["8"]["state"] == "tuned", rows
        assert rows["16"]["state"] == "failed", rows
        assert "gave the key 17, not 16" in rows["16"]["error"], rows
        if local:  # tuned by unit 1 alone: the error names global rank 1, not rank 0 of its group of one
            assert "unsteady: rank 1: building call 1 again" in rows["16"]["error"], rows
        assert r.result["decided"] == ["8"], r.result
    assert_same_rows(results)
    tuned = {size for rank in range(2) for size in calls_by_key(tmp_path / "calls", rank)}
    assert tuned == {8}, tuned


def assert_same_rows(results) -> None:
    """Every rank returned the same rows, error texts included (a row is its unit's group rank 0's, broadcast, then
    gathered across the units)."""
    rows = [r.result["summary"]["keys"] for r in results]
    assert all(other == rows[0] for other in rows[1:]), rows


@pytest.mark.timeout(120)
def test_a_rank_local_tunings_errors_name_the_rank_that_tuned_it(tmp_path):
    """A rank-local campaign tunes each key on a group of one rank: its agreed errors (step 1, prune_fn, ref_prog)
    named that group's rank 0, so a key that global rank 1 tuned said "rank 0: prune_fn raised ..." and sent the
    user to rank 0's log. Now they name the rank in the job (as an error of every config failing did already), and
    every rank returns the same rows."""
    results = run_ranks(SCRIPT, 2, ["errors_name_their_rank"], env=env_for(tmp_path), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert_same_rows(results)
    rows = {row["key"]: row for row in results[0].result["summary"]["keys"]}
    assert [rows[k]["state"] for k in ("8", "16", "24", "32")] == ["tuned", "failed", "tuned", "failed"], rows
    assert rows["16"]["unit"] == rows["32"]["unit"] == 1, rows
    assert "named: rank 1: prune_fn raised ValueError: no pruning for 16" in rows["16"]["error"], rows
    assert "rank 1: ref_prog raised ValueError: no reference for 32" in rows["32"]["error"], rows
    assert "rank 0" not in rows["16"]["error"] + rows["32"]["error"], rows


@pytest.mark.timeout(120)
def test_a_build_that_raises_on_one_rank_is_said_alone(tmp_path):
    """Rank 1's build of key 24 raises: every rank raises the one error naming it. Before, the error went on with
    "the ranks' keys differ: ... none (the list ends before it)", the raising rank's list cut short by its own
    error, which read as a second mistake (the keys of the ranks whose builds all ran are still compared)."""
    results = run_ranks(SCRIPT, 2, ["build_raises_on_one_rank"], env=env_for(tmp_path), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        error = r.result["error"]
        assert error == ("campaign onerank: rank 1: building call 2 or its key raised ValueError: no memory for 24 "
                         "rows"), error


@pytest.mark.timeout(120)
def test_campaign_command_line(tmp_path):
    """``triton-dist-tune campaign MODULE:FUNCTION --calls MODULE:BUILDER --keys ... --local`` on 2 ranks: each
    rank tunes 2 of the 4 keys, rank 0 writes the summary with every key."""
    env = env_for(tmp_path, SUMMARY=str(tmp_path / "summary.json"))
    results = run_ranks(SCRIPT, 2, ["cli"], env=env, timeout=110)
    assert all(r.returncode == 0 and r.result["rc"] == 0 for r in results), describe(results)
    assert set(calls_by_key(tmp_path / "calls", 0)) == {8, 24}
    assert set(calls_by_key(tmp_path / "calls", 1)) == {16, 32}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(k["key"], k["index"]) for k in summary["keys"]] == [(str(s), best(s)) for s in SIZES[:4]]


def test_policy_checks_and_default_distance():
    """``undecided`` and its variable are checked; the default distance compares numeric parts only."""
    import triton_dist_tune as tdt

    with pytest.raises(BadInputError, match="undecided"):
        tdt.autotune([{"a": 1}], key_fn=lambda x: x, undecided="closest")(lambda x, *, a: x)
    with pytest.raises(BadInputError, match="UNDECIDED"):
        Settings.from_env({"TRITON_DIST_AUTOTUNE_UNDECIDED": "sometimes"})
    assert Settings.from_env({"TRITON_DIST_AUTOTUNE_UNDECIDED": " Nearest "}).undecided == "nearest"
    assert numeric_distance((64, "fp16", (3, 4)), (32, "fp16", (3, 5))) == 33
    assert numeric_distance((64, "fp16"), (64, "bf16")) is None
    assert numeric_distance((64, True), (64, 1)) is None
    assert numeric_distance((64,), (64, 1)) is None


def test_a_keys_result_and_its_outcomes_turn_into_json_without_deep_copies():
    """Every key of a campaign turned its result into plain data with ``dataclasses.asdict``, which deep-copied its
    cache record (every outcome of the key: 1,920 in the README's MoE campaign), and every outcome the same way:
    about 1.2 s of a 16-key campaign's rank on one H200 host. Now field by field: the record is the same object,
    an outcome's lists are copies, and the JSON is the same as before."""
    import math
    from dataclasses import asdict

    from triton_dist_tune.function.summary import KeyResult
    from triton_dist_tune.records import Outcome

    outcome = Outcome(3, "{a: 1}", "stopped", time=math.inf, spread=0.01, per_rank=[0.2, 0.3], samples=2,
                      order=[4, 9], round_times=[0.2, 0.25], own=math.nan)
    data = outcome.to_json()
    expected = asdict(outcome)
    expected["time"] = expected["own"] = None  # no infinity or NaN in standard JSON
    assert data == expected and json.loads(json.dumps(data)) == expected
    assert data["per_rank"] is not outcome.per_rank and data["round_times"] is not outcome.round_times
    record = {"measurements": [data] * 4}
    result = KeyResult(0, "(16,)", "tuned", 3, "{a: 1}", 0.2, 0.05, record=record)
    plain = result.to_json()
    assert plain["record"] is record  # not copied
    assert plain == asdict(result) and KeyResult.from_json(plain, [0], 4) == result


@pytest.mark.timeout(120)
def test_a_campaign_on_a_group_without_global_rank_0_prints_its_progress(tmp_path):
    """docs/campaign.md: "Rank 0 prints a progress line after each round and the summary". Before, only a process
    of global rank 0 printed, so a campaign on a group without it (a tensor-parallel group, a sub-communicator)
    printed nothing anywhere. Now the campaign's own rank 0 prints, naming the group where it is not the default."""
    results = run_ranks(SCRIPT, 2, ["campaign_without_global_rank_0"], env=env_for(tmp_path), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert "[campaign elsewhere" not in results[0].stderr, describe(results)
    said = [line for line in results[1].stderr.splitlines() if line.startswith("[campaign elsewhere on rank 1]")]
    assert any("2/2 keys" in line for line in said), results[1].stderr[-3000:]
    assert "campaign elsewhere on rank 1: 2 keys on 1 unit(s)" in results[1].stderr, results[1].stderr[-3000:]


def test_a_campaign_whose_cache_folder_cannot_be_written_says_its_decisions_were_not_saved(tmp_path, monkeypatch):
    """A campaign whose cache folder cannot be made (a file stands where it should be: as for a read-only or full
    disk, every write fails): before, its summary said "2 tuned" like any other, and only the warnings of each write
    told that nothing was kept, so a later ``export`` found nothing. Now the summary lists the keys not saved, in its
    JSON and in its text."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the cache folder's parent should be")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_LOG_DIR", str(tmp_path / "logs"))
    import triton_dist_tune as tdt

    @tdt.autotune([{"scale": 1}, {"scale": 2}], key_fn=lambda x: x, name="unsaved_campaign", n_warmup=0,
                  n_repeat=1)
    def scaled(x, *, scale):
        return x * scale

    summary = tdt.campaign(scaled, lambda size: (size,), [1, 2])
    assert [row.state for row in summary.rows] == ["tuned", "tuned"], summary.text()
    assert summary.unwritten == ["1", "2"] and summary.to_json()["unwritten"] == ["1", "2"], summary.text()
    assert "NOT SAVED: 2 decided key(s) are not in this node's cache folder" in summary.text(), summary.text()
