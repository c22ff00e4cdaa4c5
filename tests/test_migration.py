"""Code ported from ``triton.autotune`` (issue: a kernel developer migrating): what differs from stock Triton is
said, never done silently. Real gloo ranks, Triton's interpreter; the scenarios are in
tests/scenarios/migration_cases.py."""

from __future__ import annotations

import pytest
from harness import HERE, base_env, describe, run_python, run_ranks, tuner_env

CASES = HERE / "scenarios" / "migration_cases.py"


def run(case, n, tmp_path):
    results = run_ranks(CASES, n, [case], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    return results


@pytest.mark.triton_dependent
@pytest.mark.timeout(180)
def test_an_early_config_prune_that_makes_a_config_is_an_error_on_every_rank(tmp_path):
    """Stock Triton benchmarks the configs ``early_config_prune`` returns, new ones included. The group tunes the
    kernel's own configs by index: before, the new config was dropped silently (config 0 alone was tuned, and a
    pruning returning only new configs raised Triton's "no valid configs after pruning")."""
    results = run("prune_makes_a_config", 2, tmp_path)
    for r in results:
        res = r.result
        assert res.get("error") == "ContextualPruningError", describe(results)
        assert res["bad_input"] and res["triton_error"], res
        assert "not one of the kernel's configs" in res["message"] and "BLOCK: 256" in res["message"], res
        assert 256 not in res["launched"], res


@pytest.mark.triton_dependent
@pytest.mark.timeout(180)
def test_an_early_config_prune_returning_equal_copies_tunes_the_kernels_configs(tmp_path):
    results = run("prune_returns_equal_copies", 2, tmp_path)
    bests = [r.result["best"] for r in results]
    for r in results:
        assert r.result["ok"] and r.result["launched"] == [32, 64], describe(results)
    assert bests[0] == bests[1], bests


@pytest.mark.triton_dependent
@pytest.mark.timeout(150)
def test_a_stock_autotuned_kernel_needing_a_driver_under_the_interpreter_names_the_cause(tmp_path):
    """Under TRITON_INTERPRET=1 a stock @triton.autotune kernel's own benchmarking asks for a GPU driver. The
    error said to set TRITON_INTERPRET=1, which was set; it names Triton's benchmarking and contextual_autotune."""
    res = run("stock_autotune_inside_autotune", 1, tmp_path)[0].result
    assert res["interpret"] == "1" and res["error"] == "AllConfigsFailedError", res
    message = res["message"]
    assert "active drivers" in message and "set TRITON_INTERPRET=1" not in message, message
    assert "although TRITON_INTERPRET is set" in message and "contextual_autotune" in message, message


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
@pytest.mark.parametrize("case", ["stock_kernel_tunes_itself_inside_autotune",
                                  "stock_kernel_tunes_itself_in_a_decided_call"])
def test_a_stock_autotuned_kernel_tuning_itself_inside_an_autotune_function_is_said_on_every_rank(case, tmp_path):
    """Each rank tunes a stock @triton.autotune kernel alone (here rank 0 chooses BLOCK 64, rank 1 BLOCK 32), in
    an undecided call or in a decided one (its key decided by a call that launched no stock kernel): before,
    nothing said so (a decided call was not watched); now every rank warns
    once for the function and kernel, over two kernel keys."""
    results = run(case, 2, tmp_path)
    assert [r.result["best"] for r in results] == [64, 32], describe(results)
    for r in results:
        assert r.result["ok"], describe(results)
        said = r.result["said"]
        assert len(said) == 1 and "f: the @triton.autotune kernel" in said[0], said
        assert "chose its config on this rank alone" in said[0] and "contextual_autotune" in said[0], said


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_the_stock_kernel_warning_reaches_stderr_once(tmp_path):
    """Before, the warning went to Python's warnings and to the package logger, whose last-resort handler printed
    it too: twice on each rank's stderr. Now the warning once, and the rank's log file."""
    for r in run("stock_kernel_warning_uncaught", 2, tmp_path):
        assert r.result["ok"] and r.stderr.count("chose its config on this rank alone") == 1, r.stderr[-3000:]


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
@pytest.mark.parametrize("case", ["stock_kernel_in_a_nested_contextual_function",
                                  "autotune_function_inside_a_contextual_function"])
def test_a_stock_kernel_the_group_tunes_contextually_is_not_warned_about(case, tmp_path):
    """Launched from a contextual_autotune function inside the autotune function, or by an autotune function
    inside a contextual_autotune function, the kernel is tuned by the group: one choice, nothing said."""
    results = run(case, 2, tmp_path)
    bests = {r.result["best"] for r in results}
    assert len(bests) == 1, describe(results)
    for r in results:
        assert r.result["ok"] and r.result["said"] == [], describe(results)


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_a_tensor_among_a_kernels_key_arguments_is_said_once(tmp_path):
    """``key=["x", ...]`` with ``x`` a tensor keys by the tensor object (a new key each call, tuned again); before,
    nothing said so. Every rank warns once for the kernel, over two calls."""
    results = run("tensor_in_a_kernels_key", 2, tmp_path)
    for r in results:
        assert r.result["ok"], describe(results)
        said = r.result["said"]
        assert len(said) == 1 and "add_one" in said[0] and "key by a size" in said[0], said


@pytest.mark.timeout(180)
def test_autotune_false_running_a_config_after_a_pruned_first_is_said_on_that_rank(tmp_path):
    """Without tuning, prune_fn is asked on each rank alone (no communication): a prune_fn that drops config 0 on
    rank 0 only made the ranks run different configs (chunks 2 against 1), silently. It stays so, but the rank
    that pruned says it once (Triton-distributed's ``autotune=False`` runs config 0 unpruned)."""
    results = run("untuned_with_a_rank_dependent_prune", 2, tmp_path)
    first, second = (r.result for r in results)
    assert first["ran"] == [2, 2] and second["ran"] == [1, 1], describe(results)
    assert len(first["said"]) == 1 and "autotune=False ran config 1" in first["said"][0], first
    assert "on each rank alone" in first["said"][0] and second["said"] == [], describe(results)


@pytest.mark.timeout(180)
def test_every_config_failing_with_the_users_error_chains_it_with_its_traceback(tmp_path):
    """Triton-distributed re-raises the function's own error; the group raises AllConfigsFailedError on every rank
    (one error everywhere). Its ``__cause__`` was None and the user's traceback was nowhere: now each rank chains
    its own last raise, and its rank log holds that traceback (the user's function named in it)."""
    results = run("every_config_raises_the_users_error", 2, tmp_path)
    for r in results:
        assert r.result == {"error": "AllConfigsFailedError", "cause": "KeyError",
                            "cause_text": "\"missing weight 'w1'\""}, describe(results)
    for rank in (0, 1):
        text = (tmp_path / "logs" / f"rank-{rank}.log").read_text()
        assert "Traceback" in text and "in weights_missing" in text and "KeyError" in text, text[-2000:]
        # the failure's line reads as the error's text does (it read "every config failed: , all 2 with ...")
        assert "every config failed, all 2 with the same error" in text and "failed: ," not in text, text[-2000:]


@pytest.mark.timeout(180)
def test_decided_calls_passing_the_tuner_keywords_as_triton_distributed_callers_do_stay_a_lookup(tmp_path):
    """``ag_gemm(a, b, ctx=ctx, autotune=args.autotune)``: Triton-distributed's callers pass the tuner's keywords
    on every call. With any of them a decided call went through the slow path (resolving the group, the settings,
    the stock-kernel watch): ~50 µs against ~5 µs on 2 gloo CPU ranks. Now ``autotune=True``, ``autotune_pg=None``,
    ``autotune_verbose=`` True or False, ``autotune_allow_arg_overwrite=False`` and ``autotune_replicas=None``
    change nothing on a decided key: counted in Python calls (not timed), within 10 of the bare call. So does a
    DP x TP layer's ``autotune_pg=tp, autotune_replicas=dp`` (before: the slow path on every decided call, 195
    Python calls against 15)."""
    results = run("decided_calls_with_the_tuner_keywords_set_to_their_defaults", 2, tmp_path)
    for r in results:
        res = r.result
        assert res["ok"] and res["decided"] == 1 and res["decided_in"] == 1, describe(results)
        calls = res["calls"]
        for name, count in calls.items():
            assert count <= calls["none"] + 10, (name, str(calls))
        assert res["mistake"] and "autotune= must be True or False, not 1" in res["mistake"], res


@pytest.mark.timeout(180)
def test_a_prune_fn_reading_a_config_field_from_the_entry_is_told_where_it_is(tmp_path):
    """Triton-distributed's documented prune_fn reads ``config["BLOCK_SIZE_M"]`` from a ``{"gemm_config": c}``
    entry: the error said only ``prune_fn raised KeyError: 'BLOCK_SIZE_M'``. Now it names the entry's keys and what
    to read (``config['gemm_config'].kwargs['BLOCK_SIZE_M']``), on every rank, tuned or with ``autotune=False``; a
    KeyError of prune_fn's own (a name no value of the entry holds) stays as it was."""
    results = run("prune_fn_reading_the_config_as_the_triton_config", 2, tmp_path)
    for r in results:
        said = r.result["said"]
        for name in ("tuned", "untuned"):
            assert said[name].startswith("BadInputError: ") and "prune_fn raised KeyError: 'BLOCK_SIZE_M'" in said[
                name], said
            assert "keys ['gemm_config']" in said[name], said
            assert "read config['gemm_config'].kwargs['BLOCK_SIZE_M']" in said[name], said
        assert said["own"] == "KeyError: 'torch.float32'", said


def test_both_decorated_functions_keep_the_undecorated_one_as_fn():
    """Triton-distributed's decorators return objects whose ``.fn`` is the undecorated function (its ``AutoTuner``
    and ``ContextualAutoTuner``); ``autotune``'s function had ``.fn``, ``contextual_autotune``'s had none
    (AttributeError). Checked in a fresh interpreter: nothing is tuned or called."""
    code = ("import triton_dist_tune as tdt\n"
            "def f(x):\n    return x\n"
            "def g(x, *, c):\n    return x\n"
            "c = tdt.contextual_autotune(is_dist=False)(f)\n"
            "a = tdt.autotune([{'c': 1}], key_fn=lambda x: 0)(g)\n"
            "print(c.fn is f, a.fn is g, c.__name__, a.__name__)")
    proc = run_python(["-c", code], base_env(), timeout=60)
    assert proc.returncode == 0 and proc.stdout.split() == ["True", "True", "f", "g"], proc.stderr[-3000:]


def test_autotunes_function_has_best_configs_as_triton_distributeds_tuner_has(tmp_path):
    """Triton-distributed's ``AutoTuner.best_configs`` maps each key to its config dict; here the decorated function
    had none (a bare AttributeError). It is ``.tuner.decided`` itself, so it holds each key decided on the default
    group as it is decided. One process, a fresh HOME."""
    code = ("import torch, triton_dist_tune as tdt\n"
            "def g(x, *, c):\n    return x * c\n"
            "a = tdt.autotune([{'c': 1}, {'c': 2}], key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2)(g)\n"
            "before = dict(a.best_configs)\n"
            "a(torch.ones(4))\n"
            "print(before, a.best_configs is a.tuner.decided, sorted(a.best_configs), sorted(a.best_configs[4]))")
    proc = run_python(["-c", code], base_env({"HOME": str(tmp_path)}), timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["{}", "True", "[4]", "['c']"], proc.stderr[-3000:]


@pytest.mark.triton_dependent
def test_a_config_space_written_for_another_tuner_is_told_what_to_write():
    """Ported from TileLang (``configs=get_configs``, a function), from a generator, or from ``triton.autotune``
    (a list of ``triton.Config``): the errors said only ``must be a list of dicts, not function`` / ``not
    generator`` / ``not Config``; Triton-distributed's ``key_fn=None`` (one key for every call) said only that a
    key_fn is needed. Now each says what to write. Decorating only, in a fresh interpreter."""
    code = ("import triton, triton_dist_tune as tdt\n"
            "def g(x, *, config=None):\n    return x\n"
            "for space, key_fn in ((lambda: [{'config': 1}], len), (({'config': c} for c in (1, 2)), len),\n"
            "                      ([triton.Config({'BLOCK': 64})], len), ([{'config': 1}], None)):\n"
            "    try:\n"
            "        tdt.autotune(space, key_fn=key_fn)(g)\n"
            "    except tdt.BadInputError as exc:\n"
            "        print(exc)\n")
    proc = run_python(["-c", code], base_env(), timeout=60)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 4, (proc.stdout, proc.stderr[-3000:])
    function, generator, configs, no_key_fn = lines
    # Triton-distributed's key_fn=None (one decision for every call): said how to write it here
    assert "key_fn=lambda *args, **kwargs: None" in no_key_fn, no_key_fn
    assert "not function: call it (config_space=get_configs())" in function and "prune_fn" in function, function
    assert "not generator: make it a list (config_space=list(...))" in generator, generator
    assert "not Config; a list of triton.Config" in configs and "[{'config': c} for c in configs]" in configs, configs


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_a_kernels_own_benchmarking_left_unused_in_context_is_said_in_the_rank_log(tmp_path):
    """Stock Triton times every config with the kernel's ``do_bench=`` (or one built from ``warmup=``/``rep=``);
    inside ``contextual_autotune`` the tuner times the launches itself, and before, nothing said that the kernel's
    own was left unused. Now each rank's log says it once per kernel, naming what was given."""
    results = run("own_benchmarking_in_context", 2, tmp_path)
    for r in results:
        assert r.result["ok"] and r.result["bench_calls"] == 0, describe(results)
    for rank in (0, 1):
        text = (tmp_path / "logs" / f"rank-{rank}.log").read_text()
        said = [line for line in text.splitlines() if "not used while it is tuned in context" in line]
        assert len(said) == 2, text[-3000:]
        assert any("its own do_bench=" in line for line in said), said
        assert any("its own warmup=, rep=" in line for line in said), said


def _prune_fn_by_shared_memory(config, a):
    return config["gemm_config"][2] * a.element_size() < 48 * 1024  # a tuple of 2: IndexError


def _prune_reading_the_field(config, a):
    return config["BLOCK_SIZE_M"] * a.element_size() < 48 * 1024  # a field of the entry's Config: KeyError


def _rows_of(a):
    return a.shape[2]  # a 1-d tensor: IndexError


#: a user callable that raises: the tuner's options that call it, what the agreed ``BadInputError`` says, the
#: exception chained as its cause, and the function of the user's code in that cause's traceback
USER_CALLABLE_RAISES = {
    "prune_fn IndexError": ({"key_fn": lambda a: a.numel(), "prune_fn": _prune_fn_by_shared_memory},
                            "prune_fn raised", IndexError, "_prune_fn_by_shared_memory"),
    "prune_fn KeyError": ({"key_fn": lambda a: a.numel(), "prune_fn": _prune_reading_the_field},
                          "prune_fn raised", KeyError, "_prune_reading_the_field"),
    "key_fn tuned": ({"key_fn": lambda a: (_rows_of(a), a.dtype), "undecided": "tune"},
                     "key_fn failed: IndexError", IndexError, "_rows_of"),
    "key_fn served first": ({"key_fn": lambda a: (_rows_of(a), a.dtype), "undecided": "first"},
                            "key_fn failed: IndexError", IndexError, "_rows_of"),
}


@pytest.mark.parametrize("case", list(USER_CALLABLE_RAISES))
def test_a_prune_fn_or_key_fn_that_raises_gives_its_own_error_and_frames_as_the_cause(tmp_path, monkeypatch, case):
    """Triton-distributed calls ``prune_fn`` and ``key_fn`` in the caller's stack: their error reaches the caller
    with its traceback (``prune_fn_by_shared_memory`` and the line inside it; ``key_fn`` and what it calls). Here
    the group agrees on it and every rank raises one ``BadInputError`` (``prune_fn raised IndexError: ...``,
    ``key_fn failed: IndexError: ...``), whose ``__cause__`` was None: only the text was left, no frame of the
    user's code. Now the rank whose callable raised chains that exception, as a tuning whose every config failed
    chains the last one: a ``prune_fn``'s IndexError, and the KeyError that the entry-shape hint explains; a
    ``key_fn``'s, tuned or served by an ``undecided`` policy."""
    import traceback

    import torch

    import triton_dist_tune as tdt

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    options, said, cause, frame = USER_CALLABLE_RAISES[case]

    @tdt.autotune([{"gemm_config": (64, 32)}, {"gemm_config": (128, 32)}], **options,
                  name="chained_" + case.replace(" ", "_"))
    def gemm(a, *, gemm_config):
        return a

    with pytest.raises(tdt.BadInputError) as raised:
        gemm(torch.ones(4))
    assert said in str(raised.value), raised.value
    assert isinstance(raised.value.__cause__, cause), repr(raised.value.__cause__)
    assert frame in [f.name for f in traceback.extract_tb(raised.value.__cause__.__traceback__)]
