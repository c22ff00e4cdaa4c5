"""A Triton-distributed user's review, its four leftovers: a config that raises is said on the console (group rank 0
only, once per distinct error, never a flood), decided configs print readably, a config that lacks a required
parameter and a call no config can complete are named, and a builtin decorated is a clear error. Real ranks (gloo),
real Triton kernels in the interpreter; the scenarios are in tests/scenarios/console_cases.py."""

from __future__ import annotations

import functools
import inspect
import re

import pytest
from harness import HERE, base_env, describe, run_python, run_ranks, tuner_env

import triton_dist_tune as tdt
from triton_dist_tune.errors import BadInputError

CASES = HERE / "scenarios" / "console_cases.py"
WARNING = "failed and were left out of the choice"


def ranks(case: str, n: int, tmp_path) -> list:
    results = run_ranks(CASES, n, [case], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    return results


def alone(case: str, tmp_path):
    done = run_python([CASES, case], base_env(tuner_env(tmp_path, 30)), timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def between(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end)]


@pytest.mark.timeout(200)
def test_configs_that_raise_are_said_once_on_rank_0_and_the_choice_is_unchanged(tmp_path):
    """Before, configs 3, 5 and 7 raising were said only in the rank logs: the console heard nothing. Now group rank 0
    warns once, after the first key's decision: one line per distinct error (config 5's ValueError naming config 7
    too, config 3's TypeError), each with the config's description; the second key, whose configs raise the same
    errors, says nothing more; rank 1 says nothing. The ranks that raised alike are named once (``ranks [0, 1]``).
    Which configs failed, and the choice, are the same on both ranks (every config ran; the failed ones are left
    out)."""
    results = ranks("failing_configs", 2, tmp_path)
    zero, one = (r.stderr for r in results)
    first = between(zero, "MARK first key", "MARK second key")
    assert first.count(WARNING) == 1, zero[-3000:]
    assert "[scale key=96] 3 of the 8 config(s) tried failed" in first, first
    assert re.search(r"config 5 \{cfg: Config\(\{BLOCK: 64, .*mode: 'strict'\}: ranks \[0, 1\]: ValueError: BLOCK 64 "
                     r"is too wide for strict mode \(and config\(s\) 7, with the same error\)", first), first
    assert re.search(r"config 3 \{cfg: Config\(\{BLOCK: 32, .*: ranks \[0, 1\]: TypeError: scale\(\) got an unexpected "
                     r"keyword argument 'strict_warps'", first), first
    assert str(tmp_path / "logs") in first, first
    assert WARNING not in between(zero, "MARK second key", "MARK done"), zero[-3000:]
    assert WARNING not in one and "FAILED" not in one, one[-3000:]
    a, b = (r.result for r in results)
    assert a["failed"] == b["failed"] == {"96": [3, 5, 7], "40": [3, 5, 7]}, (a, b)
    assert a["decided"] == b["decided"] and set(a["decided"].values()) <= {0, 1, 2, 4, 6}, (a, b)
    assert a["ran"] == list(range(8)), a


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_a_contextual_config_that_raises_is_said_once_on_rank_0(tmp_path):
    """``contextual_autotune``: a stock kernel's config whose pre_hook raises was left out, said in the rank logs
    only. Now rank 0 warns once after the (kernel, key)'s decision, naming the config and its error; rank 1 says
    nothing; both ranks keep the same choice, config 1 failed on both."""
    results = ranks("contextual_failing_config", 2, tmp_path)
    zero, one = (r.stderr for r in results)
    assert zero.count(WARNING) == 1, zero[-3000:]
    assert re.search(r"\[\S*scaled kernel=_tiled_scale key=\(200, .*\] 1 of the 3 config\(s\) tried failed", zero), zero
    assert re.search(r"config 1 Config\(\{BLOCK: 64, .*\}\): ranks \[0, 1\]: ValueError: BLOCK 64 needs an aligned "
                     r"buffer\n", zero), zero[-3000:]
    assert WARNING not in one, one[-3000:]
    a, b = (r.result for r in results)
    assert a == b and a["states"][1] == "failed" and a["chosen"] != 1 and a["y0"] == 4.0, (a, b)


@pytest.mark.timeout(200)
def test_many_distinct_errors_are_a_few_lines_not_a_flood(tmp_path):
    """11 configs raising 11 distinct errors: one warning of 5 lines (the heading, 3 errors, a count of the other 8),
    where a line per config (or per rank and config) would flood the console."""
    err = alone("many_errors", tmp_path).stderr
    assert err.count(WARNING) == 1, err[-3000:]
    warning = err[err.index("triton_dist_tune: [fragile key=4]"):].splitlines()
    assert warning[0].startswith("triton_dist_tune: [fragile key=4] 11 of the 12 config(s) tried failed"), warning
    assert [line.split(":")[0] for line in warning[1:4]] == ["  config 1 {variant", "  config 2 {variant",
                                                             "  config 3 {variant"], warning
    assert "RuntimeError: variant 1 is not built for this device" in warning[1], warning
    assert warning[4] == "  and 8 more config(s) with 8 other error(s)", warning
    assert "variant 5 " not in err, err[-3000:]


@pytest.mark.timeout(200)
def test_a_verbose_tuning_says_the_failures_in_its_table_alone(tmp_path):
    """``autotune_verbose=True`` prints the table, whose rows name each failed config and its error: no warning
    repeats them."""
    err = alone("verbose_table", tmp_path).stderr
    assert "Triton autotuning for function scale" in err and "failed" in err, err[-3000:]
    assert "ValueError: BLOCK 64 is too wide" in err and WARNING not in err, err[-3000:]


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_decided_configs_print_their_triton_configs_readably(tmp_path):
    """Before, ``fn.tuner.decided`` and ``fn.best_configs`` printed ``<triton.runtime.autotuner.Config object at
    0x...>``. Now a decided config (a dict, holding the very Config objects of the space, which the function is
    given) prints as the logs, the console and the cache show it (``space.describe``): each Config by its kwargs and
    launch options, Triton's class untouched. (Before the one printer, each Config printed by Triton's own ``str``,
    ``Config(BLOCK_M: 64, BLOCK_N: 32, num_warps: 4, num_ctas: 1, num_stages: 2, maxnreg: None, ...)``, another text
    than the log's for the same config.)"""
    res = alone("printed_configs", tmp_path)
    out = [line for line in res.stdout.splitlines() if line.startswith("RESULT ")]
    import json
    got = json.loads(out[-1][len("RESULT "):])
    shown = "{cfg: Config({BLOCK_M: 64, BLOCK_N: 32, num_ctas: 1, num_stages: 2, num_warps: 4})}"
    assert got["decided"] == got["best"] == "{4: " + shown + "}", got
    assert got["space"] == "[" + shown + "]" and got["one"] == shown, got
    assert got["triton"].startswith("BLOCK_M: 64, BLOCK_N: 32, num_warps: 4"), got  # Triton's own str, untouched
    assert " object at 0x" not in str(got), got
    assert got["same"] and got["plain"], got
    import triton
    assert " object at 0x" in repr(triton.Config({"BLOCK_M": 64})), "Triton's own repr is left as it is"


def test_a_config_lacking_a_required_parameter_others_set_is_refused_when_decorating():
    """Before, config 1 (no ``num_warps``, which ``f`` requires and config 0 sets) was decorated, then raised a
    TypeError at every run and was dropped, said in the rank log only. Now decorating names it, the parameter and
    what to do; a parameter every config leaves to the call, or one with a default, is no mistake."""
    with pytest.raises(BadInputError) as caught:
        @tdt.autotune([{"BLOCK": 64, "num_warps": 4}, {"BLOCK": 128}], key_fn=lambda x: None)
        def f(x, *, BLOCK, num_warps):
            return x
    text = str(caught.value)
    assert "config_space[1] {BLOCK: 128} does not set 'num_warps', a required keyword-only parameter of f()" in text
    assert "config_space[0] sets" in text and "give it a default" in text, text
    assert "fails every run that measures it" in text and "not even with autotune_allow_arg_overwrite=True" in text, \
        text  # before: "could never run (a call may not pass a tuned parameter)", untrue under that flag's call

    @tdt.autotune([{"BLOCK": 64, "num_warps": 4}, {"BLOCK": 128}], key_fn=lambda x: None)
    def g(x, *, ctx, BLOCK, num_warps=4):
        return x

    def warps_default(inner):  # a wrapper that supplies what its function requires: the call's signature is its own
        @functools.wraps(inner)
        def wrapper(*args, **kwargs):
            kwargs.setdefault("num_warps", 4)
            return inner(*args, **kwargs)

        return wrapper

    @tdt.autotune([{"BLOCK": 64, "num_warps": 8}, {"BLOCK": 128}], key_fn=lambda x: None)
    @warps_default
    def h(x, *, BLOCK, num_warps):
        return x


@pytest.mark.timeout(200)
def test_the_callers_overwritten_value_never_reaches_a_measured_run(tmp_path):
    """Why a config leaving out a parameter others set is refused even where calls pass
    ``autotune_allow_arg_overwrite=True``: the measured runs get each config's own values, never the caller's
    (config ``{}`` ran with ``block`` at its default, None, and failed); the caller's ``block=3`` is used once, in
    the call that runs the chosen config (2 * 3)."""
    done = alone("overwrite_never_measured", tmp_path)
    import json
    got = json.loads([line for line in done.stdout.splitlines() if line.startswith("RESULT ")][-1][len("RESULT "):])
    assert got["out"] == 6 and got["decided"] == {"2": {"block": 64}}, got
    assert got["given"].count("3") == 1 and got["given"][-1] == "3", got
    assert "None" in got["given"] and set(got["given"]) == {"64", "None", "3"}, got


@pytest.mark.timeout(200)
def test_a_call_lacking_a_required_argument_no_config_gives_is_named_on_every_rank_before_any_run(tmp_path):
    """Every config sets only ``gemm_config``; ``ag_gemm`` needs ``ctx``, which rank 1's call leaves out. Before, every
    config ran and failed with a TypeError (rank 0 waiting in each), then AllConfigsFailedError. Now every rank raises
    the same BadInputError naming ``ctx`` and rank 1, before any config runs; the next call, with ``ctx``, tunes."""
    results = ranks("missing_argument", 2, tmp_path)
    for r in results:
        first, second = r.results
        assert first["runs"] == 0, describe(results)
        assert "rank 1: this call lacks 'ctx', a required argument of ag_gemm() that no config sets" in first["error"]
        assert "pass it in the call (ctx=...)" in first["error"], first
        assert second["second"] == 2.0 and second["runs"] > 0, describe(results)


@pytest.mark.timeout(200)
def test_a_wrapper_that_supplies_the_argument_is_not_second_guessed(tmp_path):
    """The call check binds the call to the decorated callable's own signature: a ``functools.wraps`` wrapper that
    passes ``ctx`` itself tunes (its wrapped function's signature requires ``ctx``, the call does not give it)."""
    done = alone("wrapper_supplies_argument", tmp_path)
    assert '"out": 3.0' in done.stdout, done.stderr[-3000:]


def _no_signature_builtin():
    for candidate in (max, min, getattr, iter, next, vars):
        try:
            inspect.signature(candidate)
        except ValueError:
            return candidate
    pytest.skip("this Python reads a signature of every builtin tried")


def test_a_builtin_without_a_signature_is_a_clear_error_when_decorating():
    """Before, ``autotune(...)(max)`` raised inspect's bare ``ValueError: no signature found for builtin``. Now a
    BadInputError (a ValueError) names the decorator, the builtin and what to decorate instead; a builtin with a
    signature (``len``) is checked as any function is (a config key it does not accept is named)."""
    builtin = _no_signature_builtin()
    with pytest.raises(BadInputError) as caught:
        tdt.autotune([{"choice": 1}], key_fn=lambda *a: None)(builtin)
    text = str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert text.startswith(f"autotune cannot tune {builtin.__name__}: it is a builtin whose parameters Python "
                           "cannot read"), text
    assert "Decorate a Python function that calls it" in text, text
    with pytest.raises(BadInputError, match=r"config_space\[0\] sets \['choice'\], which len\(\) does not accept"):
        tdt.autotune([{"choice": 1}], key_fn=lambda *a: None)(len)
