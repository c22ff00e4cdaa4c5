"""Which configs a search screens by their warm-up probe alone, and the time that stands in for their sample.

Every config a tuning warms up ends its warm-up with a probe: a few calls timed behind its warm-up's last call
(:func:`~triton_dist_tune.measure.timing.probe`: a device-bound probe reads no launch gap), which size its
steady samples. On one rank timing on a device clock, a probe that reads far above the tuning's fastest probe
tells the search that the config is far behind, so the search spares it the graph capture and the steady sample,
and takes a stand-in time for it instead: its probe, scaled to the samples' regime (:data:`FAR_BEHIND`).

That inference holds as far as a probe is an affine function of the config's device time (a launch's or the host's
constant cost on top: ``a D_x + h > 1.5 (a D_best + h)`` implies ``D_x > 1.5 D_best`` for ``h >= 0``). Three guards:

- **The reference is the probe of the best config raced** (the least screened time; the stage's configs under the
  bar are raced first, so that the first stage has one), not the fastest probe: a probe that misreads one config low
  no longer puts the rest behind (one MoE tuning on an H200 screened 89 of its 98 configs by their probe alone, a
  misread fastest probe the likely cause). Nor may the best raced config's own probe put them behind by reading
  low: the reference is at least what a probe of its time reads (:meth:`ProbeScreen.reference`). (On one H200, the
  MoE example at M = 32: its best raced config's probe read 1.50 times its device time where the others' read 1.9
  times, and 45 configs, 17 of them within 1.05 of the best, were screened by their probe alone; call 4 of
  ``benchmarks/results/session_h200_25``.)
- **Where probes read the host, the bar is measured.** Probes whose raced configs' samples read under
  :data:`HOST_BOUND` of them (the median) are mostly the host's time: a function of several launches per call, or of
  kernels of a few microseconds. (The figures this threshold was chosen on, on an H200: the MoE validation's 0.11-0.50
  at M <= 2048, an 840-config GEMM's 0.62-0.81 at M = 4096 / 8192, were mostly the argument check inside each probe's
  first call; with it moved out of the probe, the same functions read 0.69-0.97 at M = 512-8192, device-bound:
  ``benchmarks/results/session_h200_24``, call 6.) There the host's jitter, not the config, can put a config near the
  best "far behind". So the first stage then races every config, far behind or not, and a probe may read as far above
  its config's time as the worst twentieth of that stage's ratios of sample to probe reads below their median
  (:attr:`ProbeScreen.spread`); from the second stage on, a config is far behind over :data:`FAR_BEHIND` x that spread
  x the reference. Only the first stage's ratios count: later stages race only the configs under the bar, whose ratios
  would hide the stalls.
- **Everywhere, the bar widens by the probes' measured spread.** Device-bound by :data:`HOST_BOUND`, the first
  stage's far configs get their stand-in as soon as the stage's others are raced, against :data:`FAR_BEHIND` x the
  spread of those others' ratios x the reference. Probes over kernels of tens of microseconds carry a launch cost
  that varies from config to config: on one H200, the MoE example at M = 32 read samples 0.60-0.65 of their probes
  (device-bound), and its probes 1.33-2.23 times the configs' device time (10-90%). Under the plain bar, 13 of the
  38 configs that 3 tunings screened by their probe alone were within 1.05 of the best (call 1 of
  ``benchmarks/results/session_h200_26``). Where probes read their configs alike the spread is about 1 and the bar
  the plain one.
- **A fast call probed in one call is never far behind** (:attr:`ProbeScreen.short`): one call suits a device-bound
  config (the config warmed up before it took 0.5 ms or more), and a fast call's probe then reads the host's launch
  on top.
- **A stand-in is a bound, not a sample**: the search never samples it again and it gives no pair to the noise
  estimate (:class:`~triton_dist_tune.measure.search.PatternSearch` ``bounded``). Before, the search's rules
  sampled stand-ins next to a finalist again, and each pair of a probe and a sample read as noise: on one H200, GEMM
  tunings at M = 4096 / 8192 measured 3.6-16% screening noise where the GPU's own is 1.0-3.2%, and one MoE tuning
  88%.

Side by side on one H200 (``benchmarks/RESULTS.md``; the threshold is a training figure, chosen on those runs): the
measured bar on every function made GEMM keys take 0.7-1.1 / 0.1-0.4 s more at M = 4096 / 8192 and changed none of
their choices; with the plain bar, MoE tunings at M = 256 chose 1.060 and 1.114 (72 and 111 configs screened by their
probe alone) in 2 of 9, with the measured bar none of 6.

Pure: every rank of a group decides the same from the same probes and samples (only a group of one rank uses it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..stats import median

#: a search's new config whose warm-up probe takes more than this many times the best raced config's probe (times the
#: probes' spread) is screened by its probe alone; over this many times the tuning's fastest
#: probe it is a candidate. A probe reads the config's device time with the launch overhead on top, which brings
#: ratios closer to 1, never further apart: such a config is at least that far behind on the device, and it can be
#: a finalist only where the search's noise band reaches 50%. Before the guards of the module docstring, on one
#: H200 (840-config GEMM, ``benchmarks/results/session_h200_3``): 16-151 configs of a key's 153-254 screened by their
#: probe alone, and a key at M = 4096 / 8192 tuned in 2.8-3.5 / 2.9-3.3 s (before: 4.0-4.6 / 4.5-5.7 s)
FAR_BEHIND = 1.5
#: probes are the host's where the raced configs' samples read under this share of them (the median ratio): midway
#: between the MoE example's highest at M <= 2048 (0.50) and the 840-config GEMM's lowest at M = 4096 / 8192 (0.62)
#: on one H200 (the side-by-side run used 0.6, which splits those runs alike)
HOST_BOUND = 0.56
#: the ratio of sample to probe the spread is read at: the worst twentieth of the first stage's (its least where it
#: raced 20 configs or fewer)
SPREAD_QUANTILE = 0.05


@dataclass
class ProbeScreen:
    """One tuning's far-behind screening: the probes, how the raced configs' samples read them, the configs screened
    by their probe alone."""

    #: sample / probe of every config raced after its probe
    ratios: list[float] = field(default_factory=list)
    #: those of the first stage
    first: list[float] = field(default_factory=list)
    #: the configs screened by their probe alone so far (by this attempt or, read from the journal, an earlier one)
    indices: set[int] = field(default_factory=set)
    #: the least probe (ms per call) of every config probed so far
    fastest: float = 0.0
    #: (screened time, probe) of the best config raced after its probe
    best: tuple[float, float] | None = None
    #: screening stages probed so far
    stages: int = 0
    #: configs whose probe timed one call (the config warmed up before them took
    #: :data:`~triton_dist_tune.measure.timing.PROBE_ONE_CALL_MS` or more) and read under that: one call suits a
    #: device-bound config only, and a fast call's probe reads the host's launch on top (on one H200, such probes
    #: read 1.15-1.67 times their configs' device time, median by shape, up to 3.45, where three-call probes read
    #: 1.05-1.24, and they were the probes of all 3 configs within 1.10 of the best screened by their probe alone in
    #: 15 tunings; ``benchmarks/results/session_h200_24``, call 6): never far behind (:meth:`far`)
    short: set[int] = field(default_factory=set)

    def probed(self, per_call: Mapping[int, float]) -> None:
        """Note a stage's new probes (index -> ms per call; the group's)."""
        self.stages += 1
        positive = [t for t in per_call.values() if t > 0]
        if positive:
            self.fastest = min([self.fastest, *positive]) if self.fastest > 0 else min(positive)

    def raced(self, probe: float, sample: float, index: int | None = None) -> None:
        """Note a config raced after its probe: its probe and its screened time, ms per call. A :attr:`short` probe
        (config ``index``) reads the host's launch on top and is never judged by the bar: its ratio of sample to
        probe counts neither in :attr:`scale` nor in :attr:`spread` (on one H200, the MoE example's first stage at
        M = 512 / 1024 read 4-9 such ratios of 0.52-0.78 beside 0.77-0.85 for three-call probes, and they widened
        the spread from 1.11-1.24 to 1.29-1.46; call 2 of ``benchmarks/results/session_h200_26``), and a probe of
        its time reads what :attr:`scale` says."""
        if probe <= 0 or sample <= 0:
            return
        short = index is not None and index in self.short
        if not short:
            self.ratios.append(sample / probe)
            if self.stages == 1:
                self.first.append(sample / probe)
        if self.best is None or sample < self.best[0]:
            self.best = (sample, 0.0 if short else probe)

    @property
    def scale(self) -> float:
        """A probe's scale to the samples' regime: the median sample / probe (1 before any evidence)."""
        return median(self.ratios) if self.ratios else 1.0

    @property
    def host_bound(self) -> bool:
        """Whether probes read mostly the host's time: the raced configs' samples under :data:`HOST_BOUND` of them."""
        return bool(self.ratios) and self.scale < HOST_BOUND

    @property
    def spread(self) -> float:
        """How far above its config's time a probe may read, beyond the median ratio: the first stage's median ratio
        of sample to probe over its worst twentieth's (:data:`SPREAD_QUANTILE`), at least 1 (1 before any)."""
        if not self.first:
            return 1.0
        ordered = sorted(self.first)
        return max(1.0, median(ordered) / ordered[max(0, math.ceil(SPREAD_QUANTILE * len(ordered)) - 1)])

    @property
    def reference(self) -> float:
        """The probe the far-behind bar is a multiple of: the best raced config's probe, or what a probe of its
        screened time reads (that time over :attr:`scale`) where its own probe read lower than that or was
        :attr:`short`; 0 before any config was raced."""
        if self.best is None:
            return 0.0
        return max(self.best[1], self.best[0] / self.scale)

    def far(self, per_call: Mapping[int, float]) -> list[int]:
        """The configs of ``per_call`` (new probes, already :meth:`probed`) over :data:`FAR_BEHIND` times the
        fastest probe, but for :attr:`short` probes, ascending: the candidates, of which those over the bar once the
        stage's others are raced get a stand-in (:meth:`stand_ins`)."""
        return [i for i in sorted(per_call)
                if self.fastest > 0 and per_call[i] > FAR_BEHIND * self.fastest and i not in self.short]

    def stand_ins(self, per_call: Mapping[int, float], candidates: Sequence[int]) -> dict[int, float]:
        """Of the ``candidates`` (:meth:`far`), those over the bar (:data:`FAR_BEHIND` x :attr:`spread` x
        :attr:`reference`), each with its stand-in time (its probe, scaled), ascending; the others are to be raced:
        all of them before any config was raced, and in the first stage of host-bound probes."""
        if self.best is None or (self.stages == 1 and self.host_bound):
            return {}
        bar, scale = FAR_BEHIND * self.spread * self.reference, self.scale
        chosen = {i: per_call[i] * scale for i in sorted(candidates) if per_call[i] > bar}
        self.indices.update(chosen)
        return chosen

    def text(self) -> str:
        """One line for the logs: how probes read."""
        if not self.ratios:
            return "no config raced after its probe"
        bound = "host-bound" if self.host_bound else "device-bound"
        return (f"samples read {self.scale:.3f} of their probe over {len(self.ratios)} config(s): {bound}, a probe up "
                f"to {self.spread:.2f}x above that")
