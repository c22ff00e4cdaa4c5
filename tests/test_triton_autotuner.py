"""Triton's own autotuner tests (``python/test/unit/runtime/test_autotuner.py`` in triton-lang/triton) pass through
``contextual_autotune``, on 1 and on 2 ranks (gloo, Triton's interpreter), under triton 3.6 and the newest triton.

Each test below keeps the name (and meaning) of the Triton test it ports; the kernels and launches are in
tests/scenarios/triton_autotuner_cases.py, one case per variant of a parametrized Triton test. Every case runs in
ONE job of 1 rank and ONE job of 2 ranks, one after the other, and both jobs share ONE tuner cache folder (the
disk cache of decisions, and the crash journals): the 2-rank job finds the 1-rank job's decisions there. A
decision's entry names the size of the group that made it (a choice made by one rank alone is not a 2-rank
group's), so today the 2-rank job tunes its own; the assertions hold either way: wherever a test reads how a
decision was made, a decision served from the disk cache is accepted beside a tuned one, and what Triton asserts
(values, cache entries, hooks, pruning, errors) must hold on every rank whichever it was. On 2 ranks the ranks
must also agree on every decision.

Ported as in Triton, through a function decorated with ``contextual_autotune(is_dist=True, n_warmup=1,
n_repeat=1)`` (the counterpart of Triton's ``do_bench(warmup=1, rep=1)``); the contextual tuner times launches in
their context and never calls the kernel's ``do_bench``. Where the installed Triton's own autotuner decides the
outcome, the expectation follows it (None in ``reset_to_zero`` / ``restore_value``); where the tuner applies
pruning itself, it keeps the newest Triton's rule under both versions (fractional ``top_k``). The tests that need
a GPU, or test Triton internals without a launch, are skipped with their reason.
"""

from __future__ import annotations

import pytest
from harness import HERE, run_cases, tuner_env

CASES = HERE / "scenarios" / "triton_autotuner_cases.py"
#: every test here is Triton's own: run again under triton 3.6 (tests/run.sh)
pytestmark = pytest.mark.triton_dependent

#: every case, in the order they run in each job (``group_still_works`` last: the failed calls left the group usable)
ALL_CASES = ["kwargs", "dtype_cache_results", "no_do_bench", "restore_positional", "restore_kwargs",
             "reset_to_zero_positional", "reset_to_zero_kwargs", "reset_to_zero_none_positional",
             "reset_to_zero_none_kwargs", "restore_with_none_positional", "restore_with_none_kwargs", "hooks",
             "prune_configs_early", "prune_configs_perf_model", "prune_configs_fractional_top_k_keeps_one",
             "prune_configs_fractional_top_k_after_early_prune", "pruned_single_config_early_config_prune",
             "pruned_single_config_perf_model", "prune_all_configs", "group_still_works"]

#: seconds for each job (a job takes about 3 s on 1 rank and 6 s on 2 on a 2-core machine alone)
JOB_TIMEOUT_S = 120
#: the first test of the module also waits for both jobs
TEST_TIMEOUT_S = 2 * JOB_TIMEOUT_S + 30

#: Triton's text when pruning keeps no config (``str(error)``)
EMPTY_PRUNING = ("Autotuner error: No valid autotuner configs after pruning. `early_config_prune` should return at "
                 "least one config.")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """ranks -> case -> each rank's RankResult: one job of 1 rank, then one of 2 ranks, sharing one cache folder
    (once per module, or once per pytest-xdist worker that runs these tests)."""
    env = tuner_env(tmp_path_factory.mktemp("triton-autotuner"), 30)
    return {n: run_cases(CASES, n, ALL_CASES, env=env, timeout=JOB_TIMEOUT_S) for n in (1, 2)}


@pytest.fixture(params=[1, 2], ids=["1rank", "2ranks"])
def ranks(request):
    return request.param


@pytest.fixture
def results(jobs, ranks):
    """case -> each rank's result dict (one per rank of the job)."""

    def get(case):
        per_rank = jobs[ranks][case]
        assert len(per_rank) == ranks
        return [r.result for r in per_rank]

    return get


def agreed(res: list[dict]) -> list[dict]:
    """Every rank's decisions are the same (the group's); returns them."""
    first = res[0]["decisions"]
    assert all(r["decisions"] == first for r in res), res
    return first


