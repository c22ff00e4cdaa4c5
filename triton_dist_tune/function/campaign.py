"""A tuning campaign: tune one function at many keys ahead of time, spread over the job's ranks.

:func:`campaign` takes a function decorated with :func:`~triton_dist_tune.autotune` and its calls (argument sets,
or a builder and keys), and spreads the keys over *units* that tune side by side:

- a **rank-local** function (``local=True``, the default for ``sharded=True``): every rank is a unit and tunes its
  keys alone, on a group of its own (no exchange during a tuning); its decision is stored under the cache entry of
  the group a call without ``autotune_pg`` uses (the default group), so later calls there find it;
- a **collective** function: the units are the replicas of ``pg`` linked by ``replicas`` (see ``autotune_replicas``);
  each replica tunes its keys in lock-step on its own group; with no ``replicas``, ``pg`` tunes every key.

Keys are dealt round-robin: unit ``u`` of ``U`` tunes the keys at positions ``u, u + U, ...``, one per *round*.
After each round the units exchange their results (plain data over the tuner's control channel, ``group/``): every
rank then holds every decision in its tuner's tables, and ranks that are local rank 0 write the cache records
their disk lacks. Every rank takes part in every exchange, whatever happened to its key (an error is data).

A round lasts as long as its slowest unit (:mod:`~triton_dist_tune.faults.progress`): every unit beats a counter in
the job's key-value store while it works, and a unit that shows no sign of life for the exchange deadline ends the
others' wait with a :class:`~triton_dist_tune.GroupTimeoutError` naming it; a slow but healthy unit is waited for.
A unit stuck for longer than the exchange deadline in user code the tuner gives no deadline (building a key's call,
``key_fn``, ``prune_fn``, ``ref_prog``) stops beating: the others end as for a dead unit, and the error says where it
is stuck. A row an exchange brings that the tuner does not send is refused on every rank
(:func:`~triton_dist_tune.function.summary.checked_row`). Resuming: a key decided by an earlier run is a cache hit; a
key cut short resumes from its journals (a rerun tunes only what is left).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from .. import settings
from ..checks import flag
from ..disk import logs
from ..disk.cache import entry_id
from ..disk.decisions import recorded_near_tie
from ..errors import AutotuneError, BadInputError, DevicePoisonedError, GroupTimeoutError, describe_error
from ..faults.progress import RoundWatch, user_code
from ..faults.recovery import interruptible
from ..faults.watchdog import exchange_timeout
from ..group.agreement import agree
from ..group.calls import calling
from ..group.channel import Group, SingleGroup
from ..group.rank_names import global_ranks_named
from ..group.resolve import resolve_group
from ..measure.replicas import Layout
from ..records import finite_number
from ..space import describe_key, index_of, keeps
from .campaign_calls import Call, builder
from .next_key import NextKey, compiles_ahead, screened_by
from .summary import KeyResult, Summary, checked_row, progress_line
from .tuned import TunedFunction
from .tuning import Tuning


@dataclass
class Plan:
    """How one rank takes part in a campaign."""

    tune_group: Group  #: the group this rank tunes its unit's keys with
    across: Group  #: links this rank to the same place in every other unit (the round exchanges)
    table: dict[Hashable, dict[str, Any]]  #: the tuner's table that the decisions go into
    slot: Callable[[Hashable], Hashable]  #: key -> its slot in ``table``
    #: the entry of a key named by what its tuning depends on (after step 1 of the tuning): (tuning, extra) -> entry
    entry: Callable[[Tuning, str], str]
    #: a rank-local plan's: the group whose calls its decisions serve (the default group); None: the tuning group's
    home: Group | None = None

    @property
    def unit(self) -> int:
        return self.across.rank

    @property
    def units(self) -> int:
        return self.across.size


def _plan(tuner: TunedFunction, local: bool, pg: Any, replicas: Any) -> Plan:
    if local:
        if replicas is not None:
            raise BadInputError("campaign: a rank-local campaign (local=True) takes no replicas: its units are the "
                                "ranks of pg (default: the default group)")
        home = resolve_group(None)  # where a call without autotune_pg tunes: its cache entry is the one to fill
        units = home if pg is None else resolve_group(pg, "pg")  # (an mpi4py job's communicator: no default group)

        def home_entry(t: Tuning, extra: str) -> str:
            return entry_id(tuner.source, t.key_text, tuner.space_text, home.size, extra)

        return Plan(SingleGroup(), units, tuner.decided, lambda key: key, home_entry, home)
    group = resolve_group(pg, "pg")
    if replicas is None:
        if pg is None:
            return Plan(group, SingleGroup(), tuner.decided, lambda key: key, Tuning._entry)
        return Plan(group, SingleGroup(), tuner.decided_in, lambda key: (group.identity, key), Tuning._entry)
    layout = Layout(group, resolve_group(replicas, "replicas"))
    return Plan(group, layout.replicas, tuner.decided_in, lambda key: (group.identity, layout.replicas.identity, key),
                lambda t, extra: layout.entry(Tuning._entry(t, extra)))


class _Tuning(Tuning):
    """One key of a campaign: a tuning on the unit's group whose cache entry is the plan's."""

    def __init__(self, plan: Plan, *args: Any) -> None:
        super().__init__(*args)
        self.plan = plan
        if plan.home is not None:  # a rank-local plan's decision: which rank tuned it alone, for which group
            self.rank_local = {"rank": logs.global_rank(), "group_size": plan.home.size,
                               "group": logs.group_title(plan.home)}

    def _entry(self, extra: str) -> str:
        return self.plan.entry(self, extra)

    def served_here(self, kept: list[int]) -> bool:
        """Whether this rank's disk cache holds a decision that this tuning, with ``kept`` the configs pruning keeps,
        would serve. A guess for a campaign's compiles ahead (:mod:`.next_key`): no collective, and a key whose key
        text, ``cache_key_extra`` or cache entry raises reads as not served (its own tuning reports the error)."""
        self.env = settings.current()
        try:
            self.key_text = describe_key(self.key, "the key key_fn returned")
            self.extra = self.tuner.entry_extra(self.args, self.kwargs)
            self._name_entry(kept)
            return self._read_cache(quiet=True) is not None
        except Exception:
            return False


def _keeps(tuner: TunedFunction, call: Call) -> list[bool] | None:
    """Which configs ``prune_fn`` keeps for ``call`` on this rank (None: no ``prune_fn``; it raised: none)."""
    if tuner.prune_fn is None:
        return None
    try:
        return [keeps(tuner.prune_fn, config, call.args, call.kwargs) for config in tuner.space]
    except Exception:
        return [False] * len(tuner.space)


def _keys(tuner: TunedFunction, build: Callable[[int], Call], count: int, plan: Plan, timeout: float,
          masks: list[list[bool] | None], problem: str | None = None) -> list[Hashable]:
    """Every position's key, computed on every rank; every rank of the campaign agrees on them (or all raise the
    same error, naming the ranks by their global rank). ``masks`` gets, per position, which configs ``prune_fn``
    keeps for this rank's call.

    The campaign's ranks are its units' groups linked by ``plan.across``: the ranks agree inside the tuning group
    first, then across the units, the first agreement's error (if any) travelling as the second one's note, so that
    a rank whose ``key_fn`` raised ends every rank of the job at this step, never at a later one by a timeout.
    ``problem``: this rank's own (a malformed variable), raised on every rank the same way."""
    keys: list[Hashable] = []
    texts: list[str] = []
    if problem is not None:
        problem = f"rank {logs.global_rank()}: {problem}"
    try:
        for position in range(count):
            call = build(position)
            keys.append(tuner.key_fn(*call.args, **call.kwargs))
            texts.append(describe_key(keys[-1], "the key key_fn returned"))
            hash(keys[-1])  # a list or a dict has a text but is no key: said here, on every rank alike
            masks.append(_keeps(tuner, call))
    except Exception as exc:
        problem = f"rank {logs.global_rank()}: building call {len(keys)} or its key raised {describe_error(exc)}"
    # the space too: a unit learns the others' decisions by index into its own (one built in another order: wrong)
    fields = {"keys": "\n".join(texts), "config spaces": tuner.space_text}
    what = f"[campaign {tuner.name}] agree on the keys"
    for group, step in ((plan.tune_group, what), (plan.across, f"{what} (across units)")):
        if group.size <= 1:
            continue
        found = agree(group, fields, step, timeout, problem)
        notes = list(dict.fromkeys(note for _, note in found.notes))  # each note names its rank already
        raised = {r for r, _ in found.notes}  # their keys end where their build raised: no difference of their own
        for f, held in found.differ.items():
            held = [(ranks, t) for ranks, t in held if f != "keys" or not set(ranks) <= raised]
            if len(held) > 1:
                notes.append(f"the ranks' {f} differ: " + "; ".join(
                    f"ranks {_global(group, r)}: {'key ' * (f == 'keys')}{t}" for r, t in held))
        problem = "; ".join(notes) or None
    if problem is not None:  # its ranks are global ranks (the turn on a subgroup adds nothing)
        raise global_ranks_named(BadInputError(f"campaign {tuner.name}: {problem}"))
    return keys


