"""Typed records shared by measuring, the crash journal, the disk cache, the summary table and the command line.

One :class:`Outcome` per config of one tuning: what the group agreed happened to it. The same record is a row of
the summary table, a ``measured`` / ``failed`` / ``stopped`` line of the journal and an element of a cache
entry's ``measurements``; :meth:`Outcome.to_json` and :meth:`Outcome.from_json` are the only (de)serializers.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

#: what happened to a config, as agreed by the group:
#: ``measured`` (in the running to the end), ``stopped`` (left the race: clearly slower than the leader),
#: ``failed`` (raised, crashed, hung or gave a wrong result on some rank), ``pruned`` (not kept by ``prune_fn``)
State = Literal["measured", "stopped", "failed", "pruned"]
STATES: tuple[str, ...] = ("measured", "stopped", "failed", "pruned")
#: the phase of a config in which ``autotune`` runs the function once with Triton's launches turned into compiles
#: (:mod:`~triton_dist_tune.measure.compile_pass`): best-effort, nothing that happens in it blames the config
COMPILE_PASS = "compile pass"
#: what a decision's times are, config by config: the median of its samples, or, in a race whose samples read
#: further apart than :data:`~triton_dist_tune.measure.noise.NOISY` each, their least sample
#: (:meth:`~triton_dist_tune.measure.race.Race.location`)
MEDIAN, LEAST = "median", "least"
#: the phase of a config in which its kernels first run on the device (its first call, which also probes its time)
WARMUP = "warmup"
#: a config's warm-up run again by every rank of a group because some rank's run raised from the tuner's NaN fill
#: (:meth:`~triton_dist_tune.measure.guarding.Guarding._again_after_fill`)
WARMUP_AGAIN = "warmup again"
#: how a run that raised from the tuner's NaN fill (its check of outputs written whole) is named on the failure board
#: and in the journal: no config is blamed for it, and the next attempt fills nothing
#: (:meth:`~triton_dist_tune.measure.arguments.ArgumentState.never_fill`)
FROM_THE_FILL = "raised from the tuner's NaN fill of written outputs"


def finite_number(value: Any) -> bool:
    """Whether ``value`` is a finite number a float can hold (not a bool): what a time read back from a file may be.
    A JSON integer too large for a float (``1e400`` written as digits) is not one: ``math.isfinite`` raises on it."""
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def a_date(seconds: float) -> bool:
    """Whether unix time ``seconds`` is one this platform's clock can show (``time.localtime`` takes it): a time read
    back from a file that is not (``1e300``) is read as not recorded."""
    try:
        time.localtime(seconds)
    except (OverflowError, OSError, ValueError):
        return False
    return True


def group_samples(value: Any) -> list[float]:
    """The group samples (ms) of a read-back outcome's ``round_times``: a list of finite, non-negative numbers, else
    none (a damaged record, or one written before they were kept: its time is kept as it was)."""
    ok = isinstance(value, list) and all(finite_number(t) and t >= 0 for t in value)
    return [float(t) for t in value] if ok else []


def recorded_statistic(record: dict[str, Any]) -> str:
    """What a stored decision's times are (its ``statistic``): :data:`LEAST` where it says so, else :data:`MEDIAN`
    (files written before the field was, and ``contextual_autotune``'s before it too, hold medians)."""
    return LEAST if record.get("statistic") == LEAST else MEDIAN


@dataclass
class Outcome:
    """What the group knows of one config after (part of) a tuning.

    ``time`` is the group's time in ms, made from the group's samples, one per round: the slowest rank's time in
    that round (the MAX over ranks). It is their median; or, where the race's samples were noisy, their least; or,
    for a leader of the race's settled rounds, its drift-free time (:attr:`drift_free`). So it may be less than
    some rank's own median (``own``, ``per_rank``). ``spread`` is the relative half-width of the group's uncertainty
    about it (0.02: +-2%), ``per_rank`` each rank's median, and ``samples`` how many samples each rank took (a
    sample is one timed call, or one batch of back-to-back calls in steady timing, reported per call).
    """

    index: int
    config: str
    state: State
    time: float | None = None
    spread: float | None = None
    per_rank: list[float] | None = None
    samples: int = 0
    #: the ranks ``per_rank`` is of, where not ranks 0, 1, ... in order (a ``contextual_autotune`` key some ranks
    #: met); None: every rank in order
    per_rank_of: list[int] | None = None
    error: str | None = None
    #: this rank's own time: the median of its own samples (not agreed; for logs only)
    own: float | None = None
    #: True when this outcome was read from an earlier attempt's journal instead of measured now
    resumed: bool = False
    #: the position of each of this config's rounds in the tuning's measurement order (for drift plots)
    order: list[int] = field(default_factory=list)
    #: group time of each round this config took part in (ms), in order
    round_times: list[float] = field(default_factory=list)
    #: True when ``time`` stands in for a sample: the config was screened by its warm-up probe alone, far behind
    #: (a bound, never sampled again; :mod:`~triton_dist_tune.measure.probe_screen`)
    probed: bool = False
    #: True when ``time`` is a drift-free settled time that stands when times are taken again from the samples
    #: (:func:`~triton_dist_tune.measure.noise.retaken`, :meth:`least`), of either statistic: a heavy race's settled
    #: leader's (sifted or not; that race's noise is the power limiter's clock swing, which its drift-free ratios
    #: take out, and its screening samples are what the sift distrusts:
    #: :meth:`~triton_dist_tune.measure.standings.Standings._rank_key`); and under noise any settled leader's in a
    #: replicas' first pass where some share raced heavy (:func:`~triton_dist_tune.measure.replicas.settled_alike`:
    #: one kind across shares). Elsewhere a settled leader's drift-free time
    #: stands under the median statistic only: :attr:`drift_free` (a ``contextual_autotune`` journal that says
    #: ``settled_time`` was written by a quiet race before that field was:
    #: :func:`~triton_dist_tune.contextual.tracks.journaled_drift_free`)
    settled_time: bool = False
    #: a settled leader's time under the median statistic, whatever its race's statistic was: its drift-free time
    #: (:meth:`~triton_dist_tune.measure.standings.Standings._drift_free`), which the race ranks it by where its
    #: samples are quiet, and which a time taken again as a median (:func:`~triton_dist_tune.measure.noise.retaken`:
    #: read back from a journal beside a quiet race; a ``contextual_autotune`` close contender's, the drift-free
    #: median of its closing rounds) takes instead of the median of all its samples, screening ones included. Under
    #: noise a race that is not heavy times it by its least sample, and so does :meth:`least`.
    #: None: no settled samples (its median is of all its samples)
    drift_free: float | None = None
    #: True when the config ran once, untimed, and was chosen as the only one its key's space held after pruning
    #: (:mod:`~triton_dist_tune.measure.once`): ``time`` is None, and nothing is measured
    untimed: bool = False

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"unknown outcome state {self.state!r}")

    @property
    def usable(self) -> bool:
        """Whether the config can be chosen (it has a time and did not fail)."""
        return self.state in ("measured", "stopped") and self.time is not None

    def least(self) -> float:
        """Its time under a noisy race's statistic: its least sample (``round_times``), or its time where it has no
        sample or where that is a drift-free settled time (:attr:`settled_time`)."""
        if self.round_times and not self.settled_time:
            return float(min(self.round_times))
        return float(self.time if self.time is not None else math.inf)

    def to_json(self) -> dict[str, Any]:
        """A standard-JSON object (no NaN or infinity). Field by field, lists copied: ``dataclasses.asdict`` took
        0.3 s of a campaign's rank on one H200 host (every outcome of every key is written to the cache)."""
        data = {name: getattr(self, name) for name in _OUTCOME_FIELDS}
        for name in ("per_rank", "per_rank_of", "order", "round_times"):
            if data[name] is not None:
                data[name] = list(data[name])
        for name in ("time", "spread", "own", "drift_free"):
            value = data[name]
            if value is not None and not math.isfinite(value):
                data[name] = None
        return data

    @classmethod
    def from_json(cls, data: Any) -> Outcome | None:
        """The outcome in ``data``, or None when ``data`` is not a well-formed outcome (damaged files)."""
        if not isinstance(data, dict) or type(data.get("index")) is not int or data.get("state") not in STATES:
            return None
        if not isinstance(data.get("config"), str):
            return None
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        time = values.get("time")
        if time is not None and not (finite_number(time) and time >= 0):
            return None
        if values["state"] in ("measured", "stopped") and time is None and values.get("untimed") is not True:
            return None
        if not _typed_right(values):
            return None
        if "round_times" in values:  # a time may be taken again from them (function/decide.py of_statistic)
            values["round_times"] = group_samples(values["round_times"])
        drift_free = values.get("drift_free")
        if drift_free is not None and not (finite_number(drift_free) and drift_free >= 0):
            values.pop("drift_free")  # damaged: the median of its samples
        # damaged: not a drift-free time, nor a bound, nor resumed, nor untimed
        for flag in ("settled_time", "probed", "resumed", "untimed"):
            if type(values.get(flag)) is not bool:  # (a NaN kept there made ``list --json`` fail whole)
                values.pop(flag, None)
        if not isinstance(values.get("error"), (str, type(None))):
            values.pop("error")  # damaged: no error text
        if not _ranks_of(values.get("per_rank_of"), values.get("per_rank")):
            values.pop("per_rank_of", None)  # damaged: the times unlabelled
        try:
            return cls(**values)
        except (TypeError, ValueError):
            return None


