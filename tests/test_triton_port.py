"""Code ported from ``triton.autotune`` by a kernel author who has used it for years: what Triton's habits would
get wrong here is refused or said when decorating, never left to a silent result. Decorator checks run in this
process (they need no group); what a run does runs on real gloo ranks in Triton's interpreter
(tests/scenarios/triton_port_cases.py)."""

from __future__ import annotations

import os

import pytest
from harness import HERE, describe, run_ranks, tuner_env

os.environ.setdefault("TRITON_INTERPRET", "1")

CASES = HERE / "scenarios" / "triton_port_cases.py"


def kernels():
    """A plain jitted kernel, and the same kernel under @triton.autotune and under @triton.heuristics."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])(add_one)
    heuristic = triton.heuristics({"BLOCK": lambda args: 64})(add_one)
    return {"jit": add_one, "autotune": tuned, "heuristics": heuristic}


@pytest.mark.parametrize("kind", ["jit", "autotune", "heuristics"])
def test_a_triton_kernel_decorated_in_place_of_a_function_is_told_what_to_decorate(kind):
    """``@tdt.autotune(...)`` stacked where ``@triton.autotune`` stood: before, a ``@triton.jit`` kernel was taken
    for a function (``kernel[grid](...)`` then failed with "'function' object is not subscriptable", a plain call
    with every config failing in the interpreter), and a ``@triton.autotune`` or ``@triton.heuristics`` kernel was
    "decorates a function, got <Autotuner object ...>" with no word of what to write. Both decorators now refuse
    any Triton kernel when decorating, naming it and what to decorate instead."""
    import triton_dist_tune as tdt

    kernel = kernels()[kind]
    with pytest.raises(tdt.BadInputError) as caught:
        tdt.autotune([{"BLOCK": 64}, {"BLOCK": 128}], key_fn=lambda x, n: n)(kernel)
    text = str(caught.value)
    assert "not a Triton kernel (add_one: " in text and "**config.all_kwargs()" in text, text
    assert "contextual_autotune" in text, text
    with pytest.raises(tdt.BadInputError) as caught:
        tdt.contextual_autotune(n_warmup=1, n_repeat=1)(kernel)
    text = str(caught.value)
    assert "not a Triton kernel (add_one: " in text and "keep @triton.autotune" in text, text


def test_hooks_written_for_triton_autotune_are_refused_when_decorating():
    """A ``pre_hook(nargs, reset_only=False)`` / ``post_hook(nargs, exception)`` ported from ``triton.autotune``:
    ``autotune`` calls ``hook(config, *args, **kwargs)``, so on a function of one argument the post-hook got the
    config dict as ``nargs`` and the tensor as ``exception``, silently; on others every config failed with the
    hook's TypeError or KeyError. Refused when decorating, saying how a hook is called; a function that has a
    parameter of that name keeps such a hook."""
    import triton_dist_tune as tdt

    def one(x, *, BLOCK):
        return x

    def pre_hook(nargs, reset_only=False):
        nargs["x"].zero_()

    def post_hook(nargs, exception):
        pass

    space = [{"BLOCK": 64}, {"BLOCK": 128}]
    for option, hook, marker in (("pre_hook", pre_hook, "reset_only"), ("post_hook", post_hook, "exception")):
        with pytest.raises(tdt.BadInputError) as caught:
            tdt.autotune(space, key_fn=lambda x: x.numel(), **{option: hook})(one)
        text = str(caught.value)
        assert f"takes {marker!r}, as triton.autotune's {option}(kwargs, {marker})" in text, text
        assert f"{option}(config, *args, **kwargs)" in text, text

    def with_exception(x, exception, *, BLOCK):
        return x

    tdt.autotune(space, key_fn=lambda x, exception: 0, post_hook=lambda config, x, exception: None)(with_exception)
    tdt.autotune(space, key_fn=lambda x: 0, pre_hook=lambda config, *args, **kwargs: None)(one)


def test_a_hook_refused_or_kept_by_where_its_triton_named_parameter_gets_its_value():
    """Before, a hook was refused for the name ``exception`` / ``reset_only`` alone. Now it is refused where that
    parameter would get one of the call's positional arguments, or no value from any call; kept where the call
    cannot reach it by position (a tuned parameter and those after it are never passed so) and it has a default,
    or where it names the function's own parameter."""
    import triton_dist_tune as tdt

    def one(x, *, BLOCK):
        return x

    def two(x, y, *, BLOCK):
        return x

    def tuned_second(x, BLOCK, y):
        return x

    def none(*, BLOCK):
        return 0

    def spread(x, *rest, BLOCK):
        return x

    space = [{"BLOCK": 64}, {"BLOCK": 128}]
    refused = [(two, "post_hook", lambda config, x, exception=None: None, "would get the call's argument 'y'"),
               (spread, "post_hook", lambda config, x, exception=None: None, "a positional argument of the call"),
               (none, "post_hook", lambda nargs, exception: None, "no call gives it a value"),
               (one, "post_hook", lambda config, *, exception: None, "no call gives it a value"),
               (one, "pre_hook", lambda nargs, reset_only=False: None, "would get the call's argument 'x'")]
    for fn, option, hook, said in refused:
        with pytest.raises(tdt.BadInputError) as caught:
            tdt.autotune(space, key_fn=lambda *a: 0, **{option: hook})(fn)
        assert said in str(caught.value), (fn.__name__, str(caught.value))
    kept = [(one, "post_hook", lambda config, x, exception=None: None),
            (one, "pre_hook", lambda config, x, reset_only=False: None),
            (tuned_second, "post_hook", lambda config, x, exception=None: None),
            (spread, "post_hook", lambda config, *rest, exception=None: None),
            (none, "pre_hook", lambda nargs, reset_only=False: None)]  # gets the config dict: no call's argument
    for fn, option, hook in kept:
        tdt.autotune(space, key_fn=lambda *a: 0, **{option: hook})(fn)