def _global(group: Group, ranks: list[int]) -> list[int]:
    """``ranks`` of ``group`` as global ranks (as they are when the group does not say)."""
    known = list(getattr(group, "global_ranks", []) or [])
    return [known[r] if r < len(known) else r for r in ranks]


def _tune_one(tuner: TunedFunction, plan: Plan, position: int, agreed: Hashable, build: Callable[[int], Call],
              verbose: bool | None, upcoming: NextKey | None = None) -> KeyResult:
    """Tune (or look up) one key on this unit's group; every rank of the group returns the same result.
    ``upcoming``: the key the unit tunes next, compiled ahead while this one is tuned (:mod:`.next_key`).
    ``agreed``: the key the ranks agreed on for this position (:func:`_keys`); a build of the call that gives
    another key now (a ``build`` that is not deterministic) is this key's error, not a tuning of another key whose
    decision would be learned under this one."""
    group, started = plan.tune_group, time.perf_counter()
    key, args, kwargs, key_error = None, (), {}, None
    try:
        with user_code(f"build of call {position}"):  # user code with no deadline: a unit stuck there stops beating
            call = build(position)
        args, kwargs = call.args, dict(call.kwargs)
        with user_code("key_fn"):
            key = tuner.key_fn(*args, **kwargs)
        text = describe_key(key, "the key key_fn returned")
    except Exception as exc:  # agreed in step 1 of the tuning: the same error on every rank of the group
        key_error = f"building the call or its key raised {describe_error(exc)}"
    agreed_text = describe_key(agreed)
    if key_error is None and text != agreed_text:
        key_error = (f"building call {position} again gave the key {text}, not {agreed_text}, the key its first "
                     "build gave (the ranks agreed on that one): the build must give the same call for a key every "
                     "time")
    tuning = _Tuning(plan, tuner, group, key, args, kwargs, verbose)
    tuning.next_key = upcoming
    result = KeyResult(position, agreed_text, "failed", unit=plan.unit)
    before = tuner.decisions.get((group.name, key)) if key_error is None else None
    try:
        with group.turn():  # held already by the campaign: the key's exchange errors say so when threads crossed
            config = tuning.run(key_error, None)
        result.index = index_of(tuner.space, config)  # type: ignore[assignment]  # one of the space's dicts
        result.key, result.config, result.entry = tuning.key_text, tuner.descriptions[result.index], tuning.entry
        decision = tuner.decisions.get((group.name, key))
        if decision is not None and decision is not before and not decision.cached:
            result.state, result.margin, result.time_ms = "tuned", decision.margin, decision.time_or_none
            result.near_tie = decision.near_tie
        else:
            result.state = "cached"
    except (GroupTimeoutError, DevicePoisonedError):
        raise  # a rank of the group is gone or the device is lost: the campaign cannot go on
    except AutotuneError as exc:
        result.key, result.error = tuning.key_text or result.key, str(exc)
    if group.rank == 0 and result.state != "failed":  # its record, for the disks of the other units
        try:
            record = tuner.cache.load(result.entry, tuner.space_text)
        except Exception as exc:  # only a copy for other disks: the row goes out without it, never not at all
            logs.rank_log().warning("campaign %s: could not read the record of key %s (%s)", tuner.name, result.key,
                                    describe_error(exc))
            record = None
        if record is not None:
            result.record = {k: v for k, v in record.items() if k not in ("format", "space", "versions")}
            if result.state == "cached":
                result.time_ms, result.margin = (v if finite_number(v) else None for v in (record.get("time_ms"),
                                                                                            record.get("margin")))
                result.near_tie = recorded_near_tie(record)
    result.seconds = time.perf_counter() - started
    shared = group.broadcast(result.to_json(), f"[campaign {tuner.name}] key {position} result",
                             timeout=tuning.timeout or None)
    return checked_row(shared, (position,), len(tuner.space), f"[campaign {tuner.name}] key {position}'s result")


