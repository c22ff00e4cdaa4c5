"""Multi-rank tests of ``autotune`` with real processes (gloo over TCP, one process per rank)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from harness import HERE, describe, parse_results, run_cases, run_mpiexec, run_process, run_ranks, tuner_env

CASES = HERE / "scenarios" / "tune_cases.py"


@pytest.fixture
def env(tmp_path):
    return tuner_env(tmp_path, 20)


def run(case, n, env, **kw):
    results = run_ranks(CASES, n, [case], env=env, timeout=kw.pop("timeout", 90), **kw)
    assert all(r.returncode == 0 for r in results), describe(results)
    return results


#: failures and bad input on 2 ranks: these scenarios run one after another in one job (each tunes a function of its
#: own name; each error is raised and caught on every rank, and the group goes on to the next scenario)
FAILURE_CASES = ["fail_one_rank", "fail_mid_warmup", "all_fail", "key_mismatch", "bad_input"]


@pytest.fixture(scope="module")
def failures(tmp_path_factory):
    """case -> each rank's results; the job runs once per module (once per pytest-xdist worker that runs these)."""
    return run_cases(CASES, 2, FAILURE_CASES, env=tuner_env(tmp_path_factory.mktemp("failures"), 20), timeout=90)


#: a rank log's line for a raced config: the group's time and this rank's own, each said with what it is
#: (guarding.final_text; before: "config 0 measured: own 5.0000 ms, group 320.0000 ms +-0.0% over 3 sample(s)",
#: which read as a contradiction wherever the group's time was the less)
RACED = (r"\] config {index} (?:measured|stopped): group time (?P<group>[0-9.]+) ms \+-[0-9.]+% over \d+ sample\(s\) "
         r"\(each sample the slowest rank's time in its round; the group time is (?:their median|drift-free: [^)]*|"
         r"the least of them, the race's samples being noisy)\); this rank's own time (?P<own>[0-9.]+) ms "
         r"\(the median of its own samples\): \{{variant: {index}\}}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 4])
def test_ranks_agree_where_each_alone_would_differ(env, n, tmp_path):
    results = run("agree", n, env)
    for r in results:
        chosen = [x["chosen"] for x in r.results if "chosen" in x]
        assert chosen == [2, 2], describe(results)  # alone: rank 0 picks 0, rank 1 picks 1
        assert r.results[0]["out"] == [3.0 * n] * 4
    job = tmp_path / "logs"  # the log folder: rank-{i}.log (and .jsonl) of every rank
    logs = sorted(p.name for p in job.glob("*.log"))
    assert logs == [f"rank-{i}.log" for i in range(n)]
    text = (job / "rank-1.log").read_text()
    assert "decision: config 2" in text and "group" in text
    # each rank's log says what its two times are: the group's (each round's sample the slowest rank's: config 0
    # takes 5 ms on the even ranks, 320 on the odd ones; config 1 the other way round, 80 against 5) and its own.
    # Timed on the virtual clock: exact
    for rank in range(n):
        text = (job / f"rank-{rank}.log").read_text()
        for index, own in ((0, 5.0 if rank % 2 == 0 else 320.0), (1, 80.0 if rank % 2 == 0 else 5.0)):
            found = re.search(RACED.format(index=index), text)
            assert found is not None, text[-3000:]
            assert (float(found["group"]), float(found["own"])) == ((320.0, 80.0)[index], own), found[0]


@pytest.mark.timeout(120)
def test_cache_is_reused_by_a_new_job_and_always_tune_forces_tuning(env):
    first = run("cache_reuse", 2, env)
    for r in first:  # a warm-up run, then 2 race rounds of each config (a sample: a lead-in call and batch=1),
        calls = r.result["calls"]  # then the final call with config 2
        assert calls[:3] == [0, 1, 2] and sorted(calls[3:15]) == [0] * 4 + [1] * 4 + [2] * 4, calls
        assert calls[15:] == [2], calls
    assert first[0].result["calls"] == first[1].result["calls"]  # every rank runs identical rounds
    second = run("cache_reuse", 2, env)
    assert [r.result["calls"] for r in second] == [[2], [2]]  # only the final call: no measurement at all
    forced = run("cache_reuse", 2, {**env, "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1"})
    assert [len(r.result["calls"]) for r in forced] == [16, 16]


@pytest.mark.timeout(120)
def test_cache_file_is_standard_json_and_corrupt_files_retune(env, tmp_path):
    run("cache_reuse", 2, env)
    files = list((tmp_path / "cache" / "reuse").glob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text(), parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    assert data["index"] == 2 and data["group_size"] == 2 and len(data["measurements"]) == 3
    for damage in ("{not json", "", json.dumps({"format": 1, "index": 99})):
        files[0].write_text(damage)
        again = run("cache_reuse", 2, env)
        assert [r.result["chosen"] for r in again] == [2, 2]
        assert len(again[0].result["calls"]) == 16  # tuned again
        assert "tuning again" in again[0].stderr


@pytest.mark.timeout(120)
def test_ranks_with_different_cache_folders_follow_rank_0(env, tmp_path):
    folders = {r: {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / f"home{r}")} for r in range(2)}
    run("cache_dirs", 2, env, per_rank_env=folders)
    # a decision only in rank 1's folder must not be used: rank 0 reads none, so both tune again, together
    shutil.rmtree(tmp_path / "home0")
    results = run("cache_dirs", 2, env, per_rank_env=folders)
    assert [r.result["chosen"] for r in results] == [2, 2]
    assert (tmp_path / "home0" / "dirs").is_dir()


@pytest.mark.timeout(120)
def test_a_decisions_seconds_are_each_ranks_own_and_every_record_holds_one_ranks(env, tmp_path):
    """``Decision.seconds`` is each rank's own wall time of the tuning (records.py): the ranks' decisions agree in
    everything else. No two records of one tuning differ: a call's decision is written by group rank 0 alone (its
    seconds), and a campaign's record is written by the rank that tuned it and copied, as it is, to the disks that
    lack it (each rank here is a node of its own: its own folder, local rank 0)."""
    nodes = {r: {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / f"node{r}"), "LOCAL_RANK": "0"} for r in range(2)}
    results = run("seconds_per_rank", 2, env, per_rank_env=nodes)
    mine, other = (r.result for r in results)
    assert mine["decisions"].keys() == other["decisions"].keys() == {"(5,)", "(6,)", "(7,)"}
    for key, decision in mine["decisions"].items():
        assert decision["agreed"] == other["decisions"][key]["agreed"], key
        assert decision["seconds"] > 0 and other["decisions"][key]["seconds"] > 0
    # the call's key: only group rank 0 writes it, with its own seconds
    assert "(5,)" not in other["records"], other["records"]
    assert mine["records"]["(5,)"]["tuning_seconds"] == mine["decisions"]["(5,)"]["seconds"]
    # the campaign's keys: on both disks, the same record
    for key in ("(6,)", "(7,)"):
        assert mine["records"][key] == other["records"][key], key
        assert mine["records"][key]["tuning_seconds"] == mine["decisions"][key]["seconds"], key


