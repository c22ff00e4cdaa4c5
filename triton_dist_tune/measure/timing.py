"""Samples: how both tuners time the calls they measure.

A **clock** (:mod:`~triton_dist_tune.measure.clocks`) times a span of work: device events on an accelerator, the
host clock on CPU ranks and under Triton's interpreter.

A **sample** is one timed span of calls, reported in ms per call:

- ``steady`` (the default timing mode): a GPU's speed depends on how busy it has been (after an idle gap it boosts
  its clock; kept busy it settles at its power limit, and a config that draws less power settles faster). A steady
  sample therefore first **settles** the device on the config under test (:class:`Steady` ``settle`` calls of its
  own, untimed), then times a **span** of ``span`` back-to-back calls, with no host synchronize and no exchange in
  between (the function's own collectives keep the ranks in step). The host only waits, before the span, until the
  device has run all but the last settling call, so that the span never starts with a backlog of queued calls (a
  head start that would hide a host-bound config's launch time), and the span is timed on the device from the end
  of the settling calls to the end of the last call, so that a host-bound function is timed as host-bound (its
  device idles between calls). A config under :data:`QUEUED_BELOW_MS` per call also times a few calls queued
  behind a short hold of the device, and its sample is the mean of both times (:func:`steady_span`); on a group of
  ranks its sample is the queued calls' time alone (:data:`GROUP_QUEUED_MS`: a group's span reads the slowest
  rank's host). The samples
  of one round run back to back, with one synchronize and one exchange
  per round (:meth:`~triton_dist_tune.measure.lockstep.Measurer.lockstep`), so the device never idles inside a
  round; a round's first sample settles longer (:data:`ROUND_SETTLE_MS`), after the idle gap of the exchange,
  unless one rank's device cannot have idled :data:`ROUND_IDLE_MS` (:func:`may_have_idled`); a screening sample
  of a device-bound call settles :data:`LONG_CALL_SETTLE_MS`.
  The leaders of the screening rounds end with one **settled block**: :data:`SETTLED_CYCLES` cycles in a row, each
  giving every leader one sample (in an order shuffled afresh each cycle), with no synchronize anywhere inside the
  block. On a device at its power limit the SM clock swings over several hundred milliseconds; interleaving the
  leaders' short samples across the whole block spreads that swing, and the lending of clocks between
  neighbours, over all of them alike, where one long sample per leader would catch each in its own phase. But
  that lending also hides what a heavy config's own power costs (the clock it would hold among the layers around
  it), so a settled sample of a heavy config (:data:`POWER_SETTLE_ABOVE_MS` per call or more) settles
  :data:`POWER_SETTLE_MS` first, long enough for the limiter to follow that config.
  The durations below were measured on an H100 (the settling probe, ``benchmarks/HISTORY.md``): from idle, a bf16
  GEMM at its power limit keeps its burst speed for 20-50 ms and reaches its sustained speed within 50-100 ms; a light
  config after a heavy one reaches its own sustained speed within 2 ms when the device stays busy; the limiter
  then cycles the SM clock (about 1,125-1,455 MHz) with a period of several hundred ms;
- ``cold``: one call after the L2 cache is flushed (and, by the caller, the ranks aligned): for functions that run
  alone after idle time.

The number of calls follows from a measured probe (:meth:`Steady.calls`), never from a guess.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import settings
from ..errors import BadInputError
from .clocks import Clock

TIMING_MODES = ("steady", "cold")
#: screening rounds: settling and timed span of a steady sample, in ms of the config's own calls. 2 ms of settling
#: for every config, side by side on one H200 (``benchmarks/results/session_h200_4``), chose a MoE config 1.145x the
#: best at M = 512 in 2 of 4 runs (12 of 18 within 1.02 against 13 of 18 with 5 ms): only long calls settle 2 ms.
#: (That MoE's samples were then counted from its eager probe, 2-5x its device time on the hosts measured since)
SCREEN_SETTLE_MS, SCREEN_SPAN_MS = 5.0, 5.0
#: a screening sample's span when the config's calls replay from a CUDA graph (:mod:`~triton_dist_tune.measure.graphs`;
#: its settling: :data:`GRAPH_SCREEN_SETTLE_MS`), both in the replays' device time. One H200, the MoE example's
#: configs at M = 16, 64 and 512 against a judge of long windows (``benchmarks/regime_check.py``,
#: ``results/session_h200_13``): 1 ms of settling ranked M = 512's best config 9% behind where 2 ms and more did not;
#: spans of 2 ms and 5 ms ranked every shape alike. Training figures: these three shapes chose it
GRAPH_SCREEN_SPAN_MS = 2.0
#: a screening sample's settling when the config's calls replay from a CUDA graph (device time). 3 ms, not 5: side by
#: side on one x2 H200 host (``results/session_h200_14``, with :data:`DEVICE_SETTLED_SPAN_MS` and three settled
#: leaders, since put back to six), the MoE validation judged on the host chose 14 of 15 within 1.02 against 11 of 15
#: (M = 512, where 1 ms was biased, 3 of 3 right against 1 of 3), the GEMM 9 of 9 against 6 of 9, and the README's
#: campaign took 64-67 s against 75-78 s alternating on one GPU
GRAPH_SCREEN_SETTLE_MS = 3.0
#: a sample of the settled block: the device is already busy (a config reaches its own sustained speed within
#: 2 ms after another), so a short settling, then a span long enough to time a host-bound config as such
SETTLED_SETTLE_MS, SETTLED_SPAN_MS = 5.0, 10.0
#: the settling of a settled sample of a config of :data:`POWER_SETTLE_ABOVE_MS` or more per call (a heavy kernel,
#: which can hold the device at its power limit), so that the limiter follows that config's own power: one H200 at
#: its 700 W limit, bench_fidelity.py's GEMMs at N = 4096, K = 14336, M = 8192 and 16384 (1.3-3.1 ms calls,
#: ``benchmarks/power_regimes.py``, ``results/session_h200_45``): interleaved samples that settled 5 or 10 ms read
#: 64x256 tiles within 0-2.5% of 128x256 ones (the clock the leaders shared), 20 ms 3-10% behind, 40-80 ms 7-16%
#: behind, as alone (8-11%); in an MLP (each call after a cuBLAS up projection) they cost 4-8% more per pair. With
#: 5 ms the tunings chose the 64x256 tiles in 6 of 8 tunings. Chosen on these two shapes (training figures)
POWER_SETTLE_MS, POWER_SETTLE_ABOVE_MS = 20.0, 0.5
#: the span of a settled sample whose calls a host's launches cannot pace: replays of a CUDA graph, and calls of
#: :data:`POWER_SETTLE_ABOVE_MS` or more on a device (a Triton launch from Python takes about 30 us; under
#: :data:`QUEUED_BELOW_MS` the sample also times queued calls), where :data:`SETTLED_SPAN_MS` is there to time a
#: host-bound config as such. For heavy calls the span is short beside their :data:`POWER_SETTLE_MS` of settling:
#: on one H200, bench_fidelity.py's GEMM at N = 8192, K = 4096, M = 16384 (1.9 ms calls), 10 ms spans were 6 of a
#: settled sample's 17 calls, and the key's device time was 2.15 s against the 2.1 s a 48-config key may take in all
#: (``results/session_h200_48``, call 4). Side by side with 10 ms on one H200 (``results/session_h200_49``, 7 GEMM
#: shapes, 5 of them held out of every rule, 3 fresh tunings each): 18 of 21 choices within 1.01 of the sustained
#: best both ways (the same 3 misses), 0.15-0.27 s less per key, 2.05-2.11 s at that shape against 2.26-2.29 s
DEVICE_SETTLED_SPAN_MS = 5.0
#: the leaders that get the settled block at the end of a steady race, and its cycles (one sample per leader each)
SETTLED_LEADERS, SETTLED_CYCLES = 3, 8
#: more leaders when the screening leader takes under :data:`FAST_LEADER_MS` per call: a call then takes a few
#: times the host's launch time at most, its span carries the host's noise, and three screening samples cannot
#: rank the many configs within a few percent of each other (on one H100 host, M = 128 GEMMs: 3 leaders chose
#: configs 8-9% slower than the best in 2 of 3 tunings, 6 leaders 1.9-3.2%; ``benchmarks/RESULTS.md``). The block
#: then costs about twice as long (~0.4 s more), which such a key's tuning affords. 0.1 ms is about three times a
#: Triton launch from Python (~30 us): a slower call is device-bound (at 0.25 ms, a 0.24 ms GEMM at M = 2048 on an
#: H200 got six leaders and its tuning took 43% of stock's time). A tuning timed on the device (CUDA graphs) keeps the
#: six: with three (tried in 1d6d2f2), the README's MoE campaign never chose M = 512's best config in 6 campaigns,
#: where six chose it in 3 of 6: its screening samples read it 4-8% slower than the config chosen, and only the
#: settled block, where it reached the six, ranked it first (``results/session_h200_14``)
SETTLED_LEADERS_FAST, FAST_LEADER_MS = 6, 0.1
#: the sift (:mod:`~triton_dist_tune.measure.race`): when the screening leader takes :data:`POWER_SETTLE_ABOVE_MS` per
#: call or more, the settled block starts after :data:`SIFT_AFTER` screening round(s) (a group of several ranks:
#: :data:`SIFT_AFTER_GROUP`, or once at most this many configs are left) with up to this many leaders,
#: its first :data:`SIFT_CYCLES` cycles sift them, and the :data:`SIFT_TOP` best go on, for :data:`HEAVY_CYCLES` cycles
#: in all (so does a heavy block with nothing to sift, not :data:`SETTLED_CYCLES`: its leaders get as many settled
#: samples as a sifted block's, and it never costs more). Short screening samples misrank heavy configs on a device at
#: its power limit: on one H200 (bench_fidelity.py's GEMMs, N = 4096, K = 14336, M = 8192 and 16384) the two 128x256
#: tiles, best alone by 8-14%, reached neither the 3 leaders nor 6 in about half of 24 tunings, where every settled
#: block they reached chose one; 17-20 configs were left after 2 screening rounds. One settled cycle of 12 plus 5 of 3
#: costs about what 8 of 3 and a third screening round did. Chosen on those tunings' logs
#: (``results/session_h200_46``; training). One screening round before the sift, not 2 (the fiftieth session): in
#: all 147 recorded heavy tunings of sessions 46-49 (8 shapes on one H200, ``benchmarks/screening_ranks.py``) the
#: first screening round ranked the sustained oracle's best config 11th or better and one within 1.01 9th or better
#: (the mean of two rounds: 14th and 11th), so 12 leaders held it; the second round cost about 0.3 s per heavy key.
#: Under fresh noise (``benchmarks/sift_noise.py``) as good at 2-5% and with spikes, a little worse at 10% (chosen
#: over 1.01 in 16% of races, not 11%). Training figures (those tunings chose it). Side by side on one H200
#: (``results/session_h200_50``, 8 shapes, 2 of them new, 26 fresh tunings each): 26 of 26 within 1.01 of the
#: sustained best against 24 of 26, 0.34-0.59 s less per key (the 48-config bar's shape: 1.69-1.72 s, not 2.02-2.10)
SETTLED_LEADERS_HEAVY, SIFT_AFTER, SIFT_CYCLES, HEAVY_CYCLES = 12, 1, 1, 6
#: the screening rounds before the sift in a race of a group of several ranks: 2, as before the fiftieth session.
#: Its samples are the MAX over its ranks of calls beside collectives, noisier than one rank's, and the evidence for
#: :data:`SIFT_AFTER` is one rank's: under 10% Gaussian noise one round chose over 1.01 in 16% of races, two in 11%
#: (``benchmarks/sift_noise.py``), where at 2-5% and with spikes one did as well
SIFT_AFTER_GROUP = 2
#: how many leaders the sift keeps. 4, not 3: its one settled round ranked the best tile fourth in 2 of 68 recorded
#: sifted tunings on one H200 (the up projection, N = 14336, K = 4096, M = 8192, 2.7% and 0.2% behind the third,
#: chosen 1.08 and 1.11 the sustained best), and in 0 ranked it fifth or lower; replayed, the 4 best held a config
#: within 1.01 in 49 of 49 tunings of sessions 46-47 (``results/session_h200_47/sift_replay.txt``), and side by side
#: in one process (``results/session_h200_48``, call 1) 4 chose within 1.01 in 6 of 6 held-out tunings of that
#: family against 5 of 6 for 3 (the training family: 6 of 10 both, every choice within 1.011). It costs one leader's
#: 5 settled samples, 0.15-0.2 s per heavy key (2.33-2.36 s against 2.17-2.18 s at N = 8192, K = 4096, M = 16384)
SIFT_TOP = 4
#: a config whose first screening sample and warm-up probe each take at least this many times the leader's leaves
#: the race after that round (:attr:`~triton_dist_tune.measure.race.RacePlan.far_behind`; on a device clock): of
#: bench_fidelity's 40 GEMM configs on one H200 at N = 8192, K = 4096, M = 16384, 8 took 2-7 times the best (one to
#: two calls to settle and one to two to time each) and the rest of the screening timed them again. It pays for the
#: sift's fourth leader: their second screening round cost 0.11-0.21 s per heavy key in the tunings of
#: ``results/session_h200_48`` (call 1), the fourth leader 0.15-0.2 s. (A heavy race now sifts after its first
#: screening round, :data:`SIFT_AFTER`, so what this saves is a light race's later rounds)
FAR_BEHIND_RACE = 2.0
#: extra settling of a round's first sample, after the idle gap of the round's exchange (an exchange's gap is short:
#: measured, gaps of 1-10 ms lend no burst, gaps of 30 ms or more do, for 20-50 ms)
ROUND_SETTLE_MS = 25.0
#: one rank: a round's first sample settles no longer than the others when the host waited for the device less than
#: this many ms before (a shorter idle gap lends no burst, above); a group always does (its ranks' calls must match).
#: One H200, 840-config GEMM at M = 8192: 2.3-3.3 s per key without, 3.0-4.1 s with (``results/session_h200_9``)
ROUND_IDLE_MS = 10.0
#: the screening settling of a config of :data:`PROBE_ONE_CALL_MS` or more per call (4 of its calls or more): a
#: config reaches its own sustained speed within 2 ms when the device stays busy (above)
LONG_CALL_SETTLE_MS = 2.0
#: at most this many calls in a settling run or a span (a function of a few microseconds)
MAX_CALLS = 20000
#: timed calls in the probe that gives a config's time per call; one when the config probed before it took at least
#: :data:`PROBE_ONE_CALL_MS` per call (:func:`probe_calls`): such a call is device-bound, and a probe's span starts
#: behind the call before it (:func:`probe`), so one call reads its device time, where a probe sizes samples and
#: screens configs 1.5x behind (:data:`~triton_dist_tune.measure.probe_screen.FAR_BEHIND`); at M = 8192 GEMMs two
#: calls fewer per config
PROBE_CALLS, PROBE_ONE_CALL_MS = 3, 0.5
#: the queued part of a steady sample: about this many ms of calls (1 to :data:`QUEUED_MAX_CALLS` calls), timed
#: after the device was held long enough for the host to queue them all; only for configs faster than
#: :data:`QUEUED_BELOW_MS` per call (a slower call is device-bound on any launch path: its span is its device time)
QUEUED_MS, QUEUED_MAX_CALLS, QUEUED_BELOW_MS = 0.2, 8, 1.0
#: the queued calls' share of a sample's time (the span's: the rest)
QUEUED_WEIGHT = 0.5
#: the device hold before the queued calls: twice their span time (which bounds the host's time to launch them),
#: at most :data:`HOLD_MAX_MS` (an idle gap this short lends no burst of clock), plus a margin for the two events
HOLD_MAX_MS, HOLD_MARGIN_MS = 0.5, 0.05
#: the queued part of a sample on a **group** of ranks: about this many ms of calls (:data:`GROUP_QUEUED_MIN_CALLS` to
#: :data:`QUEUED_MAX_CALLS`) behind a hold of twice their time (at most :data:`GROUP_HOLD_MAX_MS`), timed from the
#: end of the first (which absorbs the ranks' arrival skew); the sample is theirs alone. A group's span reads the
#: slowest rank's host: on 4 H200s GEMM-RS spans spread 1.36-1.76 over rounds, queued calls 1.004-1.005
#: (``benchmarks/diagnose_collective_noise.py``). Between heavy layers the host runs ahead: device time is the cost
GROUP_QUEUED_MS, GROUP_QUEUED_MIN_CALLS, GROUP_HOLD_MAX_MS = 1.5, 3, 3.0


@dataclass(frozen=True)
class Steady:
    """The calls of one steady sample: ``settle`` untimed, then ``span`` timed, with nothing in between; then, when
    ``queued`` is set, a hold of the device for ``hold_ms`` and ``queued`` calls timed as one span, all queued
    before the device reaches them."""

    settle: int
    span: int
    queued: int = 0
    hold_ms: float = 0.0
    #: the queued calls alone give the sample's time, timed from the end of the first (a group of ranks)
    device_only: bool = False

    @property
    def queued_timed(self) -> int:
        """The queued calls inside the timed span: all of them, or all but the first (``device_only``)."""
        return self.queued - 1 if self.device_only else self.queued

    @staticmethod
    def calls(per_call_ms: float, settle_ms: float, span_ms: float, span: int | None = None) -> Steady:
        """The sample for a config that takes ``per_call_ms`` per call (measured by a probe): about ``settle_ms``
        and ``span_ms`` of calls (at least one each; one each when no probe ran); ``span`` (the ``batch`` option)
        fixes the timed calls."""
        def count(ms: float) -> int:
            if not per_call_ms > 0:
                return 1
            return max(1, min(MAX_CALLS, math.ceil(round(ms / per_call_ms, 6))))

        return Steady(count(settle_ms) if settle_ms > 0 else 0, span or count(span_ms))


def timing_mode(option: str | None) -> str:
    """The timing mode: ``TRITON_DIST_AUTOTUNE_TIMING`` when set (it overrides every function of the job), else
    ``option``, else ``steady``."""
    if option is not None and option not in TIMING_MODES:
        raise BadInputError(f"timing must be one of {', '.join(TIMING_MODES)}, not {option!r}")
    return settings.current().timing or option or "steady"


def steady_calls(host: bool, per_call_ms: float, settled: bool, first: bool, batch: int | None,
                 ranks: int = 1, graph: bool = False, call_ms: float | None = None) -> Steady:
    """The calls of a steady sample of a config taking ``per_call_ms``: a screening or a ``settled`` one, settling
    longer when ``first`` in its round (or settled block) after the device may have idled (:func:`may_have_idled`),
    a screening one shorter when its calls are long (:data:`LONG_CALL_SETTLE_MS`), a settled one longer
    (:data:`POWER_SETTLE_MS`: the power limiter follows the config); ``batch`` fixes the timed calls.
    ``host``: by the host clock's rules (no power state to settle: the settling is one call, and none for a screening
    sample that is not its round's first, whose ranks the previous call's collective has just aligned; no queued
    calls). ``ranks``: the group's size; over one, a fast config's sample is its queued calls alone
    (:data:`GROUP_QUEUED_MS`). ``graph``: a call is a replay of the config's CUDA graph, ``per_call_ms`` its device
    time (:data:`GRAPH_SCREEN_SETTLE_MS` and :data:`GRAPH_SCREEN_SPAN_MS` screening, a settled span of
    :data:`DEVICE_SETTLED_SPAN_MS`), and ``call_ms`` one of the function's calls in it (a graph holds several calls of
    a fast function: the heavy rule, :data:`POWER_SETTLE_ABOVE_MS`, is of one call). The group agrees on ``host``,
    ``per_call_ms`` and ``call_ms``: every rank makes the same calls."""
    if settled:
        settle, span = SETTLED_SETTLE_MS, DEVICE_SETTLED_SPAN_MS if graph else SETTLED_SPAN_MS
        if not host and (per_call_ms if call_ms is None else call_ms) >= POWER_SETTLE_ABOVE_MS:
            settle, span = POWER_SETTLE_MS, DEVICE_SETTLED_SPAN_MS
    else:
        settle, span = (GRAPH_SCREEN_SETTLE_MS, GRAPH_SCREEN_SPAN_MS) if graph else (SCREEN_SETTLE_MS, SCREEN_SPAN_MS)
        if not host and per_call_ms >= PROBE_ONE_CALL_MS:
            settle = LONG_CALL_SETTLE_MS
    settle += ROUND_SETTLE_MS if first else 0.0
    if host and per_call_ms > 0:
        settle = min(settle, per_call_ms) if first or settled else 0.0
    steady = Steady.calls(per_call_ms, settle, span, batch)
    if host or not 0 < per_call_ms < QUEUED_BELOW_MS:
        return steady
    group = ranks > 1
    queued_ms, fewest, hold_max = ((GROUP_QUEUED_MS, GROUP_QUEUED_MIN_CALLS, GROUP_HOLD_MAX_MS) if group
                                   else (QUEUED_MS, 1, HOLD_MAX_MS))
    queued = max(fewest, min(QUEUED_MAX_CALLS, math.ceil(queued_ms / per_call_ms)))
    hold = min(hold_max, 2 * queued * per_call_ms) + HOLD_MARGIN_MS
    return Steady(steady.settle, steady.span, queued, hold, device_only=group)


def may_have_idled(clock: Clock, ranks: int) -> bool:
    """Whether a round's first sample settles :data:`ROUND_SETTLE_MS` longer: always on a group of ranks (every
    rank must make the same calls, and each rank's idle gap is its own), else when ``clock``'s device may have
    idled :data:`ROUND_IDLE_MS` or more."""
    idle = getattr(clock, "idle_ms", None)
    return ranks > 1 or idle is None or idle() >= ROUND_IDLE_MS


@dataclass(frozen=True)
class SampleToken:
    """The clock's tokens of one steady sample: its span, and its queued calls (None: none were timed)."""

    span: Any
    queued: Any = None


