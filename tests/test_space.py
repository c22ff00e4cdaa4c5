"""Config spaces: validation and descriptions that are stable across processes."""

from __future__ import annotations

import pytest
import triton

import triton_dist_tune as tdt
from triton_dist_tune.space import check_no_clash, describe, validate_space


def test_descriptions_are_stable_and_ignore_identity():
    a = triton.Config({"BLOCK": 64, "G": 8}, num_warps=4, num_stages=3)
    b = triton.Config({"G": 8, "BLOCK": 64}, num_warps=4, num_stages=3)
    assert describe({"cfg": a, "x": 1}) == describe({"x": 1, "cfg": b})
    assert describe({"cfg": a}) != describe({"cfg": triton.Config({"BLOCK": 64, "G": 8}, num_warps=8)})
    assert "0x" not in describe({"f": len, "t": (1, [2.5, "s"])})


@pytest.mark.parametrize("space, message", [
    ([], "empty"), ({"a": 1}, "list of dicts"), ("ab", "list of dicts"), ([1], "dict of keyword"),
    ([{"autotune_pg": 1}], "call keywords"), ([{1: 2}], "not keyword names"),
])
def test_bad_spaces_are_rejected(space, message):
    with pytest.raises(tdt.BadInputError, match=message):
        validate_space(space)


def test_a_string_value_that_looks_like_an_address_is_the_users_text_not_an_address():
    # before: {"mask": "0xffffffff"} was refused as a config whose text "holds a memory address"
    assert validate_space([{"mask": "0xffffffff"}, {"mask": "0x0000ffff", "cfg": {"tag": "at 0x1234567"}}])
    with pytest.raises(tdt.BadInputError, match="memory address"):
        validate_space([{"fn": object()}])
    with pytest.raises(tdt.BadInputError, match="memory address"):
        validate_space([{"nested": {"deeper": [object()]}}])


def test_tritons_defaults_for_the_argument_options_mean_none():
    # before: reset_to_zero=None / restore_value=None (triton.autotune's defaults) were a BadInputError
    tuned = tdt.autotune(config_space=[{"v": 1}], key_fn=lambda x: 0, reset_to_zero=None, restore_value=None)(
        lambda x, *, v: x + v)
    assert tuned.tuner.options.reset_to_zero == () and tuned.tuner.options.restore_value == ()


def test_clash_with_call_keywords():
    check_no_clash({"a": 1}, {"b": 2})
    with pytest.raises(tdt.BadInputError, match=r"\['a'\]"):
        check_no_clash({"a": 1}, {"a": 2})


@pytest.mark.parametrize("options, message", [
    ({"n_repeat": 0}, "n_repeat"), ({"early_stop": 0.5}, "early_stop"), ({"rtol": 1e-3}, "rtol and atol"),
    ({"restore_value": ["nope"]}, "not parameters"), ({"key_fn": 3}, "key_fn"),
    ({"rtol": 1e-3, "atol": 1e-3}, "no ref_prog is given"),  # tolerances of a check that never runs
])
def test_bad_options_are_rejected_at_decoration(options, message):
    kwargs = {"config_space": [{"v": 1}], "key_fn": lambda x: 0, **options}
    with pytest.raises(tdt.BadInputError, match=message):
        tdt.autotune(**kwargs)(lambda x, *, v: x)


def test_single_process_tuning_and_hot_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_LOG_DIR", str(tmp_path / "logs"))
    calls = []

    @tdt.autotune([{"v": 1}, {"v": 2}], key_fn=lambda x: x, n_warmup=0, n_repeat=1, batch=1)
    def f(x, *, v):
        """doc"""
        calls.append(v)
        return x * v

    assert f.__name__ == "f" and f.__doc__ == "doc"
    assert f(3) in (3, 6)
    measured = len(calls)
    assert measured == 5  # one sample of each config (a lead-in call and batch=1), then the call itself
    f(3)
    assert len(calls) == measured + 1  # decided: no more measuring
    assert f(5, autotune=False) == 5 and calls[-1] == 1  # the first config, untuned
    assert 5 not in f.tuner.decided