def _next_tuned(tuner: TunedFunction, plan: Plan, build: Callable[[int], Call], todo: list[int],
                all_keys: list[Hashable], masks: list[list[bool] | None], start: int, served: set[int],
                guessed: dict[int, list[int]], compiled: set[int]) -> tuple[int, NextKey] | None:
    """The position of the next key this unit will tune, from ``todo[start]`` on (one per round), and that key to
    compile ahead (:mod:`.next_key`), leaving out the keys this rank's disk cache serves (a rerun of a campaign, or
    a key tuned before it: compiles ahead for a key that is then a cache hit would be lost, and the key after it
    would get none). ``served`` remembers those across rounds. None: no key left, or the next has configs compiled
    ahead already (``guessed``: in an earlier round, whose key was then served). A call that cannot be built: its
    guess logs the error and compiles nothing (its tuning builds it again). Only a guess, on a unit of one rank: it
    decides which configs compile ahead, never what any rank runs or exchanges."""
    for index in range(start, len(todo), plan.units):
        position = todo[index]
        if position in served:
            continue
        if position in guessed:
            return None
        mask = masks[position]
        kept = [i for i in range(len(tuner.space)) if mask is None or mask[i]]
        try:
            with user_code(f"build of call {position}"):
                call = build(position)
        except Exception as exc:
            return position, NextKey(all_keys[position], _raises(exc), kept, compiled)
        if not _Tuning(plan, tuner, plan.tune_group, all_keys[position], call.args, dict(call.kwargs),
                       None).served_here(kept):
            return position, NextKey(all_keys[position], lambda built=call: (built.args, dict(built.kwargs)), kept,
                                     compiled)
        served.add(position)
    return None


