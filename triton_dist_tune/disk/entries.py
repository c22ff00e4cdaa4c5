"""One cache file read into a typed :class:`Entry` (formats 1 and 2), the errors of unusable cache files, and which
decisions are superseded by newer ones (:func:`superseded`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..group.codec import FILE_DEPTH, Unreadable, depth, read_json
from ..records import MEDIAN, Outcome, TimeBreakdown, a_date, finite_number, recorded_statistic
from ..stats import near_tie
from .files import CUT_WRITE_S as CUT_WRITE_S
from .files import left_behind, read_regular
from .versions import versions as current_versions


class CacheError(Exception):
    """A cache folder, cache file or bundle that cannot be used; the message is one line for a person."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        #: the file at fault, where there is one
        self.path = path


class LinkOut(CacheError):
    """A file reached through a link that leads out of the cache folder: skipped, never read nor deleted."""


#: a journal's name after its entry: ``.<group tag>.rank<r>[.<k>].journal`` (the tag is absent in old journals)
_TAIL = r"(?:\.[0-9a-f]{10})?\.rank[0-9]+(?:\.[0-9]+)?\.journal"
#: the names the tuner gives its files: a cache entry ``<entry>.json`` and a journal, ``<entry>`` the 20 hex digits of
#: :func:`~triton_dist_tune.space.fingerprint` (:meth:`~triton_dist_tune.disk.cache.DiskCache.path`)
_TUNER_NAME = re.compile(f"[0-9a-f]{{20}}(?:\\.json|{_TAIL})")


#: the most bytes a cache file is read to (:func:`~.files.read_regular`): a decision is kilobytes, one of a large
#: searched space a few megabytes; a file past it (garbage, an edit by hand) is refused unread, as a corrupt one is
MAX_ENTRY_BYTES = 64 << 20
#: a temporary file of a decision's atomic write (:func:`~.files.write_atomic`: ``.<entry>.json.<8 characters of
#: mkstemp>.tmp``; ``import``'s, :func:`~.bundles.write_incoming`: ``.import`` for a decision it stages, ``.restore``
#: for one its undo puts back), renamed into place within milliseconds (an import's once all its decisions are
#: staged), or left by a process killed between the two
_WRITE_TMP = re.compile(r"\.([0-9a-f]{20})\.json\.[a-z0-9_]{8}\.(?:tmp|import|restore)")
#: the glob of those names in a function's folder (:data:`_WRITE_TMP` tells them apart)
WRITE_TMP_GLOB = ".*.json.*"


def cut_writes(folder: Path, entry: str | None = None) -> list[Path]:
    """The temporary files in ``folder`` of decision writes cut short (of ``entry``'s decision only, where given):
    named as the tuner's atomic write or ``import`` names them and older than :data:`CUT_WRITE_S`, sorted. Never
    read: the decision they would have held was not written (its process was killed, or its machine went down,
    mid-write)."""
    return left_behind(folder, f".{entry or '*'}.json.*", _WRITE_TMP,
                       lambda match: entry is None or match.group(1) == entry)


def tuner_named(path: Path) -> bool:
    """Whether ``path`` is named as the tuner names its files (a cache entry or a journal): ``clear`` removes no
    other file, whatever folder it is pointed at."""
    return _TUNER_NAME.fullmatch(path.name) is not None
#: the fields of the files Triton-distributed's own autotuner (``triton_dist.tune``) writes
TRITON_DIST_FIELDS = frozenset({"config", "deps", "key", "func"})


