"""Which configs a search screens by their warm-up probe alone, and the time that stands in for their sample.

Every config a tuning warms up ends its warm-up with a probe: a few calls timed after a synchronize, which size its
steady samples. On one rank timing on a device clock, a probe that reads far above the tuning's fastest probe
tells the search that the config is far behind, so the search spares it the graph capture and the steady sample,
and takes a stand-in time for it instead: its probe, scaled to the samples' regime (:data:`FAR_BEHIND`).

That inference holds only as far as a probe reads the config's device time. A function that launches several
kernels per call, or kernels of a few microseconds, is bound by the host in its probe: on one H200 the MoE example's
samples read 0.12-0.70 of their probes over a campaign's 16 batch sizes, so a host stall can put a config near the
best "far behind"; and the fastest probe, the bar's reference, can itself misread. So:

- **The reference is the probe of the best config raced** (the least screened time), not the fastest probe: a probe
  that misreads one config low no longer puts the rest behind.
- **The bar is measured, not assumed.** The first stage's configs are all raced, far behind or not: each gives a ratio
  of sample to probe, and a probe may read as far above its config's time as the worst of those ratios
  (:data:`SPREAD_QUANTILE`) reads below their median (:attr:`ProbeScreen.spread`). From the second stage on, a
  config is far behind when its probe exceeds :data:`FAR_BEHIND` x that spread x the reference. Where a probe is an
  affine function of the device time (a constant launch or host cost on top), the plain bar already holds
  (``a D_x + h > 1.5 (a D_best + h)`` implies ``D_x > 1.5 D_best`` for ``h >= 0``); the spread covers the probes a
  host stall put above that line, as often as the first stage saw them. The evidence is the first stage's alone:
  later stages race only the configs under the bar, whose ratios would hide the stalls.
- **A stand-in is a bound, not a sample**: the search never samples it again and it gives no pair to the noise
  estimate (:class:`~triton_dist_tune.measure.search.PatternSearch` ``bounded``). Before, the search's rules
  sampled stand-ins next to a finalist again, and the pairs of a probe and a sample read as noise: one MoE tuning on
  an H200 measured 88% screening noise from 29 of them.

Pure: every rank of a group decides the same from the same probes and samples (only a group of one rank uses it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .stats import median

#: a search's new config whose warm-up probe takes more than this many times the tuning's fastest probe is screened
#: by its probe alone, where probes are trusted. A probe reads the config's device time with the launch overhead
#: on top, which brings ratios closer to 1, never further apart: a config over 1.5x the fastest probe is at least
#: that far behind on the device, and it can be a finalist only where the search's noise band reaches 50%. On one
#: H200 (840-config GEMM, ``benchmarks/results/session_h200_3``): 16-151 configs of a key's 153-254 screened by their
#: probe alone, and a key at M = 4096 / 8192 tuned in 2.8-3.5 / 2.9-3.3 s (before: 4.0-4.6 / 4.5-5.7 s)
FAR_BEHIND = 1.5
#: the ratio of sample to probe the spread is read at: the worst twentieth of the first stage's (its least where it
#: raced 20 configs or fewer)
SPREAD_QUANTILE = 0.05


@dataclass
class ProbeScreen:
    """One tuning's far-behind screening: the probes, the first stage's evidence of how they read, the configs
    screened by their probe alone."""

    #: sample / probe of every config the first stage raced
    ratios: list[float] = field(default_factory=list)
    #: the configs screened by their probe alone so far
    indices: set[int] = field(default_factory=set)
    #: the least probe (ms per call) of every config probed so far
    fastest: float = 0.0
    #: (screened time, probe) of the best config raced after its probe
    best: tuple[float, float] | None = None
    #: screening stages probed so far
    stages: int = 0

    def probed(self, per_call: Mapping[int, float]) -> None:
        """Note a stage's new probes (index -> ms per call; the group's)."""
        self.stages += 1
        positive = [t for t in per_call.values() if t > 0]
        if positive:
            self.fastest = min([self.fastest, *positive]) if self.fastest > 0 else min(positive)

    def raced(self, probe: float, sample: float) -> None:
        """Note a config raced after its probe: its probe and its screened time, ms per call."""
        if probe > 0 and sample > 0:
            if self.stages == 1:
                self.ratios.append(sample / probe)
            if self.best is None or sample < self.best[0]:
                self.best = (sample, probe)

    @property
    def scale(self) -> float:
        """A probe's scale to the samples' regime: the median sample / probe of the first stage (1 before it)."""
        return median(self.ratios) if self.ratios else 1.0

    @property
    def spread(self) -> float:
        """How far above its config's time a probe may read, beyond the median ratio: the median ratio of sample to
        probe over the worst twentieth's (:data:`SPREAD_QUANTILE`), at least 1."""
        if not self.ratios:
            return math.inf
        ordered = sorted(self.ratios)
        low = ordered[max(0, math.ceil(SPREAD_QUANTILE * len(ordered)) - 1)]
        return max(1.0, median(ordered) / low)

    def bar(self) -> float:
        """A probe over this (ms per call) is far behind: :data:`FAR_BEHIND` x :attr:`spread` x the reference (the
        best raced config's probe); none during the first stage."""
        if self.stages < 2 or self.best is None:
            return math.inf
        return FAR_BEHIND * self.spread * self.best[1]

    def far(self, per_call: Mapping[int, float]) -> list[int]:
        """The configs of ``per_call`` (new probes, already :meth:`probed`) over :data:`FAR_BEHIND` times the
        fastest probe, ascending: the candidates, of which those over :meth:`bar` once the stage's others are raced
        get a stand-in (:meth:`stand_ins`)."""
        return [i for i in sorted(per_call) if self.fastest > 0 and per_call[i] > FAR_BEHIND * self.fastest]

    def stand_ins(self, per_call: Mapping[int, float], candidates: Sequence[int]) -> dict[int, float]:
        """Of the ``candidates`` (:meth:`far`), those over :meth:`bar` now, each with its stand-in time (its probe,
        scaled), ascending; the others are to be raced."""
        bar, scale = self.bar(), self.scale
        chosen = {i: per_call[i] * scale for i in sorted(candidates) if per_call[i] > bar}
        self.indices.update(chosen)
        return chosen

    def text(self) -> str:
        """One line for the logs: how probes read."""
        if not self.ratios:
            return "no config raced after its probe"
        return (f"samples read {self.scale:.3f} of their probe over the first stage's {len(self.ratios)} "
                f"config(s), a probe up to {self.spread:.2f}x above that")
