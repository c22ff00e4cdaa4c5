"""The statistics both tuners decide with: medians, distribution-free bounds, and "clearly slower".

Samples of GPU kernel times are skewed (a slow tail from interference, never a fast one) and few, so nothing here
assumes a distribution: bounds on a median come from order statistics (the sign test), and two configs are
compared on *paired* ratios, one per round in which both were timed, so that a drift of the machine between
rounds (clocks, temperature, a neighbour's job) cancels out of the comparison.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

#: the error rate of the bounds: a bound is wrong with probability at most about this (one-sided)
ALPHA = 0.125
#: differences smaller than this fraction are not worth telling apart: a config must be this much slower than the
#: leader, with confidence, to leave the race, and a runner-up within it of the choice is reported as a near-tie
INDIFFERENCE = 0.01
#: a gap this wide in every one of at least two rounds is clear without waiting for the sign test's confidence
WIDE_GAP = 0.25


def median(samples: Sequence[float]) -> float:
    """The median of a non-empty sequence."""
    return float(statistics.median(samples))


def _rank_for(n: int, alpha: float) -> int:
    """The largest k (0-based) such that P(Binomial(n, 1/2) <= k) <= alpha, or -1 if there is none: the k-th
    smallest of n samples is then a lower bound of their median with confidence 1 - alpha (sign test)."""
    total, cumulative = 2**n, 0
    k = -1
    for j in range(n + 1):
        cumulative += math.comb(n, j)
        if cumulative / total > alpha:
            break
        k = j
    return k


def median_bounds(samples: Sequence[float], alpha: float = ALPHA) -> tuple[float, float]:
    """A distribution-free interval around the median of ``samples``: each end is wrong with probability at most
    ``alpha``. With too few samples for that confidence, the smallest and largest sample."""
    ordered = sorted(samples)
    k = _rank_for(len(ordered), alpha)
    if k < 0:
        return ordered[0], ordered[-1]
    return ordered[k], ordered[-1 - k]


def spread(samples: Sequence[float]) -> float:
    """The relative half-width of the median's interval (0.02: about +-2%); 0 for a single sample."""
    if len(samples) < 2:
        return 0.0
    low, high = median_bounds(samples)
    center = median(samples)
    return (high - low) / 2 / center if center > 0 else 0.0


def near_tie(margin: float | None, spreads: Sequence[float | None]) -> bool:
    """Whether a runner-up ``margin`` behind (0.05: 5% slower) may be called a near tie: the margin is within the
    measurements' spread (the sum of the two configs' ``spreads``) or within :data:`INDIFFERENCE`. A race that could
    not yet tell two configs apart (too few rounds) is no near tie when the gap between them is wider than that."""
    return margin is not None and margin <= max(INDIFFERENCE, sum(s or 0.0 for s in spreads))


def paired_ratios(slower: Sequence[float | None], faster: Sequence[float | None]) -> list[float]:
    """``slower[r] / faster[r]`` for every round ``r`` in which both were timed (``None``: not timed)."""
    return [s / f for s, f in zip(slower, faster, strict=False) if s is not None and f is not None and f > 0]


def clearly_slower(ratios: Sequence[float]) -> bool:
    """Whether a config is slower than another, judged on their paired per-round ratios: either every one of at
    least two rounds shows a gap wider than :data:`WIDE_GAP`, or, with confidence ``1 -`` :data:`ALPHA`, the gap
    exceeds :data:`INDIFFERENCE` (the lower bound of the median ratio is above ``1 + INDIFFERENCE``; that needs
    three rounds at ``ALPHA = 0.125``). Never true after a single round."""
    if len(ratios) >= 2 and min(ratios) > 1 + WIDE_GAP:
        return True
    if _rank_for(len(ratios), ALPHA) < 0:
        return False
    return median_bounds(ratios, ALPHA)[0] > 1 + INDIFFERENCE
