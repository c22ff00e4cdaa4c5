"""Multi-rank scenarios of issue 40's blame mechanisms, run as real gloo ranks by tests/test_blame.py.

- "A config is failed only by its own error": one rank's failing sample in a steady round ends that rank's step,
  so the configs after it in the round's order get no sample on that rank; they are missing, not failed.

Usage: python blame_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Prints ``RESULT {json}``.
"""

from __future__ import annotations

import sys

import torch.distributed as dist
from _cases import case, emit, main, outcome, spend, virtual_clock

import triton_dist_tune as tdt

#: ms per call of each config on the virtual clock: config 0 is the fastest by 3x or more
COST_MS = [2.0, 8.0, 10.0, 12.0, 6.0, 14.0]
SPACE = [{"variant": v} for v in range(len(COST_MS))]


def in_steady_round() -> bool:
    """Whether the tuner runs this call as part of a steady round's sample (not the warm-up)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_steady_rounds":
            return True
        frame = frame.f_back
    return False


def rows(fn) -> list[dict]:
    """Every config's outcome in the decision (none when the tuning raised)."""
    return [o.to_json() for decision in fn.tuner.decisions.values() for o in decision.outcomes]


def sample_fails_on_one_rank(mode: str) -> None:
    """The first config of the first steady round's order (config 4: the order is seeded by the key and the space)
    passes its warm-up on both ranks, then raises on rank 1 in its sample (every later sample of it raises there
    too). No collective in the function: rank 0 samples every config of the round, rank 1 stops its step at the
    failure. ``mode``: ``exhaustive`` with ``n_repeat=1`` (a one-round race), or ``search``: a one-round screening
    race, then the finalists' race."""
    tdt.init_distributed()
    failing: list[int] = []
    sampled: list[int] = []

    @tdt.autotune(SPACE, key_fn=lambda: 0, n_warmup=1, n_repeat=1 if mode == "exhaustive" else 4, batch=1,
                  search=mode, name=f"samplefails{mode}")
    def f(*, variant):
        spend(COST_MS[variant])
        if in_steady_round():
            sampled.append(variant)
            if not failing:
                failing.append(variant)
            if dist.get_rank() == 1 and variant == failing[0]:
                raise RuntimeError(f"config {variant} fails in its sample on rank 1")
        return variant

    with virtual_clock():
        result = outcome(f)
    emit(result=result, failing=failing[0] if failing else None, sampled=sampled, outcomes=rows(f))


@case
def sample_fails_exhaustive():
    sample_fails_on_one_rank("exhaustive")


@case
def sample_fails_search():
    sample_fails_on_one_rank("search")


if __name__ == "__main__":
    main()