@pytest.mark.triton_dependent
@pytest.mark.timeout(150)
def test_a_hook_in_this_packages_style_with_a_parameter_named_exception_is_kept(tmp_path):
    """``post_hook(config, x, out, exception=None)`` and ``pre_hook(config, x, out, reset_only=False)`` on
    ``f(x, out, *, config)``: before, refused when decorating for the names alone. Now kept, and every run (2 gloo
    ranks, Triton's interpreter) calls each with the config dict and the parameter at its default."""
    results = run_ranks(CASES, 2, ["package_style_hook_named_exception"], env=tuner_env(tmp_path, 30), timeout=120)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        res = r.result
        assert res["seen"] == [["post", True, "None"], ["pre", True, "False"]], res
        assert res["calls"] >= 4 and res["finite"], res


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_a_function_that_calls_the_config_pre_hook_through_a_wrapper_is_not_warned(tmp_path):
    """Before, the config ``pre_hook`` warning read the decorated object's own ``__code__`` names only: a function
    reading ``getattr(config, "pre_hook")``, a callable instance, a ``functools.wraps`` wrapper and a
    ``functools.partial`` of a function that calls the hook, and a function calling it in a helper of its module
    were each told they never call it. Now none is warned, and each gives Triton's result (2 gloo ranks)."""
    results = run_ranks(CASES, 2, ["config_pre_hook_through_layers"], env=tuner_env(tmp_path, 30), timeout=180)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        res = r.result
        assert res["warned"] == {name: [] for name in res["values"]}, res
        assert len(res["values"]) == 5, res
        assert all(v == [1.0 * res["ranks"]] for v in res["values"].values()), res


def test_a_config_pre_hook_check_says_nothing_where_the_code_cannot_be_read():
    """A callable whose code Python cannot read (a builtin's ``__call__``): no warning, where a false one would
    tell a function that calls the hook to call it; one whose code can be read and never names the hook is still
    warned."""
    import functools

    import triton

    from triton_dist_tune import ported

    space = [{"config": triton.Config({"BLOCK": 64}, pre_hook=lambda nargs: None)}]
    assert ported.config_hooks(space, functools.partial(print, end=""), "p") is None
    assert ported.config_hooks(space, lambda x, *, config: x, "f") is not None