def tuned(decision: dict, configs: int = 2) -> None:
    """A decision among several configs: tuned in this job, or served from the (shared) disk cache."""
    assert decision["how"] in ("tuned", "disk cache"), decision
    assert len(decision["states"]) == configs
    if decision["how"] == "tuned":
        assert set(decision["states"]) <= {"measured", "stopped"} and decision["time_ms"] is not None, decision


# -- test_kwargs, test_dtype_cache_results, test_no_do_bench ------------------------------------------------------


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_kwargs(results):
    """Triton: a launch by position and one by keyword (another order, another M): two cache entries."""
    res = results("kwargs")
    for r in res:
        assert r["cache_len"] == 2, res
        assert r["cache_keys"] == ["(1024, 'torch.float32', 'torch.float32')",
                                   "(512, 'torch.float32', 'torch.float32')"]
        assert r["copied"]
        assert r["benched"] == 0  # the contextual tuner times launches in context, never with the kernel's do_bench
    decided = agreed(res)
    assert [d["key"] for d in decided] == res[0]["cache_keys"]
    for d in decided:
        tuned(d)


@pytest.mark.skip(reason="test_kwargs[use_cuda_graph=True] benchmarks with CUDA graphs (do_bench_cudagraph): needs "
                         "CUDA, and the contextual tuner never calls the kernel's do_bench")
def test_kwargs_cuda_graph():
    pass


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_dtype_cache_results(results):
    """Triton: a tl.dtype as the key, cache_results=True: one cache entry."""
    res = results("dtype_cache_results")
    for r in res:
        assert r["cache_len"] == 1 and r["copied"], res
    (decision,) = agreed(res)
    assert decision["key"].startswith("(triton.language.float32, ")
    tuned(decision)


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_no_do_bench(results):
    """Triton: no do_bench given: one cache entry."""
    res = results("no_do_bench")
    for r in res:
        assert r["cache_len"] == 1 and r["copied"], res
    (decision,) = agreed(res)
    tuned(decision)


# -- test_restore, test_reset_to_zero, test_restore_with_none --------------------------------------------------------


@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.parametrize("pass_kwargs_to_kernel", [False, True])
def test_restore(results, pass_kwargs_to_kernel):
    """Triton: the kernel adds one to src in place, restore_value=['src']: src is 1 afterwards, however many
    benchmarking launches (here: runs of the function) it took."""
    res = results("restore_kwargs" if pass_kwargs_to_kernel else "restore_positional")
    for r in res:
        assert r["ones"], res  # src == 1 everywhere
    (decision,) = agreed(res)
    tuned(decision)
    if decision["how"] == "tuned":
        assert res[0]["runs"] > 2  # several runs of the function, every one but the last restored


def check_none_case(res: list[dict], src_is_none: bool, missing_method: str) -> None:
    """dst must be 1 afterwards; except where the installed Triton's own hooks do not skip a None src (Triton 3.6):
    then every rank fails alike, with the package's AllConfigsFailedError naming Triton's AttributeError (the
    contextual tuner runs the autotuner's own hooks, so it can skip None only where Triton does)."""
    for r in res:
        stock = r["stock_skips_none"]
        if r["version"].startswith("3.6"):
            assert stock is False, r  # Triton 3.6's default hooks call .zero_() / .clone() on None
        if src_is_none and not stock:
            assert r["error"] == "AllConfigsFailedError" and r["ours"], res
            assert f"AttributeError: 'NoneType' object has no attribute '{missing_method}'" in r["message"], r
            assert "every config failed" in r["message"]
            continue
        assert r["error"] is None, describe_res(res)
        assert r["ones"] and r["distinct"] == [1.0], res
    if res[0]["error"] is None:
        (decision,) = agreed(res)
        tuned(decision)


def describe_res(res: list[dict]) -> str:
    return "\n".join(f"rank {i}: {r.get('error')}: {r.get('message', '')}" for i, r in enumerate(res))


