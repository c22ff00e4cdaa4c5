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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ..records import LEAST, MEDIAN, Outcome
from ..stats import median

#: the noise of one race sample (relative) above which a config's race time is the least of its samples, not their
#: median. Heavy noise is one-sided and comes in bursts: a call that waited on a late rank or a descheduled process
#: reads slow, never fast. Recorded behind a gloo all-reduce on 2 CPU ranks (``benchmarks/gloo_estimators.py``),
#: a clean sample read its config's time + 0.4-0.6 ms and a delayed one + 3-5 ms, on 38-75% of samples; from 3 /
#: 6 / 12 samples per config the least ranked 48 configs at a Spearman correlation of 0.68 / 0.92 / 0.98 with the
#: landscape, the lower quartile at 0.68 / 0.69 / 0.89, the median at 0.17 / 0.15 / 0.12 (it jumps between the
#: clean and the delayed samples). A quiet device (0.5-3% per sample) keeps the median
NOISY = 0.05
#: the screening's own bar for the least sample: higher, because its configs have unequal sample counts (one or two
#: for most, up to four near the best), and under symmetric noise the least of more samples reads lower: replayed over
#: the corpus at Gaussian 5%, a 5% bar missed in 2.5% of runs, the median in 0.8%; and only on enough pairs (four
#: pairs of 10% noise can read over 15%). Behind the gloo all-reduce the noise measured 16-44% per sample
HEAVY, HEAVY_PAIRS = 0.15, 12

#: the median of |log a - log b| for two independent Gaussian samples of standard deviation 1: 0.6745 * sqrt(2)
_MEDIAN_ABS_PAIR = 0.6745 * math.sqrt(2)


@dataclass(frozen=True)
class NoiseEstimate:
    """The relative noise of one screening sample, from repeated samples of the same configs."""

    #: standard deviation of one sample's log time (0.05: about 5%)
    sigma: float
    #: configs screened more than once (the pairs it rests on)
    pairs: int

    @property
    def heavy(self) -> bool:
        """Whether the noise is heavy enough, on enough pairs, for a screening to take its configs' least samples
        (:data:`HEAVY`, from :data:`HEAVY_PAIRS` pairs: four pairs of 10% noise can read over 15%)."""
        return self.sigma > HEAVY and self.pairs >= HEAVY_PAIRS

    def text(self) -> str:
        """One line for the logs and the decision's record."""
        return f"screening noise {100 * self.sigma:.1f}% per sample (from {self.pairs} repeated config(s))"


def estimate_noise(history: Mapping[int, Sequence[float] | None], floor: float) -> NoiseEstimate | None:
    """The noise of one sample from every config of ``history`` (index -> its group samples, None: failed) that has
    two or more positive samples (its first two are the pair); None when no config has two. Never below ``floor``."""
    return spread_of_runs([s[:2] for _, s in sorted(history.items()) if s is not None and len(s) >= 2], floor)


def central(samples: Sequence[float], noisy: bool = False, spike: float = math.inf) -> float:
    """A config's screened time from its samples: the median (two: their mean) of those within ``spike`` (in log
    time) of the least, so that samples read further above the least than the noise ever puts them (spiked: a
    collective that waited on a late rank) do not count, however many of them there are; ``noisy`` (the noise
    measured above :data:`HEAVY`): the least of them."""
    ordered = sorted(samples)
    if noisy:
        return ordered[0]
    if ordered[0] > 0 and spike < math.inf:
        ordered = [t for t in ordered if math.log(t) - math.log(ordered[0]) <= spike]
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def statistic(location: Callable[[Sequence[float]], float]) -> str:
    """What a race's times are, from its :meth:`~.race.Race.location`: :data:`~triton_dist_tune.records.MEDIAN`
    (each config's median sample) or, under noise over :data:`NOISY`, :data:`~triton_dist_tune.records.LEAST`."""
    return MEDIAN if location is median else LEAST


def retaken(outcomes: Sequence[Outcome], least: bool, retake: Callable[[Outcome], bool]) -> list[Outcome]:
    """``outcomes``, each usable one that ``retake`` names with its time taken again from its group samples
    (``round_times``): their least (``least``: a noisy race's statistic), else their median, so that one decision's
    table holds times of one statistic; a settled leader's median is its drift-free time
    (:attr:`~triton_dist_tune.records.Outcome.drift_free`), as its race ranks it where quiet, not the median of all
    its samples. A probe's stand-in (a bound, no sample), an outcome without samples and a heavy race's settled
    leader's drift-free time (:attr:`~triton_dist_tune.records.Outcome.settled_time`, either statistic) keep their
    time."""
    return [replace(o, time=o.least() if least else _median(o))
            if o.usable and o.round_times and not o.probed and not o.settled_time and retake(o) else o
            for o in outcomes]


def _median(outcome: Outcome) -> float:
    """An outcome's time under the median statistic: a settled leader's drift-free time, else its median sample."""
    return float(outcome.drift_free if outcome.drift_free is not None else median(outcome.round_times))


def spread_of_runs(samples: Sequence[Sequence[float]], floor: float) -> NoiseEstimate | None:
    """The noise of one sample from several configs' runs of samples (each run: one config's samples in the order
    taken): the median |log a - log b| over every two consecutive samples of a run, scaled to one sample's standard
    deviation (robust to a spiked sample); None when no run has two positive samples. Never below ``floor``."""
    gaps = sorted(abs(math.log(a) - math.log(b)) for run in samples
                  for a, b in zip(run, run[1:], strict=False) if a > 0 and b > 0)
    if not gaps:
        return None
    middle = len(gaps) // 2
    median = gaps[middle] if len(gaps) % 2 else (gaps[middle - 1] + gaps[middle]) / 2
    runs = sum(1 for run in samples if len(run) >= 2)
    return NoiseEstimate(max(floor, median / _MEDIAN_ABS_PAIR), runs)
