"""Device-time captures on a real GPU (skipped without CUDA; run by the GPU calls of issue 41): graphs captured with
``capture_begin`` / ``capture_end`` into one pool per race, race after race of one tuning, and the memory given back
when the tuning ends (triton_dist_tune/measure/graphs.py)."""

from __future__ import annotations

import torch

from triton_dist_tune.measure.graphs import Graphs

try:
    import pytest
except ImportError:  # a GPU host without pytest runs this file as a script (the bottom of it)
    pytest = None

if pytest is not None:
    pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
    timeout = pytest.mark.timeout(120)
else:
    def timeout(test):
        return test


def _config(scale: float):
    a = torch.full((512, 512), 0.5, device="cuda")  # no random draw: see the second test

    def call() -> torch.Tensor:
        return (a @ a) * scale  # allocates its output inside the capture: from the race's pool

    return call


@timeout
def test_graphs_capture_race_after_race_and_the_tuning_gives_its_memory_back():
    # a pool whose graphs are all gone cannot take a capture again: one pool for the whole tuning failed every
    # capture after the first race with torch's "it->second->use_count > 0 INTERNAL ASSERT FAILED" (H200, torch
    # 2.11), and the README's MoE campaign was timed eagerly from its second stage on
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    reserved = torch.cuda.memory_reserved()
    graphs = Graphs(calls=8)
    calls = [_config(s) for s in (1.0, 2.0, 3.0)]
    for _race in range(3):
        for index, call in enumerate(calls):
            assert graphs.capture(index, call), graphs.error
            assert not graphs.warms_next  # only the tuning's first capture runs the call before capturing
            graphs.replay(index)()
        torch.cuda.synchronize()
        assert set(graphs.device_ms) == {0, 1, 2} and all(ms > 0 for ms in graphs.device_ms.values())
        graphs.release()
    graphs.close()
    torch.cuda.synchronize()
    assert torch.cuda.memory_reserved() <= reserved + 64 * 2**20  # the inputs (3 MB) and no graph pools


@timeout
def test_a_function_that_reads_a_value_cannot_be_captured_and_random_draws_and_captures_work_after():
    graphs = Graphs(calls=2)
    a = torch.full((256, 256), 0.5, device="cuda")

    def reads_a_value() -> float:
        return float((a @ a).sum().item())  # a host read: not capturable

    assert not graphs.capture(0, reads_a_value)
    assert graphs.error
    # a failed capture left torch's CUDA generators capturing: on torch 2.11 the next torch.randn on the GPU raised
    # "Offset increment outside graph capture encountered unexpectedly" (torch.cuda.graph's path too:
    # benchmarks/gpu/failed_capture_rng.py); the user's program must draw random numbers after a tuning
    assert torch.randn(4, device="cuda").isfinite().all()
    graphs.close()
    fresh = Graphs(calls=2)
    assert fresh.capture(1, _config(1.0)), fresh.error
    fresh.close()


@timeout
def test_a_config_placed_again_allocates_its_outputs_elsewhere_and_every_placement_replays_its_calls():
    # the race times a settled leader at several output placements (measure/graphs.py, "Placements"): each must put
    # the outputs the function allocates at another address, and replay the same calls
    a = torch.full((512, 512), 0.5, device="cuda")
    sink = torch.zeros(1, device="cuda")  # an argument the caller passed: it stays where it is
    seen: list[int] = []

    def call() -> torch.Tensor:
        out = a @ a  # allocated by the function, dropped by the tuner after the call
        seen.append(out.data_ptr())
        sink.copy_(out[0, :1])
        return out

    graphs = Graphs(calls=1)
    assert graphs.capture(0, call), graphs.error
    for _ in range(3):
        assert graphs.place(0, call)
    assert graphs.placements(0) == 4 and graphs.placements(1) == 0
    assert len(set(seen[-4:])) == 4, seen  # the warm-up call before the first capture ran eagerly: not counted
    for placement in range(4):
        sink.zero_()
        graphs.replay(0, placement)()
        torch.cuda.synchronize()
        assert float(sink[0]) == 128.0  # 512 x 0.25: this placement's graph ran the calls
    graphs.close()


@timeout
def test_placements_stop_before_they_would_hold_more_than_their_share_of_the_device_memory():
    # each placement is a pool of its own that keeps what the function allocates: a 64 MB scratch per call here,
    # with a share of the device's memory that holds one placement's and not two
    from triton_dist_tune.measure import graphs as graphs_module

    a = torch.full((64, 64), 0.5, device="cuda")

    def call() -> torch.Tensor:
        scratch = torch.empty(16 * 2**20, device="cuda")  # 64 MB, allocated and dropped by the function
        scratch[:1].copy_(a[0, :1])
        return a @ a

    saved = graphs_module.PLACEMENT_MEMORY_SHARE
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    graphs_module.PLACEMENT_MEMORY_SHARE = 100 * 2**20 / total  # 100 MB
    try:
        graphs = Graphs(calls=1)
        assert graphs.capture(0, call), graphs.error
        assert graphs.place(0, call) and graphs.placed_bytes >= 64 * 2**20
        assert not graphs.place(0, call) and not graphs.placing  # a second would take it past 100 MB
        assert graphs.placements(0) == 2
        graphs.close()
    finally:
        graphs_module.PLACEMENT_MEMORY_SHARE = saved


@timeout
def test_each_device_has_its_own_clock_and_a_cold_sample_flushes_that_devices_l2():
    # the clock (and its 256 MiB L2 flush buffer) was cached per device type: a process tuning on a second GPU
    # after the first flushed the first one's L2 before each cold sample. One GPU checks the flush lands on the
    # current device; two check the second device gets a clock of its own (not run on one GPU)
    from triton_dist_tune.measure.clocks import make_clock

    devices = min(torch.cuda.device_count(), 2)
    clocks = []
    for device in range(devices):
        torch.cuda.set_device(device)
        clock = make_clock()
        clock.flush()
        assert clock._flush_buffer.device == torch.device("cuda", device), clock._flush_buffer.device
        clocks.append(clock)
    assert len({id(c) for c in clocks}) == devices
    torch.cuda.set_device(0)
    assert make_clock() is clocks[0]


if __name__ == "__main__":  # on a GPU host without pytest's plugins: python tests/test_graphs_cuda.py
    test_graphs_capture_race_after_race_and_the_tuning_gives_its_memory_back()
    test_a_function_that_reads_a_value_cannot_be_captured_and_random_draws_and_captures_work_after()
    test_a_config_placed_again_allocates_its_outputs_elsewhere_and_every_placement_replays_its_calls()
    test_placements_stop_before_they_would_hold_more_than_their_share_of_the_device_memory()
    test_each_device_has_its_own_clock_and_a_cold_sample_flushes_that_devices_l2()
    print("test_graphs_cuda: 5 passed")