@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.parametrize("src_is_none", [False, True])
@pytest.mark.parametrize("pass_kwargs_to_kernel", [False, True])
def test_reset_to_zero(results, pass_kwargs_to_kernel, src_is_none):
    """Triton: reset_to_zero=['src'], dst starts at 2 and src is dst or None; dst is 1 afterwards (a None src is
    skipped by the autotuner's default pre_hook: the newest Triton; 3.6 raises, see check_none_case)."""
    name = "reset_to_zero" + ("_none" if src_is_none else "") + ("_kwargs" if pass_kwargs_to_kernel else
                                                                 "_positional")
    check_none_case(results(name), src_is_none, "zero_")


@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.parametrize("pass_kwargs_to_kernel", [False, True])
def test_restore_with_none(results, pass_kwargs_to_kernel):
    """Triton: restore_value=['src'] with src None: the default pre/post hooks skip it and dst is 1 (the newest
    Triton; 3.6 raises, see check_none_case)."""
    name = "restore_with_none_" + ("kwargs" if pass_kwargs_to_kernel else "positional")
    check_none_case(results(name), True, "clone")


# -- test_hooks ----------------------------------------------------------------------------------------------------


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_hooks(results):
    """Triton: the autotuner's pre_hook and post_hook are called the same number of times (the counter is back to
    0 in every post_hook); off CUDA no config runs out of resources, so no post_hook sees an exception."""
    res = results("hooks")
    (decision,) = agreed(res)
    tuned(decision)
    for r in res:
        assert r["unbalanced"] == 0 and r["exceptions"] == [], r
        # every pre_hook of a benchmarking launch is followed by its post_hook; the one extra pre_hook is Triton's
        # reset_only call before the launch with the chosen config (stock Triton makes it too, with no post_hook)
        assert r["pre"] - r["resets"] == r["post"] and r["resets"] <= 1, r
        if decision["how"] == "tuned":
            assert r["post"] >= 2 and r["resets"] == 1, r  # each config benchmarked at least once
        assert r["zeros"]


# -- pruning ---------------------------------------------------------------------------------------------------------


@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.parametrize("with_perf_model", [False, True])
def test_prune_configs(results, with_perf_model):
    """Triton: early_config_prune sees the launch's keywords (N) and the positional arguments by name (dst, src);
    with a perf model (top_k=1) only the perf model runs. One config is kept: configs[0] (BLOCK_SIZE 32)."""
    res = results("prune_configs_perf_model" if with_perf_model else "prune_configs_early")
    for r in res:
        assert r["copied"], res
        if with_perf_model:
            assert r["records"] == ["run_perf_model"], r
        else:
            assert r["records"] == ["capture_kwargs", "capture_named_args", "run_early_config_prune"], r
        assert r["best"] == {"BLOCK_SIZE": 32}
    (decision,) = agreed(res)
    assert decision["index"] == 0 and decision["how"] == "only config"


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_prune_configs_fractional_top_k_keeps_one(results):
    """Triton: top_k=0.3 of 2 configs rounds down to 0, yet one config is kept (the perf model's best, BLOCK_SIZE
    32) and the launch works. Triton 3.6's own autotuner keeps none and fails; the contextual tuner applies the
    newest Triton's rule under both versions."""
    res = results("prune_configs_fractional_top_k_keeps_one")
    for r in res:
        assert r["error"] is None, describe_res(res)
        assert r["copied"] and r["best"] == {"BLOCK_SIZE": 32}, r
    (decision,) = agreed(res)
    assert decision["index"] == 0 and decision["how"] == "only config"


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_prune_configs_fractional_top_k_after_early_prune(results):
    """Triton (on a fake kernel there, a real one here): 10 configs, early_config_prune keeps 6, the perf model
    estimates exactly those 6, and top_k=0.5 keeps half of them: the 3 best estimated, the only configs benchmarked
    (launched). Triton 3.6's own autotuner takes the fraction of all 10 configs (5); the contextual tuner takes it
    of the 6 early pruning kept, as the newest Triton does, under both versions."""
    res = results("prune_configs_fractional_top_k_after_early_prune")
    (decision,) = agreed(res)
    tuned(decision, configs=3)
    for r in res:
        assert r["estimated"] == [1, 2, 3, 4, 5, 6], r
        assert r["copied"] and r["best"] in (1, 2, 3)
        if decision["how"] == "tuned":
            assert r["launched"] == [1, 2, 3], r
        else:  # served from the disk cache: the run that met the kernel launched the first kept config, then the best
            assert r["best"] in r["launched"] and set(r["launched"]) <= {1, 2, 3}, r