@pytest.mark.timeout(120)
def test_subgroups_tune_independently(env):
    results = run("subgroups", 4, env)
    for r in results:
        assert r.result["chosen"] == [2]
        assert r.result["out"] == [6.0, 6.0]  # all_reduce over a group of 2, variant 2 multiplies by 3


@pytest.mark.timeout(120)
def test_config_failing_on_one_rank_is_left_out_everywhere(failures):
    results = failures["fail_one_rank"]
    assert [r.result["chosen"] for r in results] == [1, 1]
    for r in results:  # config 0 (320 ms on rank 1) may leave the race early against config 1 (80 ms)
        assert r.result["states"] in (["measured", "measured", "failed"], ["stopped", "measured", "failed"])
        assert "rank 1: RuntimeError: out of resources" in r.result["errors"][2]


@pytest.mark.timeout(120)
def test_failure_mid_warmup_stops_every_rank_at_the_same_run(failures):
    # a rank left alone in the third run's all_reduce would be ended by its watchdog (exit 86), and the next
    # scenarios of the job would not run: run_cases checks rc 0
    results = failures["fail_mid_warmup"]
    for r in results:
        assert r.result["chosen"] == 1 and r.result["states"][1:] == ["measured", "failed"]
        assert r.result["calls"] == 2  # both ranks stopped after the second warmup run of config 2


@pytest.mark.timeout(120)
def test_every_config_failing_raises_the_same_error_everywhere(failures):
    results = failures["all_fail"]
    messages = {r.result["message"] for r in results}
    assert len(messages) == 1 and "config 1 ({variant: 1}): rank 1: ValueError" in messages.pop()


@pytest.mark.timeout(120)
def test_key_mismatch_raises_on_every_rank(failures):
    results = failures["key_mismatch"]
    for r in results:
        assert r.result["error"] == "MismatchError"
        assert "ranks [0]: (2,); ranks [1]: (3,)" in r.result["message"]


@pytest.mark.timeout(120)
def test_bad_input_raises_clear_errors_on_every_rank(failures):
    results = failures["bad_input"]
    for r in results:
        assert r.result == {"key_fn_raises": "BadInputError", "unhashable_key": "BadInputError",
                            "prune_all_on_some_rank": None, "prune_removes_all": "BadInputError",
                            "clash": "BadInputError", "empty_space": "BadInputError",
                            "not_a_list": "BadInputError"}


@pytest.mark.timeout(60)
def test_single_process_without_torch_distributed(env):
    proc = run_process(CASES, ["single"], env, timeout=50)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert result == {"chosen": 0, "out": [1.0, 1.0]}  # alone, rank 0's sleep times make config 0 fastest
    assert "best config selected: {variant: 0}" in proc.stderr and "->" in proc.stderr  # verbose summary table


@pytest.mark.timeout(120)
def test_mpi4py_communicator(env):
    proc = run_mpiexec(CASES, 2, ["mpi_agree"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = parse_results(proc.stdout)
    assert len(results) == 2
    assert all(r["chosen"] == 2 and r["out"] == 4 for r in results), results
    # lock-step: both ranks made the same calls (16 on an idle machine; under load the race may sample more or less)
    assert results[0]["calls"] == results[1]["calls"], results


@pytest.mark.timeout(120)
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="lists threads through /proc")
def test_no_thread_of_the_tuner_outlives_the_interpreter(env):
    """A thread alive at interpreter finalization can abort the process after its work is done ("terminate called
    without an active exception"): the watchdog's thread is ended by an exit hook."""
    results = run("clean_exit", 2, env)
    for r in results:
        assert r.result["python_threads"] == ["MainThread"], describe(results)
        # OS threads of torch's own (gloo, timers) may still be ending at this instant: not counted, so that the
        # test cannot flake; the Python threads (the watchdog's among them) are what the exit hook must end
        assert "terminate called" not in r.stderr and r.returncode == 0, describe(results)
