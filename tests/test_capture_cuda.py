"""A tuning timed on the device, on a real GPU, where some configs cannot be captured in a CUDA graph (skipped
without CUDA; run by the GPU calls of issue 41): the config whose calls read a value on the host fails alone and the
others are timed from their graphs, wherever it comes in the order; a function no config of which can be captured is
timed eagerly (triton_dist_tune/measure/sampling.py, ``Sampling._capture``)."""

from __future__ import annotations

import os
import tempfile

import torch

import triton_dist_tune as tdt

try:
    import pytest
except ImportError:  # a GPU host without pytest runs this file as a script (the bottom of it)
    pytest = None

if pytest is not None:
    pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
    timeout = pytest.mark.timeout(180)
else:
    def timeout(test):
        return test


def _tuned(bad: set[int], name: str):
    """A short call (device time applies: well under 1 ms) whose configs in ``bad`` read a value on the host."""
    @tdt.autotune([{"v": v} for v in range(4)], key_fn=lambda x: tuple(x.shape), n_warmup=1, n_repeat=4, name=name)
    def mm(x, *, v):
        y = x @ x
        if v in bad:
            y = y * float(y[0, 0].item() != 0.0)  # a host read: a capture of it fails
        return y * (v + 1)

    return mm


def _decision(bad: set[int], name: str):
    folder = tempfile.mkdtemp()
    os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = folder
    os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"] = os.path.join(folder, "logs")
    tuned = _tuned(bad, name)
    x = torch.full((256, 256), 0.01, device="cuda")
    tuned(x)
    torch.cuda.synchronize()
    (decision,) = tuned.tuner.decisions.values()
    return decision


@timeout
def test_a_config_that_cannot_be_captured_fails_alone_and_the_others_are_timed_from_graphs():
    # before: the tuning switched to eager timing at that config (the first here, or the third): in a search's later
    # stages, eager times were then ranked against the earlier stages' device times
    for bad in (0, 2):
        decision = _decision({bad}, f"capture_one_bad_{bad}")
        states = [(o.state, o.error) for o in decision.outcomes]
        assert decision.clock == "graph", (bad, decision.clock, states)
        assert states[bad][0] == "failed" and "cannot be captured in a CUDA graph" in states[bad][1], states
        assert all(s == "measured" or s == "stopped" for i, (s, _) in enumerate(states) if i != bad), states


@timeout
def test_a_function_that_cannot_be_captured_at_all_is_timed_eagerly():
    decision = _decision({0, 1, 2, 3}, "capture_all_bad")
    states = [(o.state, o.error) for o in decision.outcomes]
    assert decision.clock == "eager", (decision.clock, states)
    assert all(s in ("measured", "stopped") for s, _ in states), states


if __name__ == "__main__":  # on a GPU host without pytest's plugins: python tests/test_capture_cuda.py
    test_a_config_that_cannot_be_captured_fails_alone_and_the_others_are_timed_from_graphs()
    test_a_function_that_cannot_be_captured_at_all_is_timed_eagerly()
    print("test_capture_cuda: 2 passed")