class ForeignFile(CacheError):
    """A JSON object in the cache folder that is not one of this library's files: no ``format`` field, and not named
    as the tuner names its decisions. Triton-distributed's autotuner writes such files (``<function>/<sha256>.json``,
    beside its ``.log-*`` files and backups) into ``~/.triton_dist/autotune``, this library's default folder too.
    Skipped (said once for all of them: ``cli/common.py``), never read as a decision, never removed by ``clear``."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        #: whether its fields are those Triton-distributed's autotuner writes
        self.triton_dist = TRITON_DIST_FIELDS <= data.keys()
        whose = ("written by Triton-distributed's autotuner (triton_dist.tune), which shares the default cache folder"
                 if self.triton_dist else "another program's file")
        super().__init__(f"{path}: not a decision of triton-dist-tune (a JSON object without its 'format' field: "
                         f"{whose})", path)


@dataclass(frozen=True)
class RankLocal:
    """What a rank-local decision records (``rank_local`` in its file; a campaign of a rank-local function,
    ``campaign(local=True)`` or ``sharded=True``): one rank tuned the key alone (``group_size`` 1, group ``this
    process alone``), and the decision is stored where plain calls of a whole group look it up."""

    #: the job's global rank that tuned it; None where not recorded
    rank: int | None
    #: the ranks of the group whose calls it serves (the default group's); None where not recorded
    group_size: int | None
    #: that group's title (``default``); None where not recorded
    group: str | None

    @classmethod
    def from_json(cls, value: Any) -> RankLocal | None:
        """The record's ``rank_local`` object; None for anything else (absent: not a rank-local decision)."""
        if not isinstance(value, dict):
            return None
        rank, size = value.get("rank"), value.get("group_size")
        return cls(rank if type(rank) is int else None, size if type(size) is int else None, _text(value.get("group")))

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "group_size": self.group_size, "group": self.group}

    def text(self) -> str:
        """``rank-local: tuned by rank 1 alone (a rank-local campaign), served to the 2 rank(s) of group 'default'``."""
        serves = (f"{self.group_size if self.group_size is not None else '?'} rank(s)"
                  + (f" of group '{self.group}'" if self.group else ""))
        who = f"rank {self.rank}" if self.rank is not None else "one rank"
        return f"rank-local: tuned by {who} alone (a rank-local campaign), served to the {serves}"