def read_sample(clock: Clock, token: SampleToken, steady: Steady) -> float:
    """A steady sample's time per call, ms (after a synchronize): the span's time per call and, when the queued
    calls were timed, theirs, weighted :data:`QUEUED_WEIGHT` (an even mean); ``steady.device_only`` (a group of
    ranks): the queued calls' alone, all but the first. See :func:`steady_span`."""
    if token.queued is not None and steady.device_only:
        return clock.read(token.queued) / steady.queued_timed
    span = clock.read(token.span) / steady.span
    if token.queued is None:
        return span
    return (1 - QUEUED_WEIGHT) * span + QUEUED_WEIGHT * clock.read(token.queued) / steady.queued_timed


def steady_span(clock: Clock, call: Callable[[], Any], steady: Steady) -> SampleToken:
    """Enqueue one steady sample: ``steady.settle`` untimed calls, then ``steady.span`` calls timed as one span,
    then, when ``steady.queued`` is set, the queued calls; no synchronize. Returns the clock's tokens: read them
    with :func:`read_sample` after the round's synchronize.

    Before the span the host waits until the device has run all but the last settling call: the device stays
    busy (that call is still queued), and the span starts with at most one call queued ahead of it. Without the
    wait, the backlog a device-bound config leaves in the queue would give the next config's span a head start
    of many milliseconds, and a host-bound config would be timed at its device speed.

    The span therefore times a config as a program that the host paces sees it: a host-bound config at its launch
    rate. Between heavy layers the host runs ahead and the same config costs only its device time; two host-bound
    configs that launch alike tie on their spans, however far apart their device times (a 22% gap measured on an
    H100, ``benchmarks/bench_fidelity.py``). So a fast config's sample also times a few **queued** calls: the
    device is held (a spin kernel of ``steady.hold_ms``, shorter than any idle gap that lends a burst of clock)
    while the host queues them, and they then run back to back at the device's speed. The sample's time is the
    mean of the two views (:func:`read_sample`); a device-bound config reads the same in both. On a group of ranks
    (``steady.device_only``) the first queued call runs untimed (it absorbs the ranks' arrival skew) and the
    sample is the other queued calls' time alone."""
    mark = None
    for i in range(steady.settle):
        if i == steady.settle - 1:
            mark = clock.mark()  # before the last settling call
        call()
    if mark is not None:
        clock.wait(mark)
    start = clock.start()
    for _ in range(steady.span):
        call()
    span = clock.stop(start)
    if not steady.queued:
        return SampleToken(span)
    # the queued calls run even where the device cannot be held: the calls a rank makes never depend on its own
    # device (the function's collectives must match on every rank); they are then timed as they come
    clock.hold(steady.hold_ms)
    if steady.device_only:  # a group: the first queued call absorbs the ranks' arrival skew, untimed
        call()
    start = clock.start()
    for _ in range(steady.queued_timed):
        call()
    return SampleToken(span, clock.stop(start))


