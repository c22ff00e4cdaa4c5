"""What this rank knows of the (kernel, key)s it launches, and the choices made in this process.

- :class:`LocalTrack`: one (kernel, key) as this rank met it: its autotuners, its pruning, its crash journal and
  the arguments of its first launch (to compile ahead with). (The group's view of it, identical on every rank, is a
  :class:`~triton_dist_tune.contextual.schedule.Track`.)
- The process-wide tables of choices, both per group (a choice made by one group, or by a rank alone, is never
  taken for another group's): per autotuner and key (:func:`decided_config`, :func:`decide`, :func:`undecide`,
  which also set the kernel's own ``cache``), and per track id (:func:`group_choice`, :func:`remember_choice`,
  :func:`forget_choice`), which holds the choices of the keys this rank did not launch as well.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import settings
from ..disk.cache import DiskCache, entry_id, source_of
from ..errors import describe_error
from ..faults.evidence import merge
from ..faults.journal import Journal
from ..faults.recovery import journal_path
from ..group import codec
from ..group.channel import Group
from ..records import Outcome, distinct_ranks, finite_number, group_samples
from ..space import describe
from . import intercept

#: a track's id: (the ``triton.autotune`` wrapper's :func:`~.intercept.track_id`, the key's text)
TrackId = tuple[str, str]


@codec.record
@dataclass
class TrackInfo:
    """What a rank tells the group of a (kernel, key) it met (:meth:`LocalTrack.info`, sent once, in the run it was
    first met): what the group's :class:`~triton_dist_tune.contextual.schedule.Track` is made from."""

    #: the kernel's name, for messages
    name: str
    #: each config described (:func:`~triton_dist_tune.space.describe`, one line each)
    descriptions: list[str]
    #: the cache entry of the (kernel, key), and the config space's text
    entry: str
    space_text: str
    #: the configs this rank's own pruning keeps, or the text of the error it raised
    pruned: list[int] | str
    #: the jitted function (:func:`~.intercept.jit_id`) and the wrapper's key names, to compare wrappers across ranks
    kernel: str | None = None
    keys: list[str] = field(default_factory=list)
    #: the configs the early pruning keeps, the perf model's estimates and top_k (:attr:`LocalTrack.pruning`);
    #: top_k is Any: without a perf model Triton never reads it, and ``"top_k": None`` is a common spelling
    pruning: tuple[list[int], dict[int, float] | None, Any] | None = None
    #: each config's parameters, for the search's grid (:func:`config_params`)
    params: list[dict[str, Any]] | None = None
    #: the search mode this rank asks for (None: ``auto``)
    search: str | None = None

#: the choices made in this process live on each autotuner, ``autotuner.__dict__[DECIDED]``: {(group identity,
#: key): config}, per group, so that a choice made by one group (or by a rank alone) is never taken for another
#: group's (read without a lock: a dict lookup is atomic; writers hold the lock)
DECIDED = intercept.DECIDED
_decided_lock = threading.Lock()
#: (id of group, (track id, key text)) -> config index: every choice a group made in this process, also for the
#: (kernel, key)s this rank did not launch, so that a rank meeting one later uses the group's choice
_choices: dict[tuple[tuple, TrackId], int] = {}


def decided_config(autotuner: Any, key: tuple, group: Group) -> Any:
    """The config a contextual tuning on ``group`` chose for ``autotuner`` and ``key`` in this process, or None."""
    table = autotuner.__dict__.get(DECIDED)
    return None if table is None else table.get((group.identity, key))  # name and ranks: never id()


def decide(autotuner: Any, key: tuple, config: Any, group: Group) -> None:
    """Record ``group``'s choice for ``autotuner`` and ``key``; also in the kernel's ``cache``."""
    with _decided_lock:
        autotuner.__dict__.setdefault(DECIDED, {})[(group.identity, key)] = config
    autotuner.cache[key] = config  # later stock launches hit


def undecide(autotuner: Any, key: tuple, group: Group) -> None:
    """Take back ``group``'s choice for ``autotuner`` and ``key`` (a late failure of the chosen config)."""
    with _decided_lock:
        autotuner.__dict__.get(DECIDED, {}).pop((group.identity, key), None)
    autotuner.cache.pop(key, None)