@dataclass
class Entry:
    """One decision of the cache, whatever the format it was written in."""

    path: Path
    format: int
    function: str
    key: str
    index: int
    config: str
    time_ms: float | None
    margin: float | None
    runner_up: int | None
    near_tie: bool
    timing: str | None
    group_size: int | None
    group: str | None
    #: unix seconds; the file's modification time for format 1 (which does not record it)
    created: float
    versions: dict[str, str]
    gpu: str
    gpu_count: int | None
    kernel: str | None = None
    rounds: int | None = None
    tuning_seconds: float | None = None
    #: where the tuning's seconds went on group rank 0 (None: not recorded)
    breakdown: TimeBreakdown | None = None
    #: True for a cut's choice (the time budget ended the tuning): tuned again by the next job
    provisional: bool = False
    #: what the times are: ``median`` (each config's median sample; every file written before this was recorded)
    #: or ``least`` (its least sample: the race's samples were noisy)
    statistic: str = MEDIAN
    #: fingerprints of the config space and of the code (the function's source and the code it depends on) the
    #: decision was tuned for; None where not recorded (``source`` is absent from records of earlier releases)
    space: str | None = None
    source: str | None = None
    #: where the tuned function is defined (source file and qualified name); None where not recorded
    origin: str | None = None
    #: unix seconds: when a job last wrote or served the decision: the ``served`` time the file records (the tuner
    #: writes it with the decision and again at each cache hit: :meth:`~triton_dist_tune.disk.cache.DiskCache.served`),
    #: else (an earlier release's file) its modification time; 0 where unknown
    used: float = 0.0
    #: a rank-local decision's facts (:class:`RankLocal`); None for a decision its whole group tuned (or a file
    #: written before this was recorded)
    rank_local: RankLocal | None = None
    #: the replica count of a layout tuned as one (``autotune_replicas``): ``group`` is replica 0's, and the decision
    #: serves every replica's; None for a group that tuned alone (or a file written before this was recorded)
    replicas: int | None = None
    measurements: list[Outcome] = field(default_factory=list)
    #: the raw JSON object as read from disk (what ``export`` ships)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        """``<function folder>/<file name>``: how the command line names an entry."""
        return f"{self.path.parent.name}/{self.path.name}"

    @property
    def heading(self) -> str:
        """What ``list`` groups the entry under: its function, and for ``contextual_autotune`` its kernel
        (``layer:gemm_kernel@1a2b3c4d``); ``--function`` takes it too."""
        return self.function if self.kernel is None else f"{self.function}:{self.kernel.rsplit('.', 1)[-1]}"

    @property
    def ranks_text(self) -> str:
        """The ranks as ``list`` shows them: ``2`` (the group that tuned it), ``2x3`` (its groups of 2 ranks in 3
        replicas tuned as one: :attr:`replicas`), ``local`` (:class:`RankLocal`), or ``-`` where not recorded."""
        if self.rank_local is not None:
            return "local"
        return str(self.group_size or "-") + (f"x{self.replicas}" if self.replicas is not None else "")

    @property
    def serves_size(self) -> int | None:
        """How many ranks the group whose calls it serves has: the group that tuned it, or a rank-local decision's
        group (whose size names its cache entry)."""
        return self.rank_local.group_size if self.rank_local is not None else self.group_size

    def stale(self, now: dict[str, str] | None = None) -> bool:
        """Whether the entry was tuned under other software versions than this process runs."""
        return self.versions != (now if now is not None else current_versions())

    @property
    def untimed(self) -> bool:
        """Whether the key's space held one config after pruning, which ran once, not timed: no time, no margin."""
        return self.raw.get("untimed") is True

    def chosen(self) -> Outcome | None:
        """The chosen config's outcome, when its measurements are recorded."""
        return next((o for o in self.measurements if o.index == self.index), None)

    def to_json(self, now: dict[str, str] | None = None, superseded_by: Entry | None = None) -> dict[str, Any]:
        """A summary for ``--json`` output (standard JSON); ``stale`` against the versions ``now`` (else read
        exactly); ``superseded_by``: the newer decision that supersedes this one (see
        :func:`superseded`), if any."""
        return {"file": str(self.path), "name": self.name, "format": self.format, "function": self.function,
                "kernel": self.kernel, "key": self.key, "index": self.index, "config": self.config,
                "time_ms": self.time_ms, "statistic": self.statistic, "margin": self.margin,
                "runner_up": self.runner_up, "near_tie": self.near_tie, "timing": self.timing,
                "group_size": self.group_size, "group": self.group, "gpu": self.gpu, "gpu_count": self.gpu_count,
                "versions": self.versions, "created": self.created, "stale": self.stale(now), "space": self.space,
                "source": self.source, "superseded_by": superseded_by.name if superseded_by is not None else None,
                "tuning_seconds": self.tuning_seconds,
                "breakdown": self.breakdown.to_json() if self.breakdown is not None else None,
                "provisional": self.provisional, "untimed": self.untimed,
                "rank_local": self.rank_local.to_json() if self.rank_local is not None else None,
                "replicas": self.replicas, "measurements": [o.to_json() for o in self.measurements]}


def _finite(value: Any) -> float | None:
    return float(value) if finite_number(value) else None


def _text(value: Any) -> str | None:
    """A field shown as text (kernel, group, timing mode): None stays None, anything else is made text (a file
    written by hand or by another version may hold a number or a list there)."""
    return None if value is None else value if isinstance(value, str) else json.dumps(value, default=str)


def _outcome_of_format1(row: Any) -> Outcome | None:
    """A format-1 measurement row (or a contextual table row) as an :class:`Outcome`."""
    if not isinstance(row, dict) or type(row.get("index")) is not int or not isinstance(row.get("config"), str):
        return None
    state = row.get("state")
    time_ms = _finite(row.get("time"))
    if state == "measured" and row.get("early_stop"):
        state = "stopped"
    if state in ("measured", "stopped") and time_ms is None:
        return None
    if state not in ("measured", "stopped", "failed"):
        state = "pruned"  # contextual "skipped": never run
    per_rank = row.get("per_rank")
    per_rank = [float(t) for t in per_rank if _finite(t) is not None] if isinstance(per_rank, list) else None
    error = row.get("error")
    return Outcome(index=row["index"], config=row["config"], state=state, time=time_ms, per_rank=per_rank,
                   error=str(error) if error is not None else None, own=_finite(row.get("own")),
                   resumed=bool(row.get("resumed", False)))