def _raises(exc: Exception) -> Callable[[], tuple[tuple, dict[str, Any]]]:
    """A next key's call that could not be built: raises its error again when the guess asks for it."""
    def call() -> tuple[tuple, dict[str, Any]]:
        raise exc

    return call


def _log_guess(tuner: TunedFunction, plan: Plan, key: Hashable, guessed: list[int]) -> None:
    """How many of the configs compiled ahead for ``key`` its tuning screened (the rank's log)."""
    decision = tuner.decisions.get((plan.tune_group.name, key))
    if guessed and decision is not None and not decision.cached:
        logs.rank_log().info("campaign %s: key %s screened %d of the %d config(s) compiled ahead for it", tuner.name,
                             describe_key(key), len(set(guessed) & screened_by(decision)), len(guessed))


def campaign(tuned: Callable[..., Any], calls: Sequence[Any] | Callable[[Any], Any], keys: Sequence[Any] | None = None,
             *, local: bool | None = None, pg: Any = None, replicas: Any = None, verbose: bool | None = None,
             progress: bool = True) -> Summary:
    """Tune ``tuned`` at every call of ``calls`` ahead of time, spread over the job; every rank returns the same
    :class:`Summary` and holds every decision (later calls at those keys are the hot path).

    Args:
        tuned: a function decorated with :func:`~triton_dist_tune.autotune`.
        calls: the calls to tune, each a :class:`Call`, a tuple of positional arguments, a dict of keyword
            arguments or the one positional argument; or a function ``calls(key)`` building one, with ``keys``.
            Every rank builds every call once to compute its key (keep building cheap, e.g. ``torch.empty``),
            then again for the keys it tunes, and on a unit of one rank that compiles on a GPU once more before
            the key before it is tuned (to see whether the disk cache serves it, and to compile its likely configs
            ahead: :mod:`.next_key`). Calls with equal keys are tuned once.
        keys: the keys given to ``calls`` when it is a function (any values; its own key comes from ``key_fn``).
        local: the function talks to no other rank: every rank tunes its share of the keys alone, in parallel
            (default: the decorator's ``sharded``).
        pg: the group a collective function runs on (default: the default group); with ``local``, the ranks that
            share the keys (default: the default group; in a job without torch.distributed, an mpi4py communicator).
        replicas: a group linking the same position of every replica of ``pg`` (as ``autotune_replicas``): the
            keys are split between the replicas, each tuning its share in lock-step.
        verbose: print each key's tuning table on its group's rank 0 (default ``TRITON_PRINT_AUTOTUNING``).
        progress: print progress lines and the summary on rank 0 of the job (on stderr).

    A key whose tuning fails is a row with its error (see :attr:`Summary.failed`); the campaign goes on. It
    raises only for errors every rank shares (keys that differ between ranks, a call that cannot be built) or
    when a rank is lost (:class:`~triton_dist_tune.GroupTimeoutError`).
    """
    tuner: TunedFunction | None = getattr(tuned, "tuner", None)
    if tuner is None or not hasattr(tuner, "decided"):
        raise BadInputError("campaign: tuned must be a function decorated with triton_dist_tune.autotune")
    for value, option in ((local, "campaign: local"), (verbose, "campaign: verbose"), (progress, "campaign: progress")):
        if value is not None or option.endswith("progress"):  # local and verbose may be None: the function's own
            flag(value, option)
    with calling(tuner.name):  # a wrong group's note is about the function's calls (group/unresolved.py)
        return _campaign(tuner, calls, keys, local, pg, replicas, verbose, progress)


