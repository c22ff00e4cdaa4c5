"""What a call does with a key that is not decided: ``undecided="tune" | "nearest" | "first"``.

- ``tune`` (the default): tune it now, with the group (today's behaviour).
- ``nearest``: use the decision of the nearest decided key of the same group, by the decorator's ``distance`` or
  by the numeric parts of the keys, **among those whose config ``prune_fn`` keeps for this call**; no tuning.
  Candidates are ordered by (distance, key text), never by the order in which this rank learnt them; the decided
  keys of the function's disk cache folder are candidates too (:mod:`.cached_keys`: read by group rank 0 alone and
  sent inside the serving's exchange; by each rank of a rank-local function). When no comparable decided key's
  config is kept, it serves the first config ``prune_fn`` keeps, as ``first`` does; when ``prune_fn`` keeps none,
  the key is tuned (which raises the pruning BadInputError on every rank).
- ``first``: the first config ``prune_fn`` keeps, with no tuning (none kept: tuned, as above).

A collective function's group reads the disk cache before serving (``Tuner._tune_or_serve``: the tuning's steps 1 to
3), and a rank-local function's rank reads its own entry alone (:mod:`.cached_alone`): a key the cache holds is
served its decision, never the policy's config (a rank-local function's, served without being decided: another
rank's folder may lack it, and under ``tune`` the group tunes it together).

A served config is always one ``prune_fn`` keeps for the call. For a function whose ranks must run the same config
(one that is not rank-local: not ``sharded=True`` and never given to a ``local=True`` campaign) and a group of
several ranks, the choice is agreed in one exchange when a key is first served (and again after a new decision):
a config counts as kept only where every rank keeps it, so every rank serves the same config (or every rank tunes).
With ``autotune_replicas``, each replica's choice is agreed across the replicas in one exchange more: every replica
serves it when all made the same, else every replica tunes (a tuning agrees across them). A rank-local function's
ranks choose alone, with no communication.

``TRITON_DIST_AUTOTUNE_UNDECIDED`` sets the policy of every tuned function of a job (it overrides the
decorators'). A key served this way is logged once and is not a decision: a later campaign or call with
``undecided="tune"`` still tunes it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

from .. import settings
from ..disk import logs
from ..errors import BadInputError, MismatchError
from ..group.channel import Group
from ..space import describe_key, index_of

log = logging.getLogger("triton_dist_tune")

POLICIES = settings.UNDECIDED_POLICIES

#: ``distance(key, decided_key)``: a number (smaller is nearer), or None / inf for keys that are not comparable
Distance = Callable[[Hashable, Hashable], "float | None"]
#: the decided keys of a function's disk cache folder: () -> [(key, key text, config index)] (:mod:`.cached_keys`)
OnDisk = Callable[[], "list[tuple[Hashable, str, int]]"]
#: at most this many of them, nearest first, go into the serving's exchange
MAX_ON_DISK = 64


def check_policy(value: str | None) -> str | None:
    """``value`` when it names a policy (or is None), else BadInputError."""
    if value is not None and value not in POLICIES:
        raise BadInputError(f"undecided must be one of {', '.join(POLICIES)}, not {value!r}")
    return value


def _parts(key: Any) -> Iterator[Any]:
    """The leaves of a key made of nested tuples and lists, in order."""
    if isinstance(key, (tuple, list)):
        for item in key:
            yield from _parts(item)
    else:
        yield key


def _numeric(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def numeric_distance(key: Hashable, other: Hashable) -> float | None:
    """The default distance: the sum of the absolute differences of the keys' numeric parts (L1), when every
    other part is equal and the keys have the same shape; None (not comparable) otherwise."""
    mine, theirs = list(_parts(key)), list(_parts(other))
    if len(mine) != len(theirs):
        return None
    total = 0.0
    for a, b in zip(mine, theirs, strict=True):
        if _numeric(a) and _numeric(b):
            total += abs(float(a) - float(b))
        elif type(a) is not type(b) or a != b:
            return None
    return total


@dataclass
class Served:
    """A key served without tuning: the config, which decided key it came from, and how many decisions of the
    slot's group the table held when it was chosen (a new decision makes it choose again)."""

    config: dict[str, Any]
    source: str | None
    seen: int