def _margin(outcomes: list[Outcome], chosen: int) -> tuple[float | None, int | None]:
    """Runner-up time / chosen time - 1 and the runner-up's index, from the measurements (format 1)."""
    best = next((o for o in outcomes if o.index == chosen and o.time), None)
    others = sorted((o for o in outcomes if o.usable and o.index != chosen), key=lambda o: (o.time, o.index))
    if best is None or not others:
        return None, None
    return others[0].time / best.time - 1, others[0].index


def recorded_near_tie(data: dict[str, Any]) -> bool:
    """A record's near-tie flag, kept only where its margin is within the spread of the two configs' measurements
    (records written before that rule flagged any pair the race had not yet told apart, +322% included)."""
    if not data.get("near_tie"):
        return False
    pair = (data.get("index"), data.get("runner_up"))
    rows = data.get("measurements") if isinstance(data.get("measurements"), list) else []
    spreads = [_finite(r.get("spread")) for r in rows if isinstance(r, dict) and r.get("index") in pair]
    return near_tie(_finite(data.get("margin")), spreads)


def parse_entry(path: Path, data: Any) -> Entry:
    """The decision in ``data`` (read from ``path``); raises :class:`CacheError` when it is not one."""
    if not isinstance(data, dict):
        raise CacheError(f"{path}: not a cache entry (a JSON {type(data).__name__}, not an object)", path)
    levels = depth(data)
    if levels > FILE_DEPTH:  # the tuner would refuse it at the lookup: refused here, where it is read
        raise CacheError(f"{path}: malformed cache entry (nested {levels} levels deep, more than the {FILE_DEPTH} "
                         "the tuner reads)", path)
    fmt = data.get("format")
    if "format" not in data and not tuner_named(path):
        raise ForeignFile(path, data)
    if fmt not in (1, 2):
        raise CacheError(f"{path}: unknown cache format {fmt!r} (this reader knows 1 and 2)", path)
    index, config = data.get("index"), data.get("config")
    if type(index) is not int or not isinstance(config, str) or not isinstance(data.get("versions"), dict):
        raise CacheError(f"{path}: malformed cache entry (needs index, config and versions)", path)
    rows = data.get("measurements") if isinstance(data.get("measurements"), list) else []
    # format 2 stores Outcome.to_json() rows; a row that is not one (format 1, a contextual table) is read as one
    found = [(Outcome.from_json(r) if fmt == 2 else None) or _outcome_of_format1(r) for r in rows]
    outcomes = [o for o in found if o is not None]
    outcomes.sort(key=lambda o: o.index)
    margin, runner_up = _finite(data.get("margin")), data.get("runner_up")
    if fmt == 1 or "margin" not in data:  # not recorded (format 1, contextual entries): from the measurements
        margin, runner_up = _margin(outcomes, index)
    created = _finite(data.get("created"))
    if created is not None and not a_date(created):  # a time no clock shows (1e300): as if not recorded
        created = None
    used = _finite(data.get("served"))  # recorded: copies, checkouts and imports reset the mtime, never this
    if used is None or not a_date(used):
        try:
            used = path.stat().st_mtime
        except OSError:
            used = 0.0
    if created is None:
        created = used
    size, replicas = data.get("group_size"), data.get("replicas")
    return Entry(path=path, format=fmt, function=str(data.get("function") or path.parent.name),
                 key=str(data.get("key", "?")), index=index, config=config, time_ms=_finite(data.get("time_ms")),
                 margin=margin, runner_up=runner_up if type(runner_up) is int else None,
                 near_tie=recorded_near_tie(data), timing=_text(data.get("timing")),
                 group_size=size if type(size) is int else None, group=_text(data.get("group")), created=created,
                 versions={str(k): str(v) for k, v in data["versions"].items()}, gpu=str(data.get("gpu", "?")),
                 gpu_count=data.get("gpu_count") if type(data.get("gpu_count")) is int else None,
                 kernel=_text(data.get("kernel")),
                 rounds=data.get("rounds") if type(data.get("rounds")) is int else None,
                 tuning_seconds=_finite(data.get("tuning_seconds")),
                 breakdown=TimeBreakdown.from_json(data.get("breakdown")), provisional=data.get("provisional") is True,
                 statistic=recorded_statistic(data),
                 space=_text(data.get("space")), source=_text(data.get("source")),
                 origin=_text(data.get("origin")), used=used, rank_local=RankLocal.from_json(data.get("rank_local")),
                 replicas=replicas if type(replicas) is int and replicas > 1 else None, measurements=outcomes, raw=data)