def test_triton_key_names_given_as_key_fn_say_what_to_write():
    """``autotune(configs, ['n'])``: Triton's ``key`` in ``key_fn``'s place was "key_fn must be callable" alone."""
    import triton_dist_tune as tdt

    with pytest.raises(tdt.BadInputError) as caught:
        tdt.autotune([{"BLOCK": 64}], ["n"])(lambda x, n, *, BLOCK: x)
    text = str(caught.value)
    assert "got ['n']: triton.autotune's key=[...] names arguments" in text and "key_fn=lambda" in text, text
    assert "dtype" in text, text  # Triton adds the tensors' dtypes to its key; key_fn's key is what it returns
    with pytest.raises(tdt.BadInputError, match=r"^key_fn must be callable, got 3$"):
        tdt.autotune([{"BLOCK": 64}], 3)(lambda x, *, BLOCK: x)


@pytest.mark.triton_dependent
@pytest.mark.timeout(150)
def test_a_config_pre_hook_the_ported_function_never_calls_is_said_when_decorating(tmp_path):
    """A split-K kernel's ``triton.Config(..., pre_hook=zero_output)`` ported as docs/autotune.md says: Triton calls
    the hook before every launch, ``**config.all_kwargs()`` leaves it out, and the tuner calls no config's hook, so
    the ported function accumulated onto the caller's values (7 + 1 per rank, where Triton gives 1) with no word.
    Now a ``UserWarning`` at the decorator's line names the entries; a function that calls ``config.pre_hook``
    itself gets Triton's result and no warning."""
    results = run_ranks(CASES, 2, ["config_pre_hook"], env=tuner_env(tmp_path, 30), timeout=120)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        res = r.result
        assert len(res["unhooked"]) == 1, res
        message, category, where = res["unhooked"][0]
        assert category == "UserWarning" and where == "triton_port_cases.py", res  # the decorator's line
        assert "config_space[0]['config'], config_space[1]['config']" in message, message
        assert "**config.all_kwargs() leaves it out" in message and "config.pre_hook(" in message, message
        assert res["hooked"] == [], res
        ranks = res["ranks"]
        assert res["values"]["hooked tuning"] == res["values"]["hooked decided"] == [1.0 * ranks], res
        assert res["values"]["unhooked decided"] == [8.0 * ranks], res  # what the warning is about


def test_prune_configs_by_says_where_perf_model_and_top_k_went():
    """``autotune(..., prune_configs_by={'perf_model': ..., 'top_k': 10})``: the hint named ``prune_fn`` alone, which
    stands for ``early_config_prune``; a port of a perf model and ``top_k`` was told nothing of what replaces them."""
    import triton_dist_tune as tdt

    with pytest.raises(tdt.BadInputError) as caught:
        tdt.autotune([{"BLOCK": 64}], key_fn=lambda x: 0, prune_configs_by={"perf_model": None, "top_k": 10})
    text = str(caught.value)
    assert "prune_fn(config, *args, **kwargs)" in text and "perf_model and top_k have no counterpart" in text, text
    assert "more than 64 kept configs is searched" in text, text


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_split_k_gemm_ported_from_triton_autotune_tunes_in_context_with_tritons_semantics(tmp_path, ranks):
    """A port as a Triton user writes it: ``prune_configs_by`` (early prune, perf model, ``top_k``),
    ``reset_to_zero``, two stacked ``@triton.heuristics``, configs with their own ``pre_hook``, ``num_ctas`` and
    ``maxnreg``, a grid lambda reading ``META``, an all-reduce after the kernel; under ``TRITON_PRINT_AUTOTUNING``.
    Every rank gets one GEMM's result in the tuning call and a decided one, and the same choice among the perf
    model's top 3; the kernel keeps ``best_config`` and ``configs_timings``; group rank 0 prints Triton's summary."""
    env = {**tuner_env(tmp_path, 30), "TRITON_PRINT_AUTOTUNING": "1"}
    results = run_ranks(CASES, ranks, ["split_k"], env=env, timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        res = r.result
        assert res["right"] == [True, True], res
        assert res["tuned"] == [2, 5, 6] and res["index"] in (2, 5, 6) and res["timings"] == 3, res
        assert all(res["hooks"].values()), res
    assert len({r.result["best"] for r in results}) == 1, describe(results)
    assert "Triton autotuning for function split_k_gemm" in results[0].stderr, results[0].stderr[-2000:]
    assert all("Triton autotuning" not in r.stderr for r in results[1:]), describe(results)