@pytest.mark.timeout(30)
def test_config_ir_override_changes_disk_cache_key():
    """Triton: configs that differ only in ir_override have different cache keys (Triton derives its disk cache
    key from ``str(config)``; Triton 3.6's ``str()`` leaves ir_override out). Ported to the contextual tuner's own
    identity of a kernel's configs, which names its decisions in this process and on disk: it tells them apart
    under both versions (checked in this process, without a launch: the interpreter cannot launch an IR override)."""
    import triton
    import triton.language as tl

    from triton_dist_tune.contextual import intercept
    from triton_dist_tune.space import describe as describe_config

    first = triton.Config(kwargs={"BLOCK_SIZE": 32}, ir_override="first.ttir")
    second = triton.Config(kwargs={"BLOCK_SIZE": 32}, ir_override="second.ttir")
    assert describe_config(first) != describe_config(second)

    @triton.jit
    def body(dst, BLOCK_SIZE: tl.constexpr):
        pass

    tracks = {intercept.track_id(triton.autotune(configs=[c], key=[])(body)) for c in (first, second)}
    assert len(tracks) == 2


@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.parametrize("prune_kind", ["early_config_prune", "perf_model"])
def test_pruned_single_config_skips_benchmark(results, prune_kind):
    """Triton: pruning keeps configs[1] alone: it is the best config and the one launched; do_bench is never called
    and no autotuning listener hears of it (Triton 3.6 has no listener knob). Contextually: the decision is "only
    config", with no time and no config measured. (The function still runs twice, as every first contextual call
    does: the run that meets the kernel, then the run with the decision; both launch configs[1] only.)"""
    res = results(f"pruned_single_config_{prune_kind}")
    for r in res:
        assert r["records"] == [f"run_{prune_kind}"], r  # the pruning ran; do_bench never did
        assert r["captured"] == [], r
        assert r["best_is_configs_1"] and r["best"] == {"BLOCK_SIZE": 128} and r["copied"], r
        assert r["launched"] and set(r["launched"]) == {128}, r
    (decision,) = agreed(res)
    assert decision["index"] == 1 and decision["how"] == "only config", decision
    assert decision["time_ms"] is None and decision["states"] == ["skipped"], decision


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_prune_all_configs(results):
    """Triton: early_config_prune keeps nothing: the launch raises a triton.TritonError (the contextual tuner's
    ContextualPruningError, an instance of Triton's AutotunerError) whose text is Triton's, exactly; on every rank."""
    res = results("prune_all_configs")
    for r in res:
        assert r["error"] == "ContextualPruningError", describe_res(res)
        assert r["triton_error"] and r["autotuner_error"], r
        assert r["message"] == EMPTY_PRUNING, r["message"]


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_group_still_tunes_after_the_failed_calls(results):
    """Not in Triton's file: after every case of the job (some of which raised on every rank), one more contextual
    tuning on the same group works."""
    res = results("group_still_works")
    for r in res:
        assert r["copied"], res
    (decision,) = agreed(res)
    tuned(decision)


# -- not portable to CPU ranks ---------------------------------------------------------------------------------------

#: Triton's tests that need a GPU, and what the interpreter on CPU ranks lacks for each
GPU_ONLY = {
    "test_override_ttir": "TTIR compilation to override (ir_override of a .ttir, compute capability >= 9)",
    "test_override_ttgir": "TTGIR compilation to override (ir_override of a .ttgir, compute capability >= 9)",
    "test_override_ptx": "PTX to override (ir_override of a .ptx, SM90 only)",
    "test_exceed_tmem": "tensor memory to exceed (out of resource: tensor memory, compute capability 10)",
    "test_exceed_threads": "thread limit to exceed (num_warps=128: out of resource: threads, CUDA)",
}


@pytest.mark.parametrize("triton_test", sorted(GPU_ONLY))
def test_gpu_only(triton_test):
    pytest.skip(f"{triton_test} needs a GPU: Triton's interpreter on CPU ranks has no {GPU_ONLY[triton_test]}")