def read_entry(path: Path) -> Entry:
    """The decision stored in ``path``; raises :class:`CacheError` for a missing, unreadable or corrupt file."""
    try:
        data = read_json(read_regular(path, MAX_ENTRY_BYTES))
    except FileNotFoundError:
        raise CacheError(f"{path}: no such cache file") from None
    except OSError as exc:
        raise CacheError(f"{path}: cannot read ({exc.strerror or exc})", path) from None
    except Unreadable as exc:  # not UTF-8, not JSON, nested deeper than the tuner reads
        raise CacheError(f"{path}: corrupt cache file ({exc})", path) from None
    return parse_entry(path, data)


def lineage(entry: Entry) -> tuple[Any, ...]:
    """What question a decision answers, whatever code and config space it was tuned for: its function (cache
    folder, name, where it is defined, and kernel for ``contextual_autotune``), key, the size of the group it serves
    (a rank-local decision's one rank serves a whole group: :attr:`Entry.serves_size`), GPU model and count, and
    timing mode. Where it is defined (``origin``, None in an earlier release's files) keeps apart two
    programs whose functions share a name and a cache folder: neither supersedes the other's decisions."""
    return (entry.path.parent.name, entry.function, entry.origin, entry.kernel, entry.key, entry.serves_size,
            entry.gpu, entry.gpu_count, entry.timing)


def _same_code(a: Entry, b: Entry) -> bool:
    """Whether two decisions were tuned for the same config space and, where both record it, the same code."""
    return a.space == b.space and (a.source is None or b.source is None or a.source == b.source)


def _last(entry: Entry) -> float:
    """When a job last wrote or served ``entry`` (its creation, or a later cache hit): the later of its creation and
    its :attr:`Entry.used` (the ``served`` time its file records, else, in an earlier release's file, the file's
    modification time)."""
    return max(entry.created, entry.used)


def superseded(entries: list[Entry]) -> dict[Path, Entry]:
    """The superseded decisions among ``entries``: path -> the newest decision of its :func:`lineage`, for each
    decision tuned for another config space or code than that newest one (its ``space`` fingerprint differs, or
    its ``source`` fingerprint where both record one). The newest is the one a job last wrote or served (its
    :attr:`Entry.used`, or its creation if later: :func:`_last`): a job that goes back to an earlier space serves
    the decision tuned for it again, which makes that one current and the other superseded. A file that records
    when it was served is ordered by that, never by its modification time, which a copy, a checkout or an
    ``import`` resets.

    A change of the function's space or code changes its cache entry's name, so the next job tunes the key again
    into a new file and never serves the old one again; the old file stays until it is removed (``clear
    --superseded``). Decisions told apart only by what the files do not record (``cache_key_extra``, the tensors'
    devices, the configs ``prune_fn`` kept) share one space and code, so none supersedes another. Only decisions
    that record where their function is defined (``origin``: ``autotune``'s, from this release on) take part: an
    earlier release's file, or a ``contextual_autotune`` decision, is never marked superseded."""
    traced = [e for e in entries if e.origin is not None]
    newest: dict[tuple[Any, ...], Entry] = {}
    for e in traced:
        held = newest.get(lineage(e))
        if held is None or (_last(e), e.path.name) > (_last(held), held.path.name):
            newest[lineage(e)] = e
    return {e.path: newest[lineage(e)] for e in traced if not _same_code(e, newest[lineage(e)])}