def distinct_ranks(ranks: Any) -> bool:
    """Whether ``ranks`` (read back) is a list of distinct ranks: non-negative integers, none twice."""
    return (isinstance(ranks, list) and all(type(r) is int and 0 <= r < 2**31 for r in ranks)
            and len(set(ranks)) == len(ranks))


def _ranks_of(ranks: Any, times: Any) -> bool:
    """Whether ``ranks`` can label the per-rank ``times``: distinct ranks, one per time."""
    return distinct_ranks(ranks) and isinstance(times, list) and len(ranks) == len(times)


def _typed_right(values: dict[str, Any]) -> bool:
    """Whether a read-back outcome's fields that are shown and computed with have their types: ``spread`` and
    ``own`` a finite number or null, ``per_rank`` a list of finite numbers or null, ``order`` a list of integers,
    ``samples`` an integer (a damaged or foreign row is left out, never a crash)."""
    per_rank, order = values.get("per_rank"), values.get("order", [])
    return (all(values.get(name) is None or finite_number(values[name]) for name in ("spread", "own"))
            and (per_rank is None or isinstance(per_rank, list) and all(finite_number(t) for t in per_rank))
            and isinstance(order, list) and all(type(i) is int for i in order)
            and type(values.get("samples", 0)) is int)


#: :class:`Outcome`'s field names, in order (its JSON object's keys)
_OUTCOME_FIELDS = tuple(f.name for f in fields(Outcome))