@dataclass(frozen=True)
class Candidate:
    """A decided key that could serve an undecided one: its distance, its key text and its config's index."""

    distance: float
    text: str
    index: int


@dataclass(frozen=True)
class Choice:
    """What serving chose: the config's index in the space and the decided key it came from (None: the first
    kept config)."""

    index: int
    source: str | None


def choose(candidates: Sequence[Candidate], keeps: Sequence[bool]) -> Choice | None:
    """The served config: the nearest candidate whose config ``keeps`` (``prune_fn`` for this call) keeps, else
    the first kept config, else None (nothing is kept: tune, which raises the pruning error)."""
    for candidate in candidates:
        if keeps[candidate.index]:
            return Choice(candidate.index, candidate.text)
    first = next((i for i, kept in enumerate(keeps) if kept), None)
    return None if first is None else Choice(first, None)


def _choose_for_group(values: list[Any]) -> tuple[Any, str | None] | None:
    """Group rank 0: the ranks' (candidates, keep mask, config space's fingerprint, key text, the decided keys of
    the disk cache, read on rank 0 only) -> the choice every rank serves. A config is kept only where every rank
    keeps it; a candidate counts only where every rank holds it, or where rank 0's disk cache holds it (by (distance,
    text)). None: some rank's ``prune_fn`` raised or nothing is kept everywhere (the key is tuned).
    ``("error", text)``: some rank cannot serve (its key, its distance); ``("mismatch", text)``: the ranks' config
    spaces or keys differ (a served index would name different configs, or serve another key)."""
    errors = [(r, value[0]) for r, value in enumerate(values) if isinstance(value[0], str)]
    if errors:  # some rank's distance or key failed: the same BadInputError on every rank
        return ("error", "; ".join(f"rank {r}: {text}" for r, text in errors))
    for i, what, advice in ((2, "config space", "every rank must build the same configs in the same order"),
                            (3, "key", "key_fn must return the same key on every rank of the group")):
        held = [value[i] for value in values]
        if any(h != held[0] for h in held):
            shown = "" if i == 2 else ": " + "; ".join(f"rank {r}: {h}" for r, h in enumerate(held))
            differ = [r for r, h in enumerate(held) if h != held[0]]
            return ("mismatch", f"ranks differ in {what} (rank(s) {differ} against rank 0{shown}): {advice}")
    masks = [value[1] for value in values]
    if any(not isinstance(mask, list) for mask in masks):
        return None
    keeps = [all(mask[i] for mask in masks) for i in range(len(masks[0]))]
    held = [{tuple(c) for c in value[0]} for value in values]
    common = [Candidate(*c) for c in values[0][0] if all(tuple(c) in h for h in held)]
    found = choose(merged(common, [Candidate(*c) for c in values[0][4] or []]), keeps)
    return None if found is None else (found.index, found.source)


def merged(held: Sequence[Candidate], on_disk: Sequence[Candidate]) -> list[Candidate]:
    """The candidates of both lists, each key text once, nearest first: by (distance, text)."""
    texts = {c.text for c in held}
    return sorted([*held, *(c for c in on_disk if c.text not in texts)], key=lambda c: (c.distance, c.text))


def _alike_across_replicas(choices: list[Any]) -> Any:
    """Group rank 0 of the replicas' group: each replica's agreed choice (:func:`_choose_for_group`, by replica) ->
    the one every rank of every replica takes: the first replica's error or mismatch, naming it; the choice, when
    every replica made the same; else None: every replica tunes. Before, each replica took its own: replicas whose
    ``prune_fn`` kept different configs served different ones, and a replica that tuned (its ``prune_fn`` raised,
    or kept nothing) waited at the tuning's agreement across replicas for partners that were serving, for ``T``."""
    for j, choice in enumerate(choices):
        if choice is not None and choice[0] in ("error", "mismatch"):
            return (choice[0], f"replica {j}: {choice[1]}")
    return choices[0] if all(choice == choices[0] for choice in choices) else None