def cold_sample(clock: Clock, call: Callable[[], Any]) -> float:
    """One cold sample: one call after an L2 flush, synchronized; ms."""
    clock.flush()
    start = clock.start()
    call()
    token = clock.stop(start)
    clock.synchronize()
    return clock.read(token)


def probe_calls(previous_ms: float) -> int:
    """The timed calls of a config's probe, from the time per call of the config probed before it (the group's,
    so that every rank makes the same calls): the configs of one key take times of one order, and a call of
    :data:`PROBE_ONE_CALL_MS` or more is device-bound, so one call sizes its samples (at the largest GEMMs this
    halves the warm-up's calls); :data:`PROBE_CALLS` otherwise, and for the first config."""
    return 1 if previous_ms >= PROBE_ONE_CALL_MS else PROBE_CALLS


def probe(clock: Clock, call: Callable[[], Any], lead: bool = True, calls: int = PROBE_CALLS) -> float:
    """A config's time per call, for sizing its samples: one untimed call (unless ``lead`` is false: a warm-up run
    just ran it), then ``calls`` calls timed as one span; ms per call.

    No synchronize between the lead call and the span: the span's start waits on the device behind that call, so a
    device-bound config's first timed call is queued by the time the device reaches it and the probe reads its
    device time (a host-bound config's still reads the host's launch rate). Timed after a synchronize, the span
    began on an idle device that waited for the host's launch: on one H200 (``benchmarks/probe_check.py``,
    ``results/session_h200_24``), one-call probes of an 840-config GEMM's best configs read 1.10 times their
    device time (median; 90th percentile 1.50) at M = 4096 and 1.46 at M = 1024, against 1.02 and 1.09 behind the
    call before them. (The larger misreading the tunings showed, 1.52-1.60 at M = 4096, was the argument check
    inside the probe's first call: :meth:`~triton_dist_tune.measure.arguments.ArgumentState.after_run`.)"""
    if lead:
        call()
    steady = Steady(0, calls)
    token = steady_span(clock, call, steady)
    clock.synchronize()
    return read_sample(clock, token, steady)