@dataclass
class Decision:
    """The group's choice for one key: the chosen config, how sure the choice is, and every config's outcome."""

    index: int
    config: str
    time: float
    #: runner-up time / chosen time - 1 (0.04: the runner-up is 4% slower); None with a single usable config
    margin: float | None
    #: True when the runner-up is within the measurement's uncertainty: the two are a tie for practical purposes
    near_tie: bool
    runner_up: int | None
    outcomes: list[Outcome]
    #: "steady" or "cold"
    timing: str = "steady"
    rounds: int = 0
    #: this rank's wall time of the tuning, from its start to the decision (before the exchange that waits for the
    #: cache's write): each rank's own, not agreed, like :attr:`breakdown` and each outcome's ``own`` (ranks enter a
    #: tuning at their own times and leave its last exchange at their own times). The cache record's
    #: ``tuning_seconds`` (what ``show`` and ``list`` print) and the console summary are group rank 0's; no two
    #: records of one tuning differ (rank 0 alone writes it; a campaign copies its record as it is to other disks),
    #: and nothing the ranks agree on or compare reads it. 0 when served from the cache
    seconds: float = 0.0
    #: how the configs were chosen for measuring: "" (every kept config raced) or the search's summary line
    search: str = ""
    #: how the samples were timed: "eager" (launched by the host) or "graph" (device time: CUDA graph replays)
    clock: str = "eager"
    #: True when a cut (the time budget) ended the measuring early: the best measured so far, provisional (the
    #: disk cache records it so, and a later job tunes the key again instead of serving it)
    cut: bool = False
    #: True when this decision was served from the disk cache (not tuned by this process)
    cached: bool = False
    #: where this rank's seconds of the tuning went (None: served from the cache)
    breakdown: TimeBreakdown | None = None
    #: what the times are: :data:`MEDIAN` (each config's median sample) or :data:`LEAST` (its least sample: the
    #: race's samples were noisy); the race's, at its end, so of the chosen config and those raced to the end
    statistic: str = MEDIAN
    #: True when the key's space held one config after pruning: run once, never timed (``time`` NaN, no margin)
    untimed: bool = False

    @property
    def time_or_none(self) -> float | None:
        """The chosen config's time, or None where it was not timed (:attr:`untimed`)."""
        return None if self.untimed else self.time