def group_choice(group: Group, tid: TrackId) -> int | None:
    """The config index ``group`` chose for track ``tid`` in this process (launched here or not), or None."""
    return _choices.get((group.identity, tid))


def remember_choice(group: Group, tid: TrackId, index: int) -> None:
    """Record ``group``'s choice for track ``tid``."""
    _choices[(group.identity, tid)] = index


def forget_choice(group: Group, tid: TrackId) -> None:
    """Take back ``group``'s choice for track ``tid``."""
    _choices.pop((group.identity, tid), None)


class LocalTrack:
    """What this rank knows of one (kernel, key): its autotuners, key, pruning and journal.

    ``earlier`` gives, for a cache entry, every group rank's journal records of it, gathered before the session's
    first run (:meth:`~.state.CallState.earlier`): the configs it excludes and the one it launches first come
    from that shared view only, so they are the same on every rank."""

    def __init__(self, autotuner: Any, key: tuple, args: tuple, kwargs: dict[str, Any], cache: DiskCache,
                 group: Group, earlier: Callable[[str], list[list[dict[str, Any]]]], search: str = "auto",
                 attempt: str | None = None) -> None:
        self.autotuners = [autotuner]
        #: the decorator's ``search=`` (the environment's wins when the group agrees on the track)
        self.search = search
        self.key = key
        self.prune_error: Exception | None = None
        #: the configs the early pruning keeps, the perf model's estimates and top_k (agreed by the group)
        self.pruning: tuple[list[int], dict[int, float] | None, int | float] | None = None
        try:
            self.pruning = intercept.pruning(autotuner, args, kwargs)
            #: the configs this rank's own pruning keeps (its first is launched before the group agrees)
            self.pruned: list[int] | str = intercept.best_estimated(*self.pruning)
        except Exception as exc:
            self.pruned, self.prune_error = describe_error(exc), exc
        #: the arguments of the first launch, to compile ahead with (:mod:`~.compiling`), then dropped
        self.sample: tuple[tuple, dict[str, Any]] | None = (args, kwargs)
        self.used: set[int] = set()
        self.descriptions = [describe(c) for c in autotuner.configs]
        self.space_text = "\n".join(self.descriptions)
        self.entry = entry_id(intercept.kernel_id(autotuner) + "\n" + source_of(autotuner.base_fn), repr(key),
                              self.space_text, group.size)
        self.journal = open_journal(cache, self.entry, group)
        self.journal.adopt()  # the earlier attempts' files, removed with this one once the track is decided
        self.journal.attempt = attempt  # as the call's journal exchange agreed it (None before it: set then)
        self._earlier_of = earlier
        self.journaled: set[tuple[int, str]] = set()  # (config, state) written by this attempt
        #: the config of this attempt's last record of the track when that is a ``started`` one (None otherwise):
        #: the config an attempt that ends now ends inside, for the journal's crash rule
        self.in_flight: int | None = None

    @functools.cached_property
    def earlier(self) -> dict[int, dict[str, Any]]:
        """The earlier attempts' outcomes merged from every rank's journal (the same on every rank). Read on first
        use: a track met in a hot call's first run is made before the group gathered its journals."""
        return earlier_outcomes(self._earlier_of(self.entry), self.descriptions)

    def first_index(self) -> int | None:
        """The config every rank launches first, from the shared view only: the first kept one that did not fail
        in an earlier attempt, preferring one not measured yet (a suspect is measured again). None: pruning
        failed, or every kept config failed earlier (the exchange then says so on every rank)."""
        if not isinstance(self.pruned, list) or not self.pruned:
            return None
        fresh = [i for i in self.pruned if self.earlier.get(i, {}).get("state") != "failed"]
        measured = [i for i in fresh if self.earlier.get(i, {}).get("state") in ("measured", "stopped")]
        return next((i for i in fresh if i not in measured), fresh[0] if fresh else None)

    def info(self) -> TrackInfo:
        """What the group needs to know about it (sent once, in the run it was first met)."""
        at = self.autotuners[0]
        return TrackInfo(name=intercept.kernel_name(at), kernel=intercept.jit_id(at), keys=[str(k) for k in at.keys],
                         descriptions=self.descriptions, space_text=self.space_text, pruned=self.pruned,
                         pruning=self.pruning, entry=self.entry, params=config_params(at.configs),
                         search=settings.current().search or self.search)

    def append(self, index: int, state: str, **fields: Any) -> None:
        """Append a record of config ``index`` to this rank's journal of the track."""
        self.journal.append(index, state, config=self.descriptions[index], **fields)
        self.in_flight = index if state == "started" else None

    def note(self, index: int, state: str, **fields: Any) -> None:
        """Append to this rank's journal of the track, once per (config, state) (a group outcome, a failure)."""
        if (index, state) not in self.journaled:
            self.journaled.add((index, state))
            self.append(index, state, **fields)

    def started(self, index: int) -> None:
        """Journal that a launch of config ``index`` starts: every launch a crash could end inside, warm-up and race
        alike, leaves the attempt's last record naming its config (the journal's crash rule blames the config of
        that record). A launch of the config the last record already names adds nothing and writes nothing."""
        if self.in_flight != index:
            self.append(index, "started")

    def not_blamed(self, reason: str) -> None:
        """The attempt ends with an error that is not the config's (the function's own): the config in flight is
        journaled ``interrupted``, so that the crash rule does not count the attempt against it."""
        if self.in_flight is not None:
            self.append(self.in_flight, "interrupted", error=reason)


