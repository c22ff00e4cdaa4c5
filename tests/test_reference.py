"""The ``ref_prog`` check (triton_dist_tune.measure.reference): torch.testing.assert_close's verdict, without its
imports."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from harness import ROOT, base_env

from triton_dist_tune.measure.reference import Reference, difference

nan, inf = float("nan"), float("inf")


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


CASES = [
    ("equal", t([1.0, 2.0]), t([1.0, 2.0]), None),
    ("float32 inside torch's tolerance", t([1.0 + 1e-6, 2.0]), t([1.0, 2.0]), None),
    ("float32 outside it", t([1.0 + 1e-4, 2.0]), t([1.0, 2.0]), None),
    ("float16 inside", t([1.0, 2.001], torch.float16), t([1.0, 2.0], torch.float16), None),
    ("float16 outside", t([1.0, 2.01], torch.float16), t([1.0, 2.0], torch.float16), None),
    ("bfloat16 inside", t([1.0, 256.0], torch.bfloat16), t([1.0, 258.0], torch.bfloat16), None),
    ("bfloat16 outside", t([1.0, 250.0], torch.bfloat16), t([1.0, 258.0], torch.bfloat16), None),
    ("float64", t([1.0 + 1e-9], torch.float64), t([1.0], torch.float64), None),
    ("NaN in both", t([nan, 1.0]), t([nan, 1.0]), None),
    ("NaN in one", t([nan, 1.0]), t([0.0, 1.0]), None),
    ("inf in both", t([inf, -inf]), t([inf, -inf]), None),
    ("inf against -inf", t([inf]), t([-inf]), None),
    ("ints equal", t([1, 2], torch.int64), t([1, 2], torch.int64), None),
    ("ints differ", t([1, 2], torch.int32), t([1, 3], torch.int32), None),
    ("ints within the user's tolerance", t([1, 2], torch.int64), t([1, 3], torch.int64), (0.5, 0.0)),
    ("bools", t([True, False], torch.bool), t([True, True], torch.bool), None),
    ("complex", t([1 + 1j], torch.complex64), t([1 + 1.1j], torch.complex64), None),
    ("zero-dim", torch.tensor(1.5), torch.tensor(1.5), None),
    ("zero-dim differ", torch.tensor(1.5), torch.tensor(2.5), None),
    ("empty", torch.zeros(0, 3), torch.zeros(0, 3), None),
    ("shapes differ", torch.zeros(2, 1), torch.zeros(2), None),
    ("dtypes differ", torch.zeros(2, dtype=torch.float16), torch.zeros(2), None),
    ("the user's tolerance lets it through", t([1.0, 2.1]), t([1.0, 2.0]), (0.06, 0.0)),
    ("the user's atol alone", t([1.0, 2.1]), t([1.0, 2.0]), (0.0, 0.05)),
    ("None and a tensor, as a function writing its output returns", (None, t([1.0])), (None, t([1.0])), None),
    ("None against a tensor", (None, t([1.0])), (t([1.0]), t([1.0])), None),
    ("a list against a tuple", [t([1.0])], (t([1.0]),), None),
    ("lengths differ", (t([1.0]),), (t([1.0]), t([1.0])), None),
    ("nested, wrong deep inside", (t([1.0]), [t([2.0]), t([3.0])]), (t([1.0]), [t([2.0]), t([3.5])]), None),
    ("dicts", {"a": t([1.0]), "b": t([2.0])}, {"b": t([2.0]), "a": t([1.0])}, None),
    ("dict keys differ", {"a": t([1.0])}, {"b": t([1.0])}, None),
    ("numbers (torch.testing's path)", 1.0, 1.0 + 1e-9, None),
    ("numbers differ", 1.0, 1.5, None),
    ("a tensor against a number", t([1.0]), 1.0, None),
    ("float8 equal (torch.testing's bitwise path)", t([1.0, 2.0]).to(torch.float8_e4m3fn),
     t([1.0, 2.0]).to(torch.float8_e4m3fn), None),
    ("float8 differ", t([1.0, 2.0]).to(torch.float8_e4m3fn), t([1.0, 2.5]).to(torch.float8_e4m3fn), None),
    ("uint8", t([1, 2], torch.uint8), t([1, 3], torch.uint8), None),
    ("int16 within the user's tolerance", t([100, 2], torch.int16), t([101, 2], torch.int16), (0.02, 0.0)),
    ("a Parameter (a subclass: torch.testing's path)", torch.nn.Parameter(t([1.0])), torch.nn.Parameter(t([1.5])),
     None),
]


@pytest.mark.parametrize("name, actual, expected, tolerance", CASES, ids=[c[0] for c in CASES])
def test_the_verdict_is_torch_testings(name, actual, expected, tolerance):
    rtol, atol = tolerance or (None, None)
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, check_device=False)
        theirs = None
    except (AssertionError, TypeError, ValueError) as exc:
        theirs = str(exc)
    ours = difference(actual, expected, rtol, atol, "the result")
    assert (ours is None) == (theirs is None), (ours, theirs)


def test_a_difference_names_where_it_is_how_many_and_the_worst_element():
    expected = torch.zeros(4, 5)
    actual = expected.clone()
    actual[1, 2], actual[3, 4] = 0.5, nan
    said = Reference((None, expected), None, None).mismatch((None, actual))
    assert said.startswith("wrong result: the result[1]: 2 of 20 elements differ; the worst at index (3, 4): nan"), said
    actual[3, 4] = 0.0
    said = Reference((None, expected), None, None).mismatch((None, actual))
    assert "1 of 20 elements differ; the worst at index (1, 2): 0.5, the reference 0.0 (allowed 1e-05)" in said, said
    assert Reference(expected, None, None).mismatch(expected.double()) == (
        "wrong result: the result: dtype torch.float64, the reference's torch.float32")


def test_a_result_of_another_kind_than_the_references_says_both_kinds():
    """A ref_prog that returns None against a tensor result read "the result: None mismatch: tensor([2., 2., ...",
    cut mid-print, and a list against a tensor "No comparison pair was able to handle inputs ...": now the kinds."""
    result = torch.full((100,), 2.0)
    said = Reference(None, None, None).mismatch(result)
    assert said == "wrong result: the result: a tensor of shape (100,) (torch.float32), the reference None", said
    said = Reference(result, None, None).mismatch([1, 2])
    assert said == "wrong result: the result: a list of 2 items, the reference a tensor of shape (100,) " \
                   "(torch.float32)", said
    assert Reference([result], None, None).mismatch((result,)) is None  # a list and a tuple: item by item, as before


@pytest.mark.timeout(60)
def test_checking_tensors_imports_nothing_torch_testing_would():
    """torch.testing.assert_close's first call imports DTensor, sympy and mpmath (1.1 s of CPU here), which every
    process with a ref_prog paid before its first tuning; a fresh interpreter, since this one may have them."""
    code = ("import sys, torch\n"
            "from triton_dist_tune.measure.reference import Reference\n"
            "ref = Reference((None, torch.ones(3, 4), [torch.arange(3)]), None, None)\n"
            "assert ref.mismatch((None, torch.ones(3, 4), [torch.arange(3)])) is None\n"
            "assert ref.mismatch((None, torch.zeros(3, 4), [torch.arange(3)])) is not None\n"
            "print(sorted(m for m in ('sympy', 'mpmath', 'torch.distributed.tensor') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=base_env(), capture_output=True, text=True,
                          timeout=50)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.timeout(120)
def test_a_config_that_writes_a_wrong_undeclared_output_fails_its_ref_prog_check(tmp_path, monkeypatch):
    # mm(a, b, c) writes c and returns None: the reference and each checked run compared only (None,) and the
    # declared outputs, so a config adding 100 to c passed and was chosen. The undeclared arguments ref_prog wrote
    # are compared too, where the checked run wrote them (NaN matching NaN: parts neither wrote)
    import torch

    import triton_dist_tune as tdt

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_LOG_DIR", str(tmp_path / "logs"))

    def ref(a, b, c, scratch):
        torch.matmul(a, b, out=c)
        scratch.fill_(1.0)  # written by ref_prog alone: no output of the function, not compared

    @tdt.autotune([{"wrong": 0}, {"wrong": 1}], key_fn=lambda a, b, c, scratch: 0, ref_prog=ref, n_repeat=2)
    def mm(a, b, c, scratch, *, wrong):
        torch.matmul(a, b, out=c)
        if wrong:
            c.add_(100.0)

    a, b = torch.randn(16, 16), torch.randn(16, 16)
    c, scratch = torch.full((16, 16), float("nan")), torch.zeros(4)
    mm(a, b, c, scratch)
    (decision,) = mm.tuner.decisions.values()
    states = {o.index: (o.state, o.error) for o in decision.outcomes}
    assert states[0][0] == "measured" and states[1][0] == "failed", states
    assert "wrong result: the result['c']" in states[1][1], states
    assert decision.index == 0


@pytest.mark.timeout(120)
def test_a_wrong_result_names_the_argument_that_differs_and_suspects_ref_prog_when_every_config_fails_alike(
        tmp_path, monkeypatch):
    # The compared value is (what the function returns, *the restore_value / reset_to_zero tensors), and the verdict
    # named its items by position: a function that scales x in place and returns it, declared restore_value=["x"],
    # checked against a ref_prog that returns the scaled tensor and leaves x alone (as TileLang's and most
    # references are written), failed every config with "the result[1]: ... differ" (x, which the user never wrote
    # as a result) and "the cause is most likely the function or its environment", although both configs are right
    import torch

    import triton_dist_tune as tdt

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_LOG_DIR", str(tmp_path / "logs"))

    @tdt.autotune([{"chunks": 1}, {"chunks": 2}], key_fn=lambda x: 0, ref_prog=lambda x: x * 2,
                  restore_value=["x"], n_repeat=2)
    def scale_(x, *, chunks):
        for part in x.chunk(chunks):
            part.mul_(2)
        return x

    with pytest.raises(tdt.AllConfigsFailedError) as caught:
        scale_(torch.ones(8))
    text = str(caught.value)
    assert "argument x (restore_value)" in text and "the result[1]" not in text, text
    assert "most likely ref_prog" in text, text

    # the returned value is "the result" (its own items indexed as before: "the result[0]" of a returned tuple)
    @tdt.autotune([{"wrong": 0}, {"wrong": 1}], key_fn=lambda x: 0, ref_prog=lambda x: (x * 2, x + 1),
                  n_repeat=2)
    def pair(x, *, wrong):
        return x * 2 + wrong, x + 1

    pair(torch.ones(8))
    (decision,) = pair.tuner.decisions.values()
    states = {o.index: (o.state, o.error) for o in decision.outcomes}
    assert states[1][0] == "failed" and "wrong result: the result[0]: 8 of 8 elements differ" in states[1][1], states
    assert decision.index == 0
