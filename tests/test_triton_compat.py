"""What Triton and Triton-distributed users expect, kept (issue 19): a key every rank meets in one call is tuned in
that call (Triton's ``test_semantics_same_key_tuned_once_new_key_tuned_again`` inside ``contextual_autotune``),
Triton's ``prune_configs_by`` in full, and ``autotune_allow_arg_overwrite`` with a ``prune_fn``. Real gloo
ranks, Triton's interpreter; the scenarios are in tests/scenarios/triton_compat_cases.py."""

from __future__ import annotations

import json

import pytest
from harness import HERE, base_env, describe, run_python, run_ranks, tuner_env

from triton_dist_tune.disk import logs

CASES = HERE / "scenarios" / "triton_compat_cases.py"
TIMEOUT_S = 30
GRACE_S = 4


def run(case, n, tmp_path, **extra):
    env = tuner_env(tmp_path, TIMEOUT_S, TRITON_DIST_AUTOTUNE_NEW_KEY_GRACE=str(GRACE_S), **extra)
    results = run_ranks(CASES, n, [case], env=env, timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    return results


@pytest.mark.triton_dependent
@pytest.mark.timeout(180)
def test_a_key_every_rank_meets_is_tuned_in_that_call_and_a_key_some_meet_makes_nobody_wait(tmp_path):
    results = run("new_keys", 2, tmp_path)
    choices = [r.result["default_choice"] for r in results]
    assert choices[0] == choices[1] and set(choices[0]) == {"256", "512", "128"}, describe(results)
    for r in results:
        res = r.result
        calls = {c["call"]: c for c in res["default"]}
        assert all(c["ok"] for c in calls.values()), res  # right results in every call
        # Triton's semantics: the same key tuned once (call 1), a new key tuned again, in the call that meets it
        best = res["default_choice"]
        assert calls[1]["launched"]["256"] == [0, 1, 2] and calls[2]["launched"]["256"] == [best["256"]]
        assert calls[2]["runs"] == 1 and calls[2]["count"]["256"] == 1  # decided: one run, one launch
        assert calls[3]["launched"]["512"] == [0, 1, 2] and calls[3]["runs"] > 1, calls[3]
        # a key only rank 1 meets (call 4): one run, the first kept config, no wait for a timeout on either rank
        assert calls[4]["runs"] == 1 and calls[4]["seconds"] < TIMEOUT_S / 2
        if r.rank == 1:
            assert calls[4]["launched"]["128"] == [0]
        # call 5: both ranks meet it: tuned in call 5 (not at the sync point 64 calls on)
        assert calls[5]["launched"]["128"] == [0, 1, 2] and calls[5]["runs"] > 1, calls[5]
        assert res["agreed"] == []  # no sync-point agreement was needed
        # another group of the same ranks: the same in its call 2
        other = {c["call"]: c for c in res["other"]}
        assert other[2]["launched"]["1024"] == [0, 1, 2] and other[2]["ok"], other
        assert set(res["other_choice"]) == {"256", "1024"}
        assert res["titles"] == ["default", "ranks [0, 1]"]  # as users know them, in errors too (not '0')


@pytest.mark.triton_dependent
@pytest.mark.timeout(150)
def test_prune_configs_by_perf_model_top_k_and_early_prune_agreed_over_ranks(tmp_path):
    results = run("prune_top_k", 2, tmp_path)
    for r in results:
        res = r.result
        assert all(v["ok"] for v in res.values() if isinstance(v, dict)), describe(results)
        assert res["top2"]["launched"] == [0, 2]  # exactly the perf model's top 2 (BLOCK 64, then 16)
        assert res["half"]["launched"] == [0, 2]  # top_k=0.5 of 4 configs
        # rank 1's early prune drops BLOCK=16: the group tunes the top 2 of the configs every rank keeps (64 and
        # 128; rank 0's first launch, before the group agreed, is its own first kept config)
        assert res["early"]["tuned"] == [[2, 3]] and res["early"]["chosen"][0] in (2, 3), res["early"]
        assert set(res["early"]["launched"]) - {0} == {2, 3}
        assert res["tiny"]["launched"] == [2] and res["tiny"]["chosen"] == [2]  # 0.1 of 4: at least one kept


@pytest.mark.triton_dependent
@pytest.mark.timeout(120)
def test_allow_arg_overwrite_with_a_prune_fn_tunes_the_config_and_the_callers_keyword_wins(tmp_path):
    results = run("overwrite_prune_fn", 2, tmp_path)
    for r in results:
        res = r.result
        assert res["error"] is None, describe(results)
        assert res["seen"] == [16, 32, 64]  # prune_fn saw each config under test, not the caller's
        assert res["tuned"] == [16, 32]  # BLOCK 64 pruned; the others measured
        assert res["final"] == 128 and res["ok"]  # the caller's keyword wins for the final call
    assert "overrides the tuned config's value" in results[0].stderr


@pytest.mark.timeout(120)
def test_rank_logs_go_to_autotune_logs_in_the_working_directory_one_header_per_job(tmp_path):
    cwd = tmp_path / "job"
    cwd.mkdir()
    env = {**tuner_env(tmp_path, TIMEOUT_S), "TRITON_DIST_AUTOTUNE_LOG_DIR": "", "JOB_CWD": str(cwd)}
    for _ in range(2):  # two jobs in one working directory
        results = run_ranks(CASES, 2, ["small_job"], env=env, timeout=100)
        assert all(r.returncode == 0 and r.result["ok"] for r in results), describe(results)
    folder = cwd / ".autotune_logs"
    assert sorted(p.name for p in folder.iterdir()) == ["rank-0.jsonl", "rank-0.log", "rank-1.jsonl", "rank-1.log"]
    for rank in (0, 1):
        lines = (folder / f"rank-{rank}.log").read_text().splitlines()
        headers = [i for i, line in enumerate(lines) if line.startswith("==== triton-dist-tune job ")]
        assert headers[0] == 0 and len(headers) == 2, lines  # the second job starts with its own header
        assert f" rank {rank} " in lines[headers[1]] and lines[headers[0]].split()[3] != lines[headers[1]].split()[3]
        assert any("decision: config" in line for line in lines[:headers[1]]) and len(lines) > headers[1] + 1
        records = [json.loads(line) for line in (folder / f"rank-{rank}.jsonl").read_text().splitlines()]
        assert [r["job"] for r in records if r.get("header")] == [lines[h].split()[3] for h in headers]
    assert not (tmp_path / "logs").exists()
    cli_env = base_env({"TRITON_DIST_AUTOTUNE_LOG_DIR": ""})
    listed = run_python(["-m", "triton_dist_tune", "logs", "--list"], cli_env, cwd, timeout=60)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 2, listed.stderr
    moved = run_python(["-m", "triton_dist_tune", "logs", "--list"],
                       base_env({"TRITON_DIST_AUTOTUNE_LOG_DIR": str(folder)}), tmp_path, timeout=60)
    assert moved.stdout == listed.stdout  # the override names the same folder from elsewhere


@pytest.mark.timeout(150)
def test_two_tp_groups_choosing_differently_for_one_cache_entry_are_warned_of(tmp_path):
    results = run("tp_groups_differ", 4, tmp_path)
    assert [r.result["chosen"] for r in results] == [[0], [0], [1], [1]], describe(results)
    warned = [r.rank for r in results if "group 'ranks [2, 3]' chose config 1" in r.stderr]
    assert warned == [2] and "autotune_replicas" in results[2].stderr, describe(results)
    assert "group 'ranks [0, 1]' of this job chose config 0" in results[2].stderr


def test_log_files_keep_the_last_jobs_only(tmp_path):
    path = tmp_path / "rank-0.log"
    path.write_text("".join(f"==== triton-dist-tune job old{i} rank 0 host h pid 1 started now ====\nline {i}\n"
                            for i in range(8)))
    logs.keep_last_jobs(path, logs.KEEP_JOBS - 1)
    text = path.read_text()
    assert [f"old{i} " in text for i in range(8)] == [False] * 4 + [True] * 4  # with this job's: 5 kept
    jsonl = tmp_path / "rank-0.jsonl"
    jsonl.write_text("".join(json.dumps({"time": i, "job": f"j{i}", "message": "m", "header": True}) + "\n"
                             + json.dumps({"time": i, "job": f"j{i}", "message": f"record {i}"}) + "\n"
                             for i in range(6)))
    logs.keep_last_jobs(jsonl, 2)
    assert [json.loads(line)["job"] for line in jsonl.read_text().splitlines()] == ["j4", "j4", "j5", "j5"]