def config_params(configs: list[Any]) -> list[dict[str, Any]]:
    """Each ``triton.Config``'s parameters as plain data (its keyword arguments, warps, stages, CTAs), for the
    search's grid: numbers, strings and booleans as they are, anything else by its description."""
    params = []
    for config in configs:
        values = {**getattr(config, "kwargs", {}), "num_warps": getattr(config, "num_warps", None),
                  "num_stages": getattr(config, "num_stages", None), "num_ctas": getattr(config, "num_ctas", None)}
        params.append({name: value if isinstance(value, (int, float, str, bool)) or value is None
                       else describe(value) for name, value in sorted(values.items())})
    return params


def earlier_outcomes(per_rank: list[list[dict[str, Any]]], descriptions: list[str]) -> dict[int, dict[str, Any]]:
    """The merged outcome per config of every rank's journal records (:func:`~..faults.evidence.merge`'s blame
    rules; with ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE`` only this job's records)."""
    env = settings.current()
    return merge(per_rank, descriptions, only_job=env.job_id if env.always_tune else False)


def open_journal(cache: DiskCache, entry: str, group: Group) -> Journal:
    """This rank's crash journal of one (kernel, key) entry (the one place that builds a Journal here): named by
    the group, so that two groups of one job never read or delete each other's; its records name the job and the
    group, as ``autotune``'s do (with ``ALWAYS_TUNE``, a restart of this job still reads them)."""
    ranks = list(group.member_ranks)
    identity = {"job": settings.current().job_id, "group": group.name, "ranks": ranks}
    return Journal(journal_path(cache.folder, entry, group), identity)


def journaled_samples(outcome: Mapping[str, Any]) -> list[float]:
    """The group samples of a time read back from the journal (none in a journal written before they were)."""
    return group_samples(outcome.get("round_times"))


def journaled_per_rank(outcome: Mapping[str, Any], holders: Sequence[int]) -> dict[int, float]:
    """Each rank's time read back from the journal, by rank: ``per_rank`` of the ranks ``per_rank_of`` names (a
    journal written before that field lists the times of ``holders`` in order). Values that are not finite,
    non-negative numbers are left out, and every time when the ranks are not distinct ranks matching the times one
    for one (a damaged journal costs the table, not the key)."""
    times, ranks = outcome.get("per_rank"), outcome.get("per_rank_of", list(holders))
    if not isinstance(times, list) or not distinct_ranks(ranks) or len(ranks) < len(times):
        return {}
    return {r: float(t) for r, t in zip(ranks, times, strict=False) if finite_number(t) and t >= 0}


def journaled_drift_free(outcome: Mapping[str, Any]) -> float | None:
    """A close contender's drift-free time read back from the journal (``drift_free``), or its time where a journal
    written before that field says ``settled_time`` (its quiet race's drift-free time); None for any other."""
    parsed = Outcome.from_json({"index": 0, "config": "", "state": "measured", "time": outcome.get("time"),
                                "drift_free": outcome.get("drift_free")})
    if parsed is not None and parsed.drift_free is not None:
        return float(parsed.drift_free)
    return float(outcome["time"]) if outcome.get("settled_time") is True else None