#: the parts of a tuning's wall time, in the order a breakdown lists them (see :class:`TimeBreakdown`)
TIME_PARTS: tuple[str, ...] = ("compile", "capture", "warmup", "screening", "race", "host", "exchange", "restore",
                               "model", "other")


@dataclass
class TimeBreakdown:
    """Where the seconds of one tuning of one key went, on one rank (group rank 0's in the summary line and the cache
    record; each rank's in its own log). The parts are this rank's wall time, exclusive of each other, and sum to
    ``wall`` (``other`` is the remainder); :mod:`~triton_dist_tune.measure.breakdown` fills them.

    ``compile``: compiling ahead and waiting for compiles (``compiled`` configs); ``capture``: CUDA-graph captures;
    ``warmup``: the configs' warm-up runs (checked run, ``n_warmup`` runs, probe); ``screening`` and ``race``: the
    device time of the samples of a search's stages and of the race (each sample's calls, settling ones included,
    times the time per call its clock measured: device time on a GPU); ``host``: the rest of those rounds' wall
    time (launches the device did not hide, synchronizes, the loop between samples); ``exchange``: the group's
    collectives (``exchanges`` of them: agreement, cache lookup, journals, warm-up and round exchanges);
    ``restore``: saving, checking and putting back the arguments; ``model``: the search's model (seeds, each
    stage's proposals, the finalists); ``other``: the rest (the reference run, journals, the cache's files,
    logging; a ``sharded`` measuring too). ``floor`` is the device-time floor: the sum, over the configs this rank
    ran, of the calls it launched of each (warm-ups, samples, captures) times that config's own time per call (the
    median of its samples on this rank; its probe when it has none).
    """

    wall: float = 0.0
    compile: float = 0.0
    capture: float = 0.0
    warmup: float = 0.0
    screening: float = 0.0
    race: float = 0.0
    host: float = 0.0
    exchange: float = 0.0
    restore: float = 0.0
    model: float = 0.0
    other: float = 0.0
    compiled: int = 0
    exchanges: int = 0
    floor: float = 0.0

    def text(self) -> str:
        """One line: ``1.84 s: compile 0.52 (12 configs), capture 0.00, warm-up 0.31, ...; device floor 0.20 s``."""
        names = {"warmup": "warm-up", "exchange": "exchanges"}
        parts = []
        for part in TIME_PARTS:
            note = {"compile": f" ({self.compiled} configs)", "exchange": f" ({self.exchanges})"}.get(part, "")
            parts.append(f"{names.get(part, part)} {getattr(self, part):.2f}{note}")
        return f"{self.wall:.2f} s: {', '.join(parts)}; device floor {self.floor:.2f} s"

    def to_json(self) -> dict[str, Any]:
        """A standard-JSON object."""
        return {k: (v if math.isfinite(v) else 0.0) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: Any) -> TimeBreakdown | None:
        """The breakdown in ``data``, or None when ``data`` is not one (an older record has none)."""
        if not isinstance(data, dict):
            return None
        values = {}
        for f in fields(cls):
            value = data.get(f.name, 0)
            if not finite_number(value):
                return None
            values[f.name] = int(value) if f.name in ("compiled", "exchanges") else float(value)
        return cls(**values)
