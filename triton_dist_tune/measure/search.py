"""The search: which configs of a large space to measure, from what the group measured so far.

Racing every kept config costs a compile, a warm-up, a probe and screening samples per config whether or not it
could win; on an 800-config space compiling is most of a key's tuning. The search measures a part of the space
instead, in **stages**, each a batch of configs screened together (one warm-up and one screening sample each, in
lock-step), then sends the best of everything it screened (the **finalists**) to the race, whose settled rounds
decide among them (a paired, interleaved shoot-out; see :mod:`~triton_dist_tune.measure.race`).

:class:`PatternSearch` (the strategy; pure, no device, no messages):

1. **First look**: the seeds (the choices and runners-up of keys already decided nearby, agreed by the group),
   then configs that cover every value of every parameter at least once, then configs drawn at random from a seed
   the group shares, up to ``initial`` configs. A seeded search takes its covering and random configs from those the
   group's earlier keys screened (``preferred``: compiled already) before any other.
2. **Neighbourhoods**: the ``leaders`` best configs screened so far, and each one's neighbours on the parameter grid
   (:class:`~triton_dist_tune.measure.grid.Grid`) in rings: one parameter one step up or down, then two block sizes
   at once, then the rest of each line. The neighbours not screened yet are the next stage (at most ``stage_cap``):
   every leader's first ring, best leader first, before any leader's second. The search moves on while the leaders
   change, until every neighbour of every leader is screened.
3. **The model's check**: then an additive model of log time over parameter values and pairs of values
   (:class:`~triton_dist_tune.measure.surrogate.AdditiveModel`), fitted to every screened time, names the unscreened
   configs it predicts faster than the ``finalists``-th best screened; up to ``model_batch`` of them, best first,
   are the next stage, and step 2 resumes from the new leaders. The search ends when the leaders' neighbourhoods
   are screened and the model predicts nothing unscreened to beat the finalists, or after ``model_rounds`` checks.
   The budget follows this evidence, not a fraction of the space; ``max_measured`` (0: none) is a hard cap for
   callers whose runs are bounded (``contextual_autotune``'s ``max_runs``).
4. **Samples where they decide** (:mod:`~triton_dist_tune.measure.noise`): one screening sample is a bet that the
   noise is smaller than the landscape's steps, so before each new stage of step 2 or 3 the search takes another
   sample of the configs whose place the noise leaves uncertain, and measures that noise from the pairs it takes:
   first the ``noise_pairs`` best configs (the first pairs), then always the best one (the reference the others are
   compared with); then, once the noise ``s`` of one sample is estimated, the configs whose samples disagree by more
   than ``band`` standard deviations (one of them spiked: a third settles it), and the configs outside the finalists
   that could still be the best: read within the noise band of the best (``band * s * sqrt(1/n + 1/n_best)`` in log
   time, n the samples of each), or next to a finalist and risen above its best screened neighbour by more than the
   landscape's steps explain (``band`` times their 90th percentile, with the noise); and, once two samples of one
   config have read further apart than Gaussian noise ever would (twice the band: a spike, such as a collective that
   waited on a late rank), every config next to a finalist screened once that reads within :data:`SPIKE_REACH`
   times the largest such gap (in log time) of the best; and the model's outliers: configs
   screened once that the additive model of :meth:`PatternSearch.posterior` predicts within the finalists' cut, yet
   read above that prediction by more than the band (the best behind one spiked sample its neighbours do not
   share). A config takes ``max_samples`` at most; its time is the median of its samples (two: their mean) within
   twice the band of its least (samples further above are spiked and do not count: two spikes of four moved the
   median), or under noise above :data:`~.noise.HEAVY` the least of them; second samples are at most
   ``resample_share`` of the configs screened. A quiet space (a floor of ``noise_floor``) pays for its first pairs
   and a few more; a noisy one spends where the order is still open. Where the landscape is smoother than the
   noise, each config's time is also weighed against its neighbours' (:meth:`PatternSearch.posterior`).
5. **No stage is empty while configs are left**: when every config screened so far failed (no leaders), the next
   stage is the untried kept configs in the agreed order, so that the search ends only on evidence and the tuning
   raises ``AllConfigsFailedError`` only when every kept config has failed.
6. **Finalists**: the ``finalists`` best screened configs, and after them those within the noise band of the best,
   up to ``max_finalists``: the race's repeated, interleaved rounds decide among them.

Every decision is a function of the kept configs, the plan (its seed included) and the group's samples (each the MAX
over ranks, exchanged): every rank computes the same stages in the same order with no further message, and a resumed
tuning that reads the same times from the journals replays the same stages, measuring only what was not screened.

The defaults were chosen by replaying a corpus of exhaustive device-time landscapes with one kernel family held out
at a time (``benchmarks/replay_search.py``; the figures are in ``docs/search.md``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .grid import Grid
from .noise import NoiseEstimate, central, estimate_noise
from .surrogate import AdditiveModel

SQRT2 = math.sqrt(2)

#: what a search reads of the configs screened so far: index -> the group's screening samples of it, in the order
#: taken (a single time counts as one sample), or None when it failed
Samples = Mapping[int, "Sequence[float] | float | None"]

#: the search is used (``search="auto"``) when more configs than this are kept after pruning: at or below it the
#: exhaustive race costs a few seconds and is what the 48-config figures were measured with
SEARCH_ABOVE = 64
#: settled blocks the finalists' race may add while its leader and runner-up are an unsettled near-tie
#: (:class:`~triton_dist_tune.measure.race.RacePlan` ``tie_blocks``)
TIE_BLOCKS = 2


#: the rules of step 4 that take a config's sample again, in order, as the logs name them (:attr:`PatternSearch.again`):
#: the noise's first pairs, the best (the reference), then samples that disagree beyond the noise, an estimate within
#: the noise band of the best, a rise above a finalist's neighbour beyond the landscape's steps, a config next to a
#: finalist once a spike was seen, and the model's outliers
RESAMPLE_REASONS = ("noise pairs", "the best", "disagreeing", "within the band", "steps",
                    "next to a finalist after a spike", "model outliers")

#: once a spike is seen, a config next to a finalist read once is taken again if it reads within this many times the
#: largest spike seen (log time: a ratio's square) of the best: a spike seen in a pair is one draw of the spikes, not
#: their largest, yet a config read far further behind than any spike seen is not hiding the best (on one GPU of a
#: 2-H200 host, pairs up to 13% apart took 46 configs again, half of them read over 1.33x the best and up to 7x, in a
#: GEMM key of 3.46 s whose screening took 1.02 s)
SPIKE_REACH = 2.0


@dataclass(frozen=True)
class SearchPlan:
    """How a search runs; identical on every rank."""

    #: configs in the first look (seeds included); 0: from the space's size (:func:`initial_size`)
    initial: int = 0
    #: how many of the best configs' neighbourhoods the search explores
    leaders: int = 8
    #: configs in one stage at most
    stage_cap: int = 32
    #: configs screened at most; 0: no cap (the search ends on evidence, step 3 of the module docstring)
    max_measured: int = 0
    #: configs sent to the race at the end, and at most, with those within the noise band of the best
    finalists: int = 10
    max_finalists: int = 20
    #: configs one check of the model may add, and how many checks a search makes at most (0: no model)
    model_batch: int = 16
    model_rounds: int = 4
    #: the seed of the random part of the first look: the same on every rank (derived from the key and the space)
    seed: str = ""
    #: screening samples one config may take at most (1: one sample each, no re-sampling; step 4 of the docstring)
    max_samples: int = 4
    #: the best configs that take a second sample whatever the noise (the pairs the noise is first measured on)
    noise_pairs: int = 4
    #: the width of the noise band, in standard deviations of the difference of two estimates
    band: float = 2.5
    #: the least relative noise of one sample the search assumes
    noise_floor: float = 0.01
    #: re-samples at most, as a share of the configs screened so far
    resample_share: float = 0.5

    def __post_init__(self) -> None:
        for name in ("initial", "max_measured", "model_rounds", "noise_pairs", "band", "noise_floor",
                     "resample_share"):
            if getattr(self, name) < 0:
                raise ValueError(f"a search needs {name} >= 0")
        for name in ("leaders", "stage_cap", "finalists", "model_batch", "max_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"a search needs {name} >= 1")


@dataclass(frozen=True)
class Posterior:
    """What the search believes of each screened config: its time (denoised; None: failed) and the variance of
    that belief in log time (the noise of one sample over its samples, shrunk where the landscape tells more)."""

    times: dict[int, float | None]
    variance: dict[int, float]
    #: the noise of one sample it rests on (None: no config screened twice yet)
    noise: NoiseEstimate | None
    #: the additive model's log time of each screened config, where it was fitted (empty: not yet)
    predicted: dict[int, float] = field(default_factory=dict)


def initial_size(kept: int) -> int:
    """Configs of the first look for ``kept`` configs: 1.5 sqrt(kept), between 16 and 48 (43 of 840)."""
    return max(16, min(48, round(1.5 * math.sqrt(kept))))


def search_applies(mode: str, kept: int) -> bool:
    """Whether a tuning of ``kept`` configs searches under ``mode`` (``auto``: above :data:`SEARCH_ABOVE`)."""
    if mode == "exhaustive" or kept <= 1:
        return False
    return mode == "search" or kept > SEARCH_ABOVE


class PatternSearch:
    """The strategy of the module docstring over ``kept`` config indices of ``configs``."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], kept: Sequence[int], plan: SearchPlan,
                 seeds: Sequence[int] = (), preferred: Collection[int] = ()) -> None:
        self.grid = Grid(configs, kept)
        self.kept = self.grid.kept
        self.plan = plan
        self.seeds = [i for i in dict.fromkeys(seeds) if i in self.grid.point]
        #: the configs the first look covers and draws from before any other (:meth:`first_look_order`): those the
        #: earlier keys screened, compiled already; only for a seeded search
        self.preferred = {i for i in preferred if i in self.grid.point} if self.seeds else set()
        self.initial_count = min(len(self.kept), plan.initial or initial_size(len(self.kept)))
        self.cap = min(len(self.kept), max(self.initial_count, plan.max_measured or len(self.kept)))
        #: the stages proposed so far (each a list of indices), for logs and tests
        self.stages: list[list[int]] = []
        #: the model's checks so far
        self.checks = 0
        #: second and later screening samples proposed so far
        self.resampled = 0
        #: the same by the rule of step 4 that asked for them (:data:`RESAMPLE_REASONS`), for the logs
        self.again: dict[str, int] = {}
        #: the noise of one screening sample, as last estimated (None: no config screened twice yet)
        self.noise: NoiseEstimate | None = None
        #: the configs never to sample again (:meth:`next`'s ``bounded``)
        self.bounded: set[int] = set()

    def first(self) -> list[int]:
        """The first look (step 1 of the module docstring)."""
        chosen = list(self.seeds[:self.initial_count])
        covered: set[tuple[int, int]] = set()
        for i in chosen:
            covered |= self.grid.coverage(i)
        order = self.first_look_order()
        for i in order:  # cover every value of every parameter
            if len(chosen) >= self.initial_count:
                break
            if i not in chosen and self.grid.coverage(i) - covered:
                chosen.append(i)
                covered |= self.grid.coverage(i)
        for i in order:  # then at random
            if len(chosen) >= self.initial_count:
                break
            if i not in chosen:
                chosen.append(i)
        self.stages.append(chosen)
        return chosen

    def first_look_order(self) -> list[int]:
        """The kept configs in the order the first look takes them after the seeds: shuffled by the shared seed,
        the ``preferred`` ones (screened by earlier keys: compiled already) first. Replayed as campaigns over the
        corpus (``benchmarks/replay_campaign.py``, each family held out): the campaign screened 8-17% fewer
        distinct configs, each a compile, with no key more than 2% behind its best (0 of 400, 2% and 5% noise)."""
        order = list(self.kept)
        random.Random(f"{self.plan.seed}/first").shuffle(order)
        if not self.preferred:
            return order
        return [i for i in order if i in self.preferred] + [i for i in order if i not in self.preferred]

    @staticmethod
    def history(samples: Samples) -> dict[int, list[float] | None]:
        """``samples`` with every value a list of samples (a single time: one sample) or None (failed)."""
        return {i: None if s is None else ([float(s)] if isinstance(s, (int, float)) else [float(t) for t in s])
                for i, s in samples.items()}

    @staticmethod
    def estimates(samples: Samples, noisy: bool = False, spike: float = math.inf) -> dict[int, float | None]:
        """Each screened config's time: the median of its samples within ``spike`` (log time) of its least, or
        under heavy noise (``noisy``) the least of them (:func:`~.noise.central`); None: failed."""
        return {i: None if not s else central(s, noisy, spike) for i, s in PatternSearch.history(samples).items()}

    def leaders(self, times: Mapping[int, float | None], count: int) -> list[int]:
        """The ``count`` configs with the least screened time (failed ones have None; ties: the lower index)."""
        timed = sorted((t, i) for i, t in times.items() if t is not None and i in self.grid.point)
        return [i for _, i in timed[:count]]

    def next(self, samples: Samples, bounded: Collection[int] = ()) -> list[int]:
        """The next stage, given the group's screening samples of every config screened so far (None: failed);
        empty when the search is over (steps 2-5 of the module docstring). A stage holds either configs to screen
        for the first time or configs to sample again, never both. Never empty while no screened config has worked
        and kept configs are left untried. ``bounded``: configs whose one sample stands in for a time known to be
        far behind (:mod:`~triton_dist_tune.measure.probe_screen`): never sampled again."""
        self.bounded = set(bounded)
        history = self.history(samples)
        post = self.posterior(history)
        times = post.times
        room = min(self.cap - len(times), self.plan.stage_cap)
        leaders = self.leaders(times, self.plan.leaders)
        if not leaders:  # every config screened so far failed: go on through the untried ones, in agreed order
            batch = [i for i in self.kept if i not in times][:self.plan.stage_cap]
        else:
            batch = self._resample(history, post)
            if not batch and room > 0:
                batch = self.neighbours(leaders, times)[:room] or self._check(times)[:room]
        if batch:
            self.stages.append(batch)
        return batch

    def _resample(self, history: dict[int, list[float] | None], post: Posterior) -> list[int]:
        """The configs whose order is still uncertain, to sample again (step 4 of the module docstring)."""
        plan = self.plan
        ranked = self.leaders(post.times, len(post.times))
        allowed = min(plan.stage_cap, math.ceil(plan.resample_share * len(ranked)) - self.resampled)
        if plan.max_samples < 2 or allowed <= 0 or not ranked:
            return []
        count = {i: len(history[i] or ()) for i in ranked}
        pairs = sum(1 for c in count.values() if c >= 2)
        # the noise's first pairs: the best few; then the best, the reference the others are compared with
        batch = [i for i in ranked[:plan.noise_pairs if pairs < plan.noise_pairs else 1]
                 if count[i] < 2 and i not in self.bounded]
        reasons = dict.fromkeys(batch, RESAMPLE_REASONS[0 if pairs < plan.noise_pairs else 1])
        self.noise = post.noise
        if self.noise is not None and not batch:
            reasons = self._uncertain(ranked, post, history, self.noise.sigma)
            batch = list(reasons)
        batch = batch[:allowed]
        self.resampled += len(batch)
        for i in batch:
            self.again[reasons[i]] = self.again.get(reasons[i], 0) + 1
        return batch

    def _uncertain(self, ranked: list[int], post: Posterior, history: Mapping[int, list[float] | None],
                   sigma: float) -> dict[int, str]:
        """The configs that could still be the best within the noise (step 4), best first: those whose samples
        disagree beyond the noise (one of them spiked: a third settles it); outside the finalists, those whose
        estimate lies within the noise band of the best; those next to a finalist that rise above their best
        neighbour beyond the landscape's steps; and, once two samples of one config have read further apart than
        Gaussian noise explains (:meth:`_spike`), every config next to a finalist sampled once that reads within
        :data:`SPIKE_REACH` times the largest such gap of the best. Each with the first
        rule that asked for it (:data:`RESAMPLE_REASONS`), in that order."""
        plan = self.plan
        logs = {i: [math.log(t) for t in history[i] or () if t > 0] for i in ranked}
        estimate = {i: math.log(t) for i in ranked if logs[i] and (t := post.times[i]) is not None and t > 0}
        ranked = [i for i in ranked if i in estimate]
        if not ranked:
            return {}
        best = ranked[0]

        def width(i: int) -> float:  # the band: ``band`` deviations of the difference of two estimates
            return plan.band * math.sqrt(post.variance.get(i, sigma ** 2) + post.variance.get(best, sigma ** 2))

        open_ = [i for i in ranked if len(logs[i]) < plan.max_samples and i not in self.bounded]
        disagree = [i for i in open_ if len(logs[i]) >= 2 and max(logs[i]) - min(logs[i]) > plan.band * sigma * SQRT2
                    and min(logs[i]) - estimate[best] < width(i)]
        finalists = set(ranked[:plan.finalists])
        outside = [i for i in open_ if i not in finalists and i not in disagree]
        # the noise has a tail: a config next to a finalist may hide behind a spike, up to twice the largest seen
        spike = SPIKE_REACH * self._spike(logs, sigma)
        near_finalist = [i for i in outside if len(logs[i]) == 1 and logs[i][0] - estimate[best] <= spike + width(i)
                         and any(j in finalists for j in self.grid.rings(i)[0])] if spike > 0 else []
        asked = zip(RESAMPLE_REASONS[2:], (
            disagree,
            [i for i in outside if estimate[i] - estimate[best] < width(i)],
            [i for i in self._jumps(ranked, estimate, finalists, sigma) if i in outside],
            near_finalist,
            self._outliers(outside, logs, post, ranked, sigma)), strict=True)
        reasons: dict[int, str] = {}
        for reason, configs in asked:
            for i in configs:
                reasons.setdefault(i, reason)
        return {i: reasons[i] for i in sorted(reasons, key=lambda i: (estimate[i], i))}

    def _outliers(self, outside: list[int], logs: Mapping[int, list[float]], post: Posterior, ranked: list[int],
                  sigma: float) -> list[int]:
        """The model's outliers: configs outside the finalists screened once that the additive model of the
        posterior (no pairs) predicts faster than the finalists' cut, yet read above that prediction by more than
        ``band`` deviations of two samples' difference: the best behind one spiked sample, which its neighbours
        do not share (a true cliff reads the same again)."""
        if not post.predicted:
            return []
        cut = post.times[ranked[min(len(ranked), self.plan.finalists) - 1]] or 0.0
        if cut <= 0:
            return []
        bar = self.plan.band * sigma * SQRT2
        return [i for i in outside if len(logs[i]) == 1 and i in post.predicted
                and post.predicted[i] < math.log(cut) and logs[i][0] - post.predicted[i] > bar]

    def _spike(self, logs: Mapping[int, list[float]], sigma: float) -> float:
        """The largest gap (log time) between two samples of one config that read further apart than Gaussian noise
        of ``sigma`` ever would (twice the band, 5 standard deviations of their difference: the evidence that some
        samples are spiked); 0.0 when no two do. A config read once can hide behind a spike that large, not more."""
        bar = self.spike_gap(sigma)
        gaps = [abs(a - b) for run in logs.values() for a, b in zip(run, run[1:], strict=False)]
        return max((g for g in gaps if g > bar), default=0.0)

    def spike_gap(self, sigma: float) -> float:
        """How far apart (log time) two samples of one config read only when one is spiked: twice the band, 5
        standard deviations of the difference of two samples of noise ``sigma``."""
        return 2 * self.plan.band * sigma * SQRT2

    def posterior(self, samples: Samples) -> Posterior:
        """Each screened config's time, denoised by the landscape (empirical Bayes): its samples' median and the
        prediction of an additive model without pairs (fitted to every screened config, so that each effect pools
        many of them), weighted by how well each is known: the noise of one sample over the config's samples,
        against the model's own misfit (its residuals' variance less the noise's). Only where the model's misfit is
        below the noise of one sample (a smooth landscape under heavy noise, which then leans on its neighbours); a
        quiet space, or one rougher than its noise (a needle), keeps its own times, as do all until the noise is
        measured or while few configs are screened (3 per effect of the model)."""
        history = self.history(samples)
        noise = estimate_noise(history, self.plan.noise_floor)
        spike = self.spike_gap(noise.sigma) if noise is not None else math.inf
        times = self.estimates(history, noise is not None and noise.heavy, spike)
        timed = sorted(i for i, t in times.items() if t is not None and t > 0 and i in self.grid.point)
        model = AdditiveModel(self.grid, pairs=False)
        effects = sum(len(values) for values in self.grid.axes.values())
        sigma = noise.sigma if noise is not None else 0.0
        own = {i: sigma ** 2 / len(history[i] or (1,)) for i in timed}  # the noise of each config's median
        if noise is None or len(timed) < 3 * effects or not model.fit(times):
            return Posterior(times, own, noise)
        predicted = {i: model.predict(i) for i in timed}
        residual = {i: math.log(times[i] or 1.0) - predicted[i] for i in timed}
        misfit = max(math.fsum(r * r for r in residual.values()) / len(timed) - math.fsum(own.values()) / len(timed),
                     (sigma / 4) ** 2)
        if misfit >= sigma ** 2:  # the landscape is rougher than the noise (a needle, a quiet space): own times
            return Posterior(times, own, noise, predicted)
        denoised: dict[int, float | None] = dict(times)
        variance = {}
        for i in timed:
            weight = misfit / (misfit + own[i])
            denoised[i] = math.exp(predicted[i] + weight * residual[i])
            variance[i] = weight * own[i]
        return Posterior(denoised, variance, noise, predicted)

    def _jumps(self, ranked: list[int], estimate: Mapping[int, float], finalists: set[int], sigma: float) -> list[int]:
        """Configs next to a finalist (one step along one parameter) that read further above their best screened
        neighbour than the landscape's steps explain: ``band`` times the 90th percentile of every screened config's
        step up from its best neighbour, and the noise."""
        rise: dict[int, float] = {}
        near: dict[int, int] = {}
        for i in ranked:
            screened = [j for j in self.grid.rings(i)[0] if j in estimate]
            if screened:
                nearest = min(screened, key=lambda j: (estimate[j], j))
                rise[i], near[i] = estimate[i] - estimate[nearest], nearest
        if len(rise) < 10:
            return []
        steps = sorted(max(0.0, r) for r in rise.values())
        bar = self.plan.band * math.hypot(steps[(9 * len(steps)) // 10], sigma)
        return [i for i in ranked if i in rise and near[i] in finalists and rise[i] > bar]

    def neighbours(self, leaders: list[int], times: Mapping[int, float | None]) -> list[int]:
        """The leaders' unscreened neighbours: every leader's first ring, best leader first, then the second..."""
        rings = [self.grid.rings(leader) for leader in leaders]
        batch: list[int] = []
        for ring in range(3):
            for leader_rings in rings:
                batch += [other for other in leader_rings[ring] if other not in times and other not in batch]
        return batch

    def _check(self, times: Mapping[int, float | None]) -> list[int]:
        """The model's check (step 3): unscreened configs predicted faster than the finalists' last, best first."""
        if self.checks >= self.plan.model_rounds:
            return []
        self.checks += 1
        return (self.predicted_faster(times, [i for i in self.kept if i not in times]) or [])[:self.plan.model_batch]

    def predicted_faster(self, times: Mapping[int, float | None], candidates: Collection[int]) -> list[int] | None:
        """The ``candidates`` that the additive model of ``times`` predicts faster than the ``finalists``-th best,
        best first (step 3's bar); None when the model cannot be fitted."""
        ranked, model = self.leaders(times, self.plan.finalists), AdditiveModel(self.grid)
        last = times[ranked[-1]] if ranked else None
        if last is None or last <= 0 or not model.fit(times):
            return None
        return [i for y, i in sorted((model.predict(i), i) for i in candidates) if y < math.log(last)]

    def finalists(self, samples: Samples) -> list[int]:
        """The configs the race decides among (step 6), ascending: the ``finalists`` best screened (denoised:
        :meth:`posterior`), and after them those within the noise band of the best, up to ``max_finalists``."""
        plan = self.plan
        post = self.posterior(samples)
        times = post.times
        ranked = self.leaders(times, plan.max_finalists)
        chosen = ranked[:plan.finalists]
        if post.variance and chosen and (times[chosen[0]] or 0) > 0:
            best = chosen[0]
            for i in ranked[plan.finalists:]:
                width = plan.band * math.sqrt(post.variance.get(i, 0.0) + post.variance.get(best, 0.0))
                if (times[i] or 0) > 0 and math.log(times[i] or 1) - math.log(times[best] or 1) < width:
                    chosen.append(i)
        return sorted(chosen)