def _campaign(tuner: TunedFunction, calls: Sequence[Any] | Callable[[Any], Any], keys: Sequence[Any] | None,
              local: bool | None, pg: Any, replicas: Any, verbose: bool | None, progress: bool) -> Summary:
    build, count, problem = builder(calls, keys)  # a problem is agreed as a malformed variable's, never raised alone
    rank_local = tuner.options.sharded if local is None else bool(local)
    plan = _plan(tuner, rank_local, pg, replicas)
    with ExitStack() as turns:  # the whole campaign is one turn on its groups: another thread of this process tunes
        turns.enter_context(plan.across.turn())  # on them before or after it, never between its exchanges
        if plan.tune_group is not plan.across:  # (always across first, then the unit's group: one lock order)
            turns.enter_context(plan.tune_group.turn())
        return _rounds(tuner, plan, build, count, rank_local, verbose, progress, problem)


def _rounds(tuner: TunedFunction, plan: Plan, build: Callable[[int], Call], count: int, rank_local: bool,
            verbose: bool | None, progress: bool, problem: str | None) -> Summary:
    """The campaign's exchanges: the keys agreed, tuned round by round, the rounds' results learned."""
    if rank_local:
        tuner.rank_local = True  # its undecided keys are served by each rank alone (function/policy.py)
    env_problem = settings.problem() or problem  # a malformed variable or call, maybe on this rank only: agreed
    if env_problem is not None:
        with settings.overlooking():  # up to the keys' agreement, which raises it on every rank of the campaign
            timeout = tuner.options.timeout if tuner.options.timeout is not None else settings.current().timeout
            _keys(tuner, build, count, plan, timeout, [], env_problem)
    timeout = tuner.options.timeout if tuner.options.timeout is not None else settings.current().timeout
    started = time.perf_counter()
    masks: list[list[bool] | None] = []
    all_keys = _keys(tuner, build, count, plan, timeout, masks)
    texts = [describe_key(k) for k in all_keys]
    todo = [p for p in range(count) if texts.index(texts[p]) == p]  # equal keys: the first call only
    rounds = math.ceil(len(todo) / plan.units)
    # the campaign's own rank 0 (a campaign on a group without global rank 0 prints too, naming its group)
    shows = progress and plan.tune_group.rank == 0 and plan.across.rank == 0
    where = plan.tune_group.title if plan.tune_group.size > 1 else f"rank {logs.global_rank()}"
    shown = tuner.name if logs.global_rank() == 0 else f"{tuner.name} on {where}"
    rows: list[KeyResult] = []
    ahead = plan.tune_group.size == 1 and settings.current().compile_next_key and compiles_ahead(tuner)  # next_key.py
    compiled: set[int] = set()  # configs compiled ahead for some key of the campaign
    guessed: dict[int, list[int]] = {}  # position -> the configs compiled ahead for its key
    served: set[int] = set()  # positions whose key this rank's disk cache serves (no tuning to compile ahead for)
    # units beat, a lost one is noticed in T + grace, and one that leaves with an error says so; SIGTERM raises
    # SystemExit inside, as in a tuning: the unit can say it leaves
    with RoundWatch.start(plan.across, f"campaign {tuner.name}", timeout) as watch, interruptible():
        for r in range(rounds):
            mine = r * plan.units + plan.unit
            found = (_next_tuned(tuner, plan, build, todo, all_keys, masks, mine + plan.units, served, guessed,
                                 compiled) if ahead else None)
            following, upcoming = found if found is not None else (-1, None)
            result = (_tune_one(tuner, plan, todo[mine], all_keys[todo[mine]], build, verbose, upcoming).to_json()
                      if mine < len(todo) else None)
            if mine < len(todo):
                _log_guess(tuner, plan, all_keys[todo[mine]], guessed.pop(todo[mine], []))
            if upcoming is not None and upcoming.guessed:
                guessed[following] = upcoming.guessed
            what = f"[campaign {tuner.name}] round {r + 1} of {rounds}"
            # without a side channel (mpi4py), the round's worst case
            deadline = watch.arrive(r, what, exchange_timeout(timeout) * (len(tuner.space) + 4))
            gathered = plan.across.allgather(result, what, timeout=deadline)
            watch.passed(r)
            for item in (i for i in gathered if i is not None):
                rows.append(_learn(tuner, plan, checked_row(item, range(len(all_keys)), len(tuner.space), what),
                                   all_keys))
            if shows:
                logs.console().info(progress_line(shown, rows, len(todo), time.perf_counter() - started, r + 1, rounds))
    _unlearn_pruned(tuner, plan, rows, all_keys, masks, timeout)
    rows.sort(key=lambda row: row.position)
    summary = Summary(tuner.name, rows, time.perf_counter() - started, plan.units, _unwritten(tuner, rows))
    logs.rank_log().info("%s", summary.text())
    if shows:  # headed as the progress lines are
        logs.console().info("%s", summary.text(shown))
    return summary