class Undecided:
    """The policy of one tuned function for keys that are not decided (see the module docstring)."""

    def __init__(self, name: str, mode: str | None, distance: Distance | None) -> None:
        self.name = name
        self.mode = check_policy(mode)
        self.distance: Distance = distance or numeric_distance
        self._served: dict[Hashable, Served] = {}

    def current(self) -> str:
        """The policy now: ``TRITON_DIST_AUTOTUNE_UNDECIDED`` when set, else the decorator's, else ``tune``. A
        malformed variable reads as unset here: the call's tuning raises it on every rank alike
        (:func:`~triton_dist_tune.settings.problem`)."""
        return settings.Settings.from_env(lenient=True).undecided or self.mode or "tune"

    def serve(self, table: dict[Hashable, dict[str, Any]], slot: Hashable, grouped: bool,
              space: Sequence[dict[str, Any]], keeps: Callable[[dict[str, Any]], bool],
              group: Group | None = None, timeout: float | None = None,
              announce: bool = True, problem: str | None = None, space_print: str = "",
              replicas: Group | None = None, on_disk: OnDisk | None = None) -> dict[str, Any] | None:
        """The config for the undecided ``slot`` of ``table`` (None: tune it). ``grouped``: ``table`` is
        ``decided_in`` (slots are (group..., key)); ``keeps(config)``: whether ``prune_fn`` keeps ``config`` for
        this call (a served config is always one it keeps).

        With ``group`` (a function whose ranks must run the same config: it is not rank-local), the choice is
        agreed in one exchange per key and decision count: a config counts as kept only where every rank keeps it,
        and a decided key only where every rank holds it; every rank serves the same config or every rank tunes.
        Without, this rank chooses alone (no communication). What is served is said in every rank's log, and as a
        warning on group rank 0 only (``announce``: whether this rank is it, for a rank-local function).

        ``problem``: this rank cannot serve (a malformed variable, a key ``key_fn`` failed to give): a
        ``BadInputError`` saying so, raised on every rank of the group at the exchange (on this rank alone without
        one). ``space_print``: a fingerprint of ``space``, compared over the group (ranks whose spaces differ would
        serve different configs by one index: a ``MismatchError`` on every rank). ``replicas``: the group across
        the replicas of ``group`` (``autotune_replicas``), which then agree too (:func:`_alike_across_replicas`).
        ``on_disk``: the decided keys of the function's disk cache folder (``nearest``'s candidates too), read by
        group rank 0 alone and sent inside the one exchange (without ``group``, by this rank)."""
        mode = self.current()
        if mode == "tune":
            return None
        prefix, key = _split(slot, grouped)
        # (a copy of ``table``, here and in _nearest: a tuning on another group, under its own lock, may add to it)
        seen = sum(1 for other in list(table) if _split(other, grouped)[0] == prefix)
        served = self._served.get(slot)
        if served is not None and served.seen == seen and problem is None:
            return served.config
        grouped_call = group is not None and (group.size > 1 or replicas is not None)
        if problem is not None and not grouped_call:
            raise BadInputError(problem)
        try:
            if problem is not None:
                raise BadInputError(problem)
            candidates: list[Candidate] | str = self._nearest(table, slot, grouped, space) if mode == "nearest" else []
            disk: list[Candidate] = []
            if mode == "nearest" and on_disk is not None and (not grouped_call or group.rank == 0):  # type: ignore
                text = _key_text(key)  # (a key the cache holds is a decision before it is served: never its own)
                disk = self._ranked(key, [item for item in on_disk() if item[1] != text], strict=False)
        except BadInputError as exc:  # a distance that raised or returned no number, or the problem
            if not grouped_call:
                raise
            candidates, disk = str(exc), []  # as data: every rank of the group raises it, naming this rank
        try:
            mask: list[bool] | str = [bool(keeps(config)) for config in space]
        except BadInputError as exc:  # prune_fn's answer or error, said by keeps (``prune_fn ...``)
            mask = str(exc)
        except Exception as exc:  # as data: every rank learns of it (the key is tuned, which reports it)
            mask = f"prune_fn raised {exc!r}"
        if grouped_call:
            mine = (candidates if isinstance(candidates, str) else [[c.distance, c.text, c.index] for c in candidates],
                    mask, space_print, None if problem is not None else _key_text(key),
                    [[c.distance, c.text, c.index] for c in disk[:MAX_ON_DISK]])
            # (the key is compared, not named in the step: a rank whose key_fn failed has none to name)
            what = f"[{self.name}] serve an undecided key ({mode})"
            agreed = group.combine(mine, what, _choose_for_group, timeout)
            if replicas is not None:
                agreed = replicas.combine(agreed, f"{what} (across replicas)", _alike_across_replicas, timeout)
            if agreed is not None and agreed[0] == "mismatch":
                raise MismatchError(f"triton_dist_tune: {what}: {agreed[1]}")
            if agreed is not None and agreed[0] == "error":
                raise BadInputError(f"triton_dist_tune: {what}: {agreed[1]}")
            found = None if agreed is None else Choice(int(agreed[0]), agreed[1])
        else:
            found = choose(merged(candidates, disk), mask) if isinstance(mask, list) else None  # type: ignore
        if found is None:  # nothing usable is kept: tune (the tuning raises the pruning error on every rank)
            return None
        config = space[found.index]
        if served is None or served.config != config:
            how = (f"the decision of the nearest decided key {found.source} that prune_fn keeps" if found.source
                   else "the first kept config")
            text = f"triton_dist_tune: {self.name}: key {_key_text(key)} is not decided: serving {how} " \
                   f"(undecided={mode!r})"
            logs.rank_log().info(text)
            if announce and (group is None or group.rank == 0):
                log.warning(text)
        self._served[slot] = Served(config, found.source, seen)
        return config

    def _nearest(self, table: dict[Hashable, dict[str, Any]], slot: Hashable, grouped: bool,
                 space: Sequence[dict[str, Any]]) -> list[Candidate]:
        """The decided slots of the same group comparable with ``slot``, nearest first: by (distance, key text)."""
        prefix, key = _split(slot, grouped)
        same = [(_split(other, grouped)[1], config) for other, config in list(table.items())
                if _split(other, grouped)[0] == prefix]
        # (a config's index by identity: {"s": 1} and {"s": 1.0} are two configs)
        return self._ranked(key, [(other_key, None, index_of(space, config)) for other_key, config in same])

    def _ranked(self, key: Hashable, others: Sequence[tuple[Hashable, str | None, int | None]],
                strict: bool = True) -> list[Candidate]:
        """``others`` ((decided key, its text or None, its config's index or None)) comparable with ``key``, nearest
        first: by (distance, key text). A ``distance`` that raises or returns no number is a BadInputError, unless
        not ``strict`` (the disk cache's keys, rebuilt from their text: a literal of another type than the keys this
        process met, which ``distance`` may not take): that key is then not comparable."""
        found: list[Candidate] = []
        for other_key, known, index in others:
            try:
                d = self.distance(key, other_key)
                text = known if known is not None else describe_key(other_key)
            except Exception as exc:
                if not strict:
                    log.debug("triton_dist_tune: %s: distance(%r, %r) raised %r: not comparable", self.name, key,
                              other_key, exc)
                    continue
                raise BadInputError(f"{self.name}: distance({key!r}, {other_key!r}) raised {exc!r}") from exc
            if d is not None and (isinstance(d, bool) or not isinstance(d, Real)):
                if not strict:
                    continue
                raise BadInputError(f"{self.name}: distance({key!r}, {other_key!r}) returned {str(d)[:100]} "
                                    f"({type(d).__name__}): it must return a number (smaller is nearer) or None")
            if d is None or not math.isfinite(d) or index is None:
                continue
            found.append(Candidate(float(d), text, index))
        return sorted(found, key=lambda c: (c.distance, c.text))


def _split(slot: Hashable, grouped: bool) -> tuple[tuple, Hashable]:
    """(group part, key) of a table's slot: ``decided`` holds keys, ``decided_in`` (group identity..., key)."""
    return (tuple(slot[:-1]), slot[-1]) if grouped else ((), slot)  # type: ignore[index]


def _key_text(key: Hashable) -> str:
    try:
        return describe_key(key)
    except BadInputError:
        return repr(key)
