"""Triton's and Triton-distributed's semantics kept to the letter (issue 29): pruning runs before the cache is read
and the kept configs are part of a decision's identity, Triton's error text, Triton-distributed's module paths, no
silent rank-local tuning in a multi-rank job, calls inside CUDA-graph capture and under ``torch.compile``, and the
decided path's cost. Real processes, real gloo ranks, Triton's interpreter; the scenarios are in
tests/scenarios/semantics_cases.py."""

from __future__ import annotations

import json

import pytest
from harness import HERE, base_env, describe, run_process, run_python, run_ranks, tuner_env

CASES = HERE / "scenarios" / "semantics_cases.py"
TIMEOUT_S = 30


def process(cases: list[str], env: dict[str, str], timeout: float = 100) -> list[dict]:
    """Run ``cases`` one after another in one process of its own (no group); their RESULT lines."""
    proc = run_process(CASES, cases, env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]


@pytest.mark.triton_dependent
@pytest.mark.timeout(120)
def test_pruning_runs_before_the_cache_and_a_config_it_leaves_out_is_never_launched(tmp_path):
    env = tuner_env(tmp_path, TIMEOUT_S)
    # one process: a wrapper without pruning chooses BLOCK 128 (the fastest); then a wrapper of the same jit body
    # whose perf model keeps BLOCK 16 and 32 (top_k=2): it calls its perf model and never launches 128
    first, second = process(["prune_none", "prune_perf"], env)
    assert first["chosen"] == [128] and first["launched"] == [16, 32, 128], first
    assert second["estimated"] == [16, 32, 128] and second["launched"] == [16, 32], second
    assert second["chosen"] in ([16], [32]) and second["how"] == ["tuned"] and second["ok"]
    # fresh processes, the disk cache shared: each pruning finds its own decision, never the other's
    perf, none = process(["prune_perf"], env)[0], process(["prune_none"], env)[0]
    assert perf["chosen"] == second["chosen"] and perf["how"] == ["disk cache"] and 128 not in perf["launched"]
    assert perf["estimated"] == [16, 32, 128], perf  # the perf model is called before the cache is read
    assert none["chosen"] == [128] and none["how"] == ["disk cache"], none


@pytest.mark.triton_dependent
@pytest.mark.timeout(120)
def test_a_decision_made_under_another_kept_set_is_tuned_again(tmp_path):
    # the same pruning function (the same digest) keeps {32, 128} in one process and {16, 128} in the next: as in
    # Triton, whose disk cache is keyed by the configs that survive, the second tunes (before: it took 128 from
    # the disk, never measuring 16); the same kept set again reads its own decision
    env = tuner_env(tmp_path, TIMEOUT_S)
    first = process(["prune_by_env"], {**env, "KEEP_BLOCKS": "32,128"})[0]
    assert first["chosen"] == [128] and first["how"] == ["tuned"] and first["ok"], first
    second = process(["prune_by_env"], {**env, "KEEP_BLOCKS": "16,128"})[0]
    assert second["how"] == ["tuned"] and 16 in second["launched"] and second["ok"], second
    third = process(["prune_by_env"], {**env, "KEEP_BLOCKS": "16,128"})[0]
    assert third["how"] == ["disk cache"] and third["chosen"] == second["chosen"], third


@pytest.mark.timeout(200)
def test_autotune_prunes_before_the_cache_and_never_serves_a_config_the_current_pruning_leaves_out(tmp_path):
    # the same prune_fn source keeps variants {2, 3} in one job and {1, 2} in the next (2 ranks each, one cache
    # folder): the second job tunes among 1 and 2 (before: both ranks served 3 from the disk, which its pruning
    # leaves out); each kept set then reads its own decision; pruning that keeps everything is its own entry too
    env = tuner_env(tmp_path, TIMEOUT_S)

    def job(keep: str) -> dict:
        results = run_ranks(CASES, 2, ["autotune_prune_by_env"], env={**env, "KEEP_VARIANTS": keep}, timeout=150)
        assert all(r.returncode == 0 for r in results), describe(results)
        first, other = (r.result for r in results)
        assert first == other, (first, other)  # the same on both ranks
        return first

    assert job("2,3") == {"chosen": 3, "launched": [2, 3], "how": "tuned"}
    assert job("1,2") == {"chosen": 2, "launched": [1, 2], "how": "tuned"}
    assert job("1,2") == {"chosen": 2, "launched": [2], "how": "disk cache"}
    assert job("2,3") == {"chosen": 3, "launched": [3], "how": "disk cache"}
    assert job("0,1,2,3") == {"chosen": 3, "launched": [0, 1, 2, 3], "how": "tuned"}


