"""The screening's noise, measured from the samples a search already takes.

A search screens most configs once. Where one sample's noise is as large as the landscape's steps, that one sample
decides whether a config reaches the finalists, so the search takes a second (or third) screening sample of the
configs whose order is still uncertain (:mod:`~triton_dist_tune.measure.search`). How uncertain is measured, not
assumed: every config screened more than once gives a pair of group samples of the same config, and the relative
noise of one sample is estimated from how far those pairs read apart.

The estimate is robust: the median absolute difference of the pairs' log times, scaled to a standard deviation
(for two Gaussian samples of standard deviation s, the median of ``|log a - log b|`` is 0.954 s), so that one
spiked sample (a collective that waited on a late rank, another job's burst) moves it little. A floor keeps a
quiet space (identical replays, graph-timed kernels) from an estimate of zero.

Pure and deterministic: every rank computes the same estimate from the same exchanged group samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: the median of |log a - log b| for two independent Gaussian samples of standard deviation 1: 0.6745 * sqrt(2)
_MEDIAN_ABS_PAIR = 0.6745 * math.sqrt(2)


@dataclass(frozen=True)
class NoiseEstimate:
    """The relative noise of one screening sample, from repeated samples of the same configs."""

    #: standard deviation of one sample's log time (0.05: about 5%)
    sigma: float
    #: configs screened more than once (the pairs it rests on)
    pairs: int

    def text(self) -> str:
        """One line for the logs and the decision's record."""
        return f"screening noise {100 * self.sigma:.1f}% per sample (from {self.pairs} repeated config(s))"


def estimate_noise(history: Mapping[int, Sequence[float] | None], floor: float) -> NoiseEstimate | None:
    """The noise of one sample from every config of ``history`` (index -> its group samples, None: failed) that has
    two or more positive samples (its first two are the pair); None when no config has two. Never below ``floor``."""
    gaps = sorted(abs(math.log(s[0]) - math.log(s[1])) for _, s in sorted(history.items())
                  if s is not None and len(s) >= 2 and s[0] > 0 and s[1] > 0)
    if not gaps:
        return None
    middle = len(gaps) // 2
    median = gaps[middle] if len(gaps) % 2 else (gaps[middle - 1] + gaps[middle]) / 2
    return NoiseEstimate(max(floor, median / _MEDIAN_ABS_PAIR), len(gaps))


def central(samples: Sequence[float]) -> float:
    """A config's screened time from its samples: the median (two: their mean)."""
    ordered = sorted(samples)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