def _unwritten(tuner: TunedFunction, rows: list[KeyResult]) -> list[str]:
    """On the rank that writes its node's cache folder (:func:`_learn`), the decided keys whose record the folder
    lacks now: every write of this node's ranks has ended (their tunings' before the rounds' exchanges, this rank's
    own in :func:`_learn`). Rank-local: said in this rank's summary, never exchanged."""
    if settings.launcher().local_rank not in (None, 0):
        return []
    return [row.key for row in rows if row.state != "failed" and row.entry and not tuner.cache.path(row.entry).exists()]


def _unlearn_pruned(tuner: TunedFunction, plan: Plan, rows: list[KeyResult], keys: list[Hashable],
                    masks: list[list[bool] | None], timeout: float) -> None:
    """A learned decision runs only where ``prune_fn`` keeps its config for the call: the positions whose config
    this rank's ``prune_fn`` leaves out for its own build of the call (another unit tuned it with its own) are
    gathered over the rank's tuning group (whose ranks must run one config), then over the replicas (a later call
    tunes an undecided key across them: a replica that kept it ran it while the others waited for it there), and
    their decisions are taken back on every rank of them: such a key stays undecided (a call tunes it or serves it
    by the ``undecided`` policy). A rank-local campaign's units each keep their own (they serve alone)."""
    mine = sorted(row.position for row in rows
                  if row.state != "failed" and masks[row.position] is not None
                  and not masks[row.position][row.index])  # type: ignore[index]
    what, union = f"[campaign {tuner.name}] decisions prune_fn leaves out", lambda values: sorted(set().union(*values))
    pruned = plan.tune_group.combine(mine, what, union, timeout)
    if plan.home is None and plan.across.size > 1:  # the replicas: after their groups, as the keys' agreement
        pruned = plan.across.combine(pruned, f"{what} (across replicas)", union, timeout)
    for position in pruned:
        plan.table.pop(plan.slot(keys[position]), None)
        logs.rank_log().warning("campaign %s: key %s: prune_fn leaves out the decided config for this call on a "
                                "rank of the group: the decision is not applied here (the key stays undecided)",
                                tuner.name, describe_key(keys[position]))


def _learn(tuner: TunedFunction, plan: Plan, row: KeyResult, keys: list[Hashable]) -> KeyResult:
    """Put a unit's decision into this rank's table; local rank 0 writes its record where the disk lacks it."""
    if row.state == "failed":
        return row
    plan.table[plan.slot(keys[row.position])] = tuner.space[row.index]
    writer = settings.launcher().local_rank in (None, 0)
    if writer and row.record is not None and row.entry:
        try:  # only where the disk lacks it, in one step: never over a decision another job wrote meanwhile
            tuner.cache.add(row.entry, row.record, tuner.space_text)
        except (OSError, ValueError, TypeError) as exc:  # a disk's, or a record it cannot write (served with NaN)
            logs.rank_log().warning("campaign %s: could not write key %s to the cache (%s)", tuner.name, row.key, exc)
    row.record = None
    return row