@pytest.mark.triton_dependent
def test_triton_distributed_module_paths_import_the_same_functions():
    code = ("from triton_dist_tune.tune import autotune, to_hashable\n"
            "from triton_dist_tune.autotuner import contextual_autotune\n"
            "import triton_dist_tune as tdt, torch\n"
            "assert autotune is tdt.autotune and to_hashable is tdt.to_hashable\n"
            "assert contextual_autotune is tdt.contextual_autotune\n"
            "assert to_hashable(torch.empty(2, 3)) == ((2, 3), (3, 1), torch.float32)\n"
            "import triton.runtime.autotuner as a; assert 'run' in vars(a.Autotuner)\n"
            "import triton_dist_tune.contextual.intercept as i; assert not i.patched()  # importing patches nothing\n"
            "print('ok')")
    proc = run_python(["-c", code], base_env(), timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.triton_dependent
@pytest.mark.timeout(120)
def test_a_bare_contextual_autotune_in_a_multi_rank_job_tunes_with_the_default_group(tmp_path):
    env = tuner_env(tmp_path, TIMEOUT_S)
    results = run_ranks(CASES, 2, ["bare_in_job"], env=env, timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    # alone, rank 0 would choose BLOCK 16 and rank 1 BLOCK 128 (by 20x); with the group, one choice on both
    # (32 by the MAX over ranks: 20 ms against 40)
    chosen = [r.result["chosen"] for r in results]
    assert chosen[0] == chosen[1] and len(chosen[0]) == 1, describe(results)
    assert all(r.result["group_size"] == 2 and r.result["ok"] for r in results)


@pytest.mark.timeout(120)
def test_is_dist_false_in_a_multi_rank_job_tunes_each_rank_alone_as_asked(tmp_path):
    results = run_ranks(CASES, 2, ["alone_on_purpose"], env=tuner_env(tmp_path, TIMEOUT_S), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert [r.result["group_size"] for r in results] == [1, 1] and all(r.result["ok"] for r in results)


@pytest.mark.parametrize("value", ["yes", 1, 0, "False", object()])
def test_is_dist_is_checked_when_decorating_and_named(value):
    from triton_dist_tune import BadInputError, contextual_autotune

    with pytest.raises(BadInputError, match="is_dist"):
        contextual_autotune(is_dist=value)(lambda: None)


@pytest.mark.triton_dependent
@pytest.mark.timeout(60)
def test_a_decided_contextual_call_enters_no_more_python_functions_than_a_decided_stock_launch(tmp_path):
    # counted, not timed: the Python functions one decided call enters, the kernel's (no-op) run included
    result = process(["decided_cost"], tuner_env(tmp_path, TIMEOUT_S))[0]
    assert result["contextual"] <= result["stock"], result
    assert result["installed"] == [True] * 4  # no patch and restore of Autotuner.run per call
    assert result["keys"] == [True] * 3 and result["runs"] == 1 and result["plan"], result


#: the only frames of this package that Dynamo may process: the decorators' wrappers, up to the graph break
WRAPPER_FILES = {"tune.py", "capture.py", "__init__.py"}


@pytest.mark.timeout(200)
def test_autotune_under_torch_compile_tunes_each_key_once_and_is_never_traced(tmp_path):
    result = process(["compiled_autotune"], tuner_env(tmp_path, TIMEOUT_S), timeout=180)[0]
    # keys 8 and 16, met across recompiles (new shapes) and after torch._dynamo.reset(): each tuned once
    assert result["ok"] and result["tuned"] == ["16", "8"] and result["decided"] == [8, 16], result
    assert len(result["after_reset"]) == 2  # after the reset: the decided configs only, no tuning
    # Dynamo never traced the tuner (before: hundreds of its frames compiled, and recompile limits hit)
    assert {f.split(":")[0] for f in result["package_frames"]} <= WRAPPER_FILES, result["package_frames"]


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_contextual_autotune_under_torch_compile_tunes_each_key_once_with_its_launches_intercepted(tmp_path):
    result = process(["compiled_contextual"], tuner_env(tmp_path, TIMEOUT_S), timeout=180)[0]
    # before: Dynamo traced the Triton launch inside the tuned function, and the call failed
    assert result["ok"] and result["decisions"] == {"64": "tuned", "32": "tuned"}, result
    per_call = result["per_call"]  # sizes 64, 64, 32, 64, 32: each key tuned in its first call, then decided
    assert per_call[0] == per_call[2] == [16, 32, 128], per_call
    assert len(per_call[1]) == len(per_call[4]) == 1 and per_call[1] == per_call[3] == result["after_reset"]
    assert {f.split(":")[0] for f in result["package_frames"]} <= WRAPPER_FILES, result["package_frames"]


@pytest.mark.timeout(60)
def test_a_bare_contextual_autotune_without_init_in_a_multi_rank_job_warns_naming_is_dist(tmp_path):
    env = {**tuner_env(tmp_path, TIMEOUT_S), "WORLD_SIZE": "2", "RANK": "0"}
    proc = run_process(CASES, ["bare_without_init"], env, timeout=50)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = [line for line in proc.stderr.splitlines() if "torch.distributed is not initialized" in line]
    assert len(warned) == 1 and "is_dist=" in warned[0] and "autotune_pg" not in warned[0], proc.stderr[-3000:]
