"""Which configs a search screens by their warm-up probe alone, and the time that stands in for their sample.

Every config a tuning warms up ends its warm-up with a probe: a few calls timed after a synchronize, which size its
steady samples. On one rank timing on a device clock, a probe that reads far above the tuning's fastest probe
tells the search that the config is far behind, so the search spares it the graph capture and the steady sample,
and takes a stand-in time for it instead: its probe, scaled to the samples' regime (:data:`FAR_BEHIND`).

That inference holds only where a probe reads the config's device time. A function that launches several kernels
per call, or kernels of a few microseconds, is bound by the host in its probe: on one H200 the MoE example's probes
read 1.4-8x its graphs' device time (sample / probe 0.12-0.70 over a campaign's 16 batch sizes), so its probes
differ by the host's jitter more than by the configs, one host stall puts the best config "far behind", and a
stand-in scaled by one ratio misreads a config's time by 2x (one tuning then measured 88% screening noise from
stand-ins sampled again). So the rule is **trusted only on evidence**: the configs raced after their probe must
read, in their steady samples, at least :data:`TRUSTED_RATIO` of their probe (at most a fifth of a probe is the
host's). Until that is shown (the first stage, and a host-bound function always), a config far behind is raced
like any other; the caller races the stage's others first, so their samples are the evidence.

A stand-in is a bound, not a sample: the search never samples it again (it is far behind by the device's own
reading) and it gives no pair to the noise estimate (:class:`~triton_dist_tune.measure.search.PatternSearch`
``bounded``). Pure: every rank of a group decides the same from the same probes and samples (only a group of one
rank uses it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .stats import median

#: a search's new config whose warm-up probe takes more than this many times the tuning's fastest probe is screened
#: by its probe alone, where probes are trusted. A probe reads the config's device time with the launch overhead
#: on top, which brings ratios closer to 1, never further apart: a config over 1.5x the fastest probe is at least
#: that far behind on the device, and it can be a finalist only where the search's noise band reaches 50%. On one
#: H200 (840-config GEMM, ``benchmarks/results/session_h200_3``): 16-151 configs of a key's 153-254 screened by their
#: probe alone, and a key at M = 4096 / 8192 tuned in 2.8-3.5 / 2.9-3.3 s (before: 4.0-4.6 / 4.5-5.7 s)
FAR_BEHIND = 1.5
#: probes are trusted once the median of sample / probe over the configs raced after their probe is at least this
#: (a probe at most a quarter above the device time: the host's share of it at most a fifth), on at least
#: :data:`TRUST_EVIDENCE` configs
TRUSTED_RATIO, TRUST_EVIDENCE = 0.8, 4


@dataclass
class ProbeScreen:
    """One tuning's far-behind screening: the fastest probe, the evidence of how probes read, the configs screened
    by their probe alone."""

    #: sample / probe of every config raced after its probe
    ratios: list[float] = field(default_factory=list)
    #: the configs screened by their probe alone so far
    indices: set[int] = field(default_factory=set)
    #: the least probe (ms per call) of every config probed so far
    fastest: float = 0.0

    def probed(self, per_call: Mapping[int, float]) -> None:
        """Note new probes (index -> ms per call; the group's)."""
        positive = [t for t in per_call.values() if t > 0]
        if positive:
            self.fastest = min([self.fastest, *positive]) if self.fastest > 0 else min(positive)

    def raced(self, probe: float, sample: float) -> None:
        """Note a config raced after its probe: its probe and its screened time, ms per call."""
        if probe > 0 and sample > 0:
            self.ratios.append(sample / probe)

    @property
    def scale(self) -> float:
        """A probe's scale to the samples' regime: the median sample / probe (1 before any evidence)."""
        return median(self.ratios) if self.ratios else 1.0

    @property
    def trusted(self) -> bool:
        """Whether probes read the configs' device time (the module docstring): on enough evidence, sample / probe
        at least :data:`TRUSTED_RATIO`."""
        return len(self.ratios) >= TRUST_EVIDENCE and self.scale >= TRUSTED_RATIO

    def far(self, per_call: Mapping[int, float]) -> list[int]:
        """The configs of ``per_call`` (new probes, already :meth:`probed`) over :data:`FAR_BEHIND` times the
        fastest probe, ascending: those to screen by their probe alone once probes are :attr:`trusted`."""
        return [i for i in sorted(per_call) if self.fastest > 0 and per_call[i] > FAR_BEHIND * self.fastest]

    def stand_in(self, index: int, probe: float) -> float:
        """Config ``index`` screened by its probe alone: its stand-in time (the probe, scaled)."""
        self.indices.add(index)
        return probe * self.scale
