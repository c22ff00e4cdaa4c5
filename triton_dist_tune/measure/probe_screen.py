"""Which configs a search screens by their warm-up probe alone, and the time that stands in for their sample.

Every config a tuning warms up ends its warm-up with a probe: a few calls timed after a synchronize, which size its
steady samples. On one rank timing on a device clock, a probe that reads far above the tuning's fastest probe
tells the search that the config is far behind, so the search spares it the graph capture and the steady sample,
and takes a stand-in time for it instead: its probe, scaled to the samples' regime (:data:`FAR_BEHIND`).

That inference holds as far as a probe is an affine function of the config's device time (a launch's or the host's
constant cost on top: ``a D_x + h > 1.5 (a D_best + h)`` implies ``D_x > 1.5 D_best`` for ``h >= 0``). Two guards:

- **The reference is the probe of the best config raced** (the least screened time; the stage's configs under the
  bar are raced first, so that the first stage has one), not the fastest probe: a probe that misreads one config low
  no longer puts the rest behind (one MoE tuning on an H200 screened 89 of its 98 configs by their probe alone).
- **A stand-in is a bound, not a sample**: the search never samples it again and it gives no pair to the noise
  estimate (:class:`~triton_dist_tune.measure.search.PatternSearch` ``bounded``). Before, the search's rules
  sampled stand-ins next to a finalist again, and each pair of a probe and a sample read as noise: on one H200, GEMM
  tunings at M = 4096 / 8192 measured 5.0-16% screening noise where the GPU's own is 1.4-2.4%, and one MoE tuning
  88%.

Not guarded: a host stall during one probe of a config near the best (a function bound by the host in its probe,
such as the MoE example, whose samples read 0.12-0.70 of their probes on an H200). A bar widened by the spread of
the first stage's ratios of sample to probe guarded it, and was measured side by side on one H200: no choice changed
in 30 tunings, and GEMM keys at M = 4096 / 8192 took 0.3-1.0 s more (``benchmarks/RESULTS.md``), so it is not used.

Pure: every rank of a group decides the same from the same probes and samples (only a group of one rank uses it).
"""

from __future__ import annotations

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
@dataclass
class ProbeScreen:
    """One tuning's far-behind screening: the probes, how the raced configs' samples read them, the configs screened
    by their probe alone."""

    #: sample / probe of every config raced after its probe
    ratios: list[float] = field(default_factory=list)
    #: the configs screened by their probe alone so far
    indices: set[int] = field(default_factory=set)
    #: the least probe (ms per call) of every config probed so far
    fastest: float = 0.0
    #: (screened time, probe) of the best config raced after its probe
    best: tuple[float, float] | None = None

    def probed(self, per_call: Mapping[int, float]) -> None:
        """Note a stage's new probes (index -> ms per call; the group's)."""
        positive = [t for t in per_call.values() if t > 0]
        if positive:
            self.fastest = min([self.fastest, *positive]) if self.fastest > 0 else min(positive)

    def raced(self, probe: float, sample: float) -> None:
        """Note a config raced after its probe: its probe and its screened time, ms per call."""
        if probe > 0 and sample > 0:
            self.ratios.append(sample / probe)
            if self.best is None or sample < self.best[0]:
                self.best = (sample, probe)

    @property
    def scale(self) -> float:
        """A probe's scale to the samples' regime: the median sample / probe (1 before any evidence)."""
        return median(self.ratios) if self.ratios else 1.0

    def far(self, per_call: Mapping[int, float]) -> list[int]:
        """The configs of ``per_call`` (new probes, already :meth:`probed`) over :data:`FAR_BEHIND` times the
        fastest probe, ascending: the candidates, of which those over :data:`FAR_BEHIND` times the best raced
        config's probe once the stage's others are raced get a stand-in (:meth:`stand_ins`)."""
        return [i for i in sorted(per_call) if self.fastest > 0 and per_call[i] > FAR_BEHIND * self.fastest]

    def stand_ins(self, per_call: Mapping[int, float], candidates: Sequence[int]) -> dict[int, float]:
        """Of the ``candidates`` (:meth:`far`), those over :data:`FAR_BEHIND` times the best raced config's probe,
        each with its stand-in time (its probe, scaled), ascending; the others are to be raced (all of them before
        any config was raced)."""
        if self.best is None:
            return {}
        bar, scale = FAR_BEHIND * self.best[1], self.scale
        chosen = {i: per_call[i] * scale for i in sorted(candidates) if per_call[i] > bar}
        self.indices.update(chosen)
        return chosen

    def text(self) -> str:
        """One line for the logs: how probes read."""
        return (f"samples read {self.scale:.3f} of their probe over {len(self.ratios)} config(s)" if self.ratios
                else "no config raced after its probe")
