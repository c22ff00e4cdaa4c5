"""One tuning of :func:`~triton_dist_tune.autotune` (one key, one group), at the end of which every rank holds the
same choice.

The protocol, every step on every rank of the group:

1. **Agree**: one exchange of (key, config-space fingerprint, group size, local problems). Any difference, or a
   ``key_fn`` that raised, or a config that clashes with the call's keywords, raises the same error everywhere.
2. **Prune**: ``prune_fn`` runs on every rank; a config is kept only where every rank keeps it. As in Triton,
   pruning comes before the cache: the kept set is part of the cache entry's identity.
3. **Cache**: group rank 0 alone reads the disk cache and broadcasts what it found.
4. **Resume**: the ranks gather their crash journals once and merge them into one view
   (:mod:`~triton_dist_tune.faults.recovery`, across replicas too); configs stopped are not measured again, configs
   that hung or failed in an earlier attempt (or crashed in two) are left out, suspects are measured again, and
   configs whose compile pass ended an earlier attempt are measured without one.
5. **Measure**: see :mod:`triton_dist_tune.measure`: a warm-up, then a race of interleaved rounds in which
   clearly slower configs leave early (or sharded measuring, for rank-local functions).
6. **Decide**: the least group time among the configs left in the race wins (ties: the lower index); group rank 0
   writes the cache atomically, with every config's median and spread and the margin over the runner-up, and
   broadcasts the choice. Torch's random generators are put back as they were before step 4, and the function
   is called once with the choice and its result returned.

Once a key is decided, a call is a ``key_fn`` call, a dict lookup and the function call: no communication.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .. import settings
from ..disk import logs
from ..disk.cache import entry_id
from ..disk.failures import say_failures
from ..errors import (
    AllConfigsFailedError,
    AutotuneError,
    BadInputError,
    describe_error,
)
from ..faults.evidence import outcome_text, settled
from ..faults.journal import Journal
from ..faults.recovery import across, interruptible, journal_path, shared_view
from ..faults.watchdog import WATCHDOG, Guard, exchange_timeout
from ..group.agreement import from_root
from ..group.channel import ExchangeError, Group
from ..measure import breakdown, compile_pass
from ..measure.arguments import ArgumentState, RandomState
from ..measure.budget import clocked
from ..measure.daemon_pool import AHEAD, NOW
from ..measure.graphs import journaled_clock
from ..measure.lockstep import Measurer, Todo
from ..measure.precompile import compiles_here, precompile
from ..measure.replicas import Layout, settle
from ..measure.search import TIE_BLOCKS, SearchPlan, search_applies
from ..measure.timing import timing_mode
from ..measure.trial import Trial
from ..records import Decision, Outcome
from ..space import describe_key, fingerprint, plan_seed
from .agreed import agree_on_call, agreed_prune, prepare
from .decide import (
    cache_record,
    conclude,
    decide,
    decision_from_record,
    decision_kept_later,
    keep_decision,
    raise_with_own_cause,
    say_decision,
    served,
    warn_if_another_group_chose_otherwise,
)
from .measuring import measuring
from .next_key import NextKey, compile_next_key
from .searched import Searched
from .tuned import TunedFunction, as_steady

log = logging.getLogger("triton_dist_tune")


def _not_that_config(path: Any, index: int, config: Any) -> None:
    """Say that the cache file ``path`` names, as its choice, no config of this space at ``index``."""
    log.warning("triton_dist_tune: ignoring cache file %s: its choice (config %d, %s) is not that config of this "
                "space; tuning again", path, index, str(config)[:120])


class Tuning:
    """One tuning of ``key`` on ``group`` (and, with a ``layout``, on every replica of it): :meth:`run` takes the
    protocol's steps on this rank."""

    env: settings.Settings  #: the settings as the environment says when the tuning starts
    rank_local: dict[str, Any] | None = None  #: a rank-local campaign's decision: its record's ``rank_local`` field
    #: the caller's keeper of the chosen config, called once every rank has the choice (served or tuned), before
    #: anything is logged of it: a rank interrupted after that (a log handler or Ctrl-C at the decision's line) keeps
    #: the decision its peers keep, so a later call of the key finds it decided on every rank, not on some
    agreed: Callable[[dict[str, Any]], None] | None = None

    def __init__(self, tuner: TunedFunction, group: Group, key: Any, args: tuple, kwargs: dict[str, Any],
                 verbose: bool | None, overwrite: bool = False, layout: Layout | None = None) -> None:
        self.tuner, self.group, self.key, self.layout = tuner, group, key, layout
        self.args, self.kwargs, self.verbose, self.overwrite = args, kwargs, verbose, overwrite
        #: ``journal_entry``: the entry without the kept set, timed steady (the journals'); ``kept_mark``: the
        #: entry's part naming the configs pruning kept ("" for all); ``kept``: the records' :func:`kept_print`
        self.label = self.key_text = self.entry = self.extra = self.journal_entry = self.kept_mark = self.kept = ""
        #: the tuning's timeout; when it started (``perf_counter``, for its seconds; ``monotonic``, for its budget)
        self.timeout = self.started = self.began = 0.0
        #: configs whose compile pass ended an earlier attempt (from the shared view): warmed up without one
        self.skip_pass: set[int] = set()
        self.not_written: str | None = None  #: group rank 0: why no decision was written (a read-only folder)
        self.next_key: NextKey | None = None  #: in a campaign: the unit's next key, compiled ahead (:mod:`.next_key`)
        self.trial: Trial | None = None  #: the measured calls' runner (its ``last_error``: this rank's last raise)

    def run(self, key_error: str | None, problem: str | None, cached_only: bool = False) -> dict[str, Any] | None:
        """Every step: the chosen config, the same on every rank (``cached_only``: steps 1-3, None on a miss)."""
        self.started, self.began = time.perf_counter(), time.monotonic()
        with breakdown.watching(breakdown.Stopwatch(self.started)):
            return self._run(key_error, problem, cached_only)

    def _run(self, key_error: str | None, problem: str | None, cached_only: bool) -> dict[str, Any] | None:
        tuner, group = self.tuner, self.group
        rank_log = logs.rank_log()
        self.env = settings.current()
        self._agree(key_error, problem)
        kept = self._prune()
        self._name_entry(kept)
        found, record = self._lookup()
        if found is not None:
            return cache_hit(self, found, record)
        if cached_only:
            return None
        rank_log.info("%s tuning %d configs on %d rank(s) of group '%s'", self.label, len(tuner.space), group.size,
                      logs.group_title(group))
        random_state = RandomState()  # the final call draws what one untuned call would
        try:
            decision = self._tune(kept)
        finally:
            random_state.put_back()
        if group.rank == 0:
            on_console(self, decision)
        return tuner.space[decision.index]

    def _agree(self, key_error: str | None, problem: str | None) -> None:
        """Step 1 (across replicas too, with a layout); then the timeout of this tuning."""
        tuner, layout = self.tuner, self.layout
        key_text = extra = user_extra = ""
        if key_error is None:
            try:
                key_text = describe_key(self.key, "the key key_fn returned")
                user_extra = tuner.user_extra()
                extra = tuner.entry_extra(self.args, self.kwargs, user_extra)
            except Exception as exc:  # an unstable key, or a failing cache_key_extra: agreed below
                key_error = str(exc) if isinstance(exc, BadInputError) else f"cache_key_extra: {describe_error(exc)}"
        self.key_text, self.label = key_text, f"[{tuner.name} key={key_text}]"
        agree_on_call(tuner, self.group, key_text, key_error or problem, self.args, self.kwargs, self.overwrite, layout,
                      user_extra)
        self.extra = extra
        self.timeout = tuner.options.timeout if tuner.options.timeout is not None else self.env.timeout

    def _prune(self) -> list[int]:
        """Step 2, before the cache is read (as Triton prunes before it looks a key up): the configs ``prune_fn``
        keeps on every rank (and every replica, with a layout)."""
        return agreed_prune(self.tuner, self.group, self.label, self.args, self.kwargs, self.timeout, self.layout)

    def _name_entry(self, kept: list[int]) -> None:
        """The cache entry of this tuning: what it depends on (:meth:`~.tuned.TunedFunction.entry_extra`) and the
        configs pruning kept. Its journals are named without the kept set, as steady timing names them in every mode:
        a config that hung or crashed under one is left out under any other (a rerun with another timing mode ran a
        hung config again); a time does not cross either (``kept``: ``evidence.merge`` measures it again)."""
        self.kept_mark = kept_text(kept, len(self.tuner.space))
        steady, timing = as_steady(self.extra)
        self.kept = kept_print(self.kept_mark + timing)
        self.journal_entry = self._entry(steady)
        self.extra += self.kept_mark
        self.entry = self._entry(self.extra)

    def _entry(self, extra: str) -> str:
        """The entry named by what this tuning depends on (``extra``), for its group (and layout)."""
        return entry_of(self.tuner, self.key_text, self.group.size, extra, self.layout)

    def _read_cache(self, quiet: bool = False) -> list | None:
        """``[index, what it shares]`` (:func:`served`) of the entry, or None (none, provisional, not this space's)."""
        tuner = self.tuner
        data = None if self.env.always_tune else tuner.cache.load(self.entry, tuner.space_text, quiet)
        index = data["index"] if data is not None else -1
        if data is not None and data.get("provisional"):
            return None  # a cut's choice (the time budget ended its race): tuned again, from the journals
        if 0 <= index < len(tuner.space) and data["config"] == tuner.descriptions[index]:
            if not quiet:  # served (``quiet``: a look ahead, which only reads): the job uses it (the command line)
                tuner.cache.served(self.entry, data)
            return [index, served(data)]
        if data is not None and not quiet:  # a file edited or damaged (said): the same space, another config there
            _not_that_config(tuner.cache.path(self.entry), index, data["config"])
        return None

    def _lookup(self) -> tuple[int | None, Any]:
        """Step 3: the index of the cached choice and what rank 0 shares of its record (:meth:`_read_cache`; read
        by one rank, broadcast to all), or (None, None)."""
        what = f"{self.label} cache lookup"
        if self.layout is None:
            found = from_root(self.group, self._read_cache, what, timeout=self.timeout, error=AutotuneError)
        else:
            found = self.layout.lookup(self._read_cache, what, self.timeout)
        if found is None:
            return None, None
        index = found[0] if isinstance(found, list) and len(found) == 2 else None
        if not (type(index) is int and 0 <= index < len(self.tuner.space)):
            raise ExchangeError(f"{what}: the index read is not one of the space's ({str(found)[:100]}): another "
                                "process wrote under the tuner's keys of the key-value store")
        return index, found[1]

    def _tune(self, kept: list[int]) -> Decision:
        """Steps 4 to 6, over the ``kept`` configs. The journal is locked while this tuning runs; when it is cut
        short its records stay for the next attempt."""
        tuner, group, label, env = self.tuner, self.group, self.label, self.env
        journal = journal_of(self)
        ended = clean = False
        board = group.board(exchange_timeout(self.timeout))  # beating: a rank that died is given up on
        guard = WATCHDOG.guard(board, group.rank)
        try:
            earlier = shared_view(group, journal, tuner.descriptions, env.job_id if env.always_tune else False,
                                  f"{label} journal exchange", self.timeout, kept=self.kept)
            if self.layout is not None:  # the leaders' round reads every replica's journals too
                earlier = across(self.layout.replicas, earlier, f"{label} journals across replicas", self.timeout,
                                 journal)
            self.skip_pass = {i for i, record in earlier.items() if record.get("skip_pass")}
            with interruptible():
                decision = self._measure(kept, earlier, journal, plan_seed(self.key_text, tuner.space_text), guard)
            decision.seconds = time.perf_counter() - self.started
            decision.breakdown = watch.result() if (watch := breakdown.current()) is not None else None
            writes = self.layout is None or self.layout.reads_cache
            try:
                conclude(group, label, decision, self.timeout, self._store(decision) if writes else None,
                         self.layout.replicas.size if self.layout is not None else 1,
                         lambda: keep(self, decision, decision.index),
                         decision_kept_later(tuner, group, self.key, self.agreed, decision, label,
                                             lambda: journal.remove(kept=self.kept, own=self.env.always_tune)))
            except AllConfigsFailedError as exc:
                ended = clean = True  # every config failed (every rank): over, and nothing of it may replay later
                raise_with_own_cause(exc, self.trial, label)
            ended, clean = not decision.cut, True  # a cut's choice is provisional: the next job resumes the journals
            say_decision(label, decision)
            if decision.breakdown is not None:
                logs.rank_log().info("%s time: %s", label, decision.breakdown.text(),
                                     extra={"breakdown": decision.breakdown.to_json()})
        finally:
            self.trial = None  # its arguments and its last error: not kept past the tuning
            guard.close()
            board.close(clean)  # (not clean: a peer may still wait for this rank, and read why it left)
            if ended:  # under ALWAYS_TUNE only this job's records, the ones it resumed from: another job's may
                journal.remove(kept=self.kept, own=self.env.always_tune)  # be that job's between two attempts
            journal.close()
        return decision

    def _store(self, decision: Decision) -> Any:
        """Writes ``decision``'s record to the disk cache when called."""
        tuner = self.tuner

        def store() -> Any:
            warn_if_another_group_chose_otherwise(tuner.cache.path(self.entry), tuner.name, self.key_text, self.group,
                                                  decision)
            try:
                return tuner.cache.store(self.entry, cache_record(
                    tuner.name, self.key_text, self.group, decision, tuner.source_print, tuner.origin, self.rank_local,
                    self.layout.replicas.size if self.layout is not None else None), tuner.space_text)
            except OSError as exc:  # a warning (conclude); the summary says that nothing was written
                self.not_written = f"none written ({type(exc).__name__}: {exc.strerror or exc})"
                raise

        return store

    def _measure(self, kept: list[int], earlier: dict[int, dict[str, Any]], journal: Journal,
                 seed: str, guard: Guard) -> Decision:
        """Steps 4 and 5: resume from the journals, precompile, measure; returns the group's choice."""
        tuner, layout = self.tuner, self.layout
        trial, state = prepare(tuner, self.group, self.label, self.args, self.kwargs, self.timeout, journal.read(),
                               layout)
        self.trial, timing = trial, timing_mode(tuner.options.timing)
        plan = tuner.options.plan(self.timeout, timing, seed, self.group.size)
        measurer = Measurer(self.group, trial, plan, journal, logs.rank_log(), self.label, guard)
        # the budget counts from the start of the tuning; replicas time eagerly, all alike (Measurer.device_time)
        measurer.budget.began, measurer.device_time = self.began, layout is None
        measurer.journaled_clock = journaled_clock(earlier.values())
        share = kept if layout is None else layout.share(kept)
        pruned = [Outcome(i, tuner.descriptions[i], "pruned") for i in range(len(tuner.space)) if i not in kept]
        if layout is None and not tuner.options.sharded and search_applies(tuner.search_mode(), len(kept)):
            return self._search(measurer, kept, earlier, pruned, seed, timing, state)
        outcomes, todo = self._resume(share, earlier)
        outcomes += pruned
        if layout is not None:  # this replica's share, then the leaders on every replica
            with measuring(measurer, state):
                settled = settle(layout, measurer, outcomes, todo, lambda: self._precompile(todo, measurer, len(kept)),
                                 self.todo, tuner.options.refine_top, self.label, self.timeout, len(kept), timing)
            # the replicas' clock: the same on every rank
            settled.cut, settled.clock = settled.cut or measurer.budget.cut, measurer.clock_kind
            return settled
        with measuring(measurer, state):  # (one config kept: run once, untimed, nothing compiled ahead)
            outcomes += measurer.measure(todo, len(kept), tuner.options.sharded,
                                         lambda: self._precompile(todo, measurer, len(kept)))
        decision = decide(sorted(outcomes, key=lambda o: o.index), getattr(measurer, "race", None), timing)
        decision.clock = measurer.clock_kind
        decision.cut = decision.cut or measurer.budget.cut
        return decision

    def _search(self, measurer: Measurer, kept: list[int], earlier: dict[int, dict[str, Any]],
                pruned: list[Outcome], seed: str, timing: str, state: ArgumentState | None) -> Decision:
        """Step 5 by search (:mod:`~triton_dist_tune.function.searched`): the stages, then the finalists' race."""
        searched = Searched(self, measurer, kept, earlier,
                            lambda todo, later: self._precompile(todo, measurer, len(kept), later))
        upcoming = self.next_key
        if upcoming is not None:
            searched.after_first_stage = lambda: compile_next_key(self, upcoming, measurer, earlier, len(kept))
        with measuring(measurer, state):
            outcomes, race = searched.run(SearchPlan(seed=seed), replace(measurer.plan.race, tie_blocks=TIE_BLOCKS))
        decision = decide(sorted(outcomes + pruned, key=lambda o: o.index), race, timing)
        decision.search = searched.record.text()
        decision.clock = measurer.clock_kind
        decision.cut = decision.cut or measurer.budget.cut
        return decision

    def _resume(self, share: list[int], earlier: dict[int, dict[str, Any]]) -> tuple[list[Outcome], list[Todo]]:
        """The outcomes an earlier attempt settled (:func:`~..faults.evidence.settled`), and the configs to race."""
        outcomes: list[Outcome] = []
        todo: list[Todo] = []
        for i in share:
            known = settled(earlier.get(i, {}), self.tuner.options.sharded)
            resumed = Outcome.from_json({**earlier[i], "index": i}) if known else None
            if i in earlier:
                logs.rank_log().info("%s config %d from the journal: %s", self.label, i, outcome_text(earlier[i]))
            if resumed is not None:
                resumed.resumed = True
                outcomes.append(resumed)
            else:  # not measured yet, or still in the race when an earlier attempt ended: race it now
                todo.append(self.todo(i))
        return outcomes, todo

    def _precompile(self, todo: list[Todo], measurer: Measurer, space: int, later: bool = False) -> None:
        """Start compiling the configs' kernels, split across the node: with ``precompile_fn``, else by the compile
        pass (on GPUs, when every rank can: one exchange says), which leaves out the configs whose pass ended an
        earlier attempt (:attr:`skip_pass`: they compile in their warm-up); the measurer waits for each config's
        just before its warm-up, and a config that failed to compile on any rank is failed on every rank there.
        Under a time budget the pass runs no further config once the group's clock says it is spent. ``space``:
        the configs kept for the key (worker processes or not: :func:`~..measure.precompile.default_processes`).
        ``later``: compiled ahead, after the others (:mod:`~triton_dist_tune.measure.ahead`); on one rank a search's
        stages share one pool, and a config compiled ahead is not compiled again when its stage comes."""
        if todo:
            with breakdown.part("compile"):
                self._compile_ahead(todo, measurer, space, later)

    def _compile_ahead(self, todo: list[Todo], measurer: Measurer, space: int, later: bool) -> None:
        options = self.tuner.options
        kept = measurer.compiles
        shared = self.group.size == 1 and kept.open
        if not shared:
            if later:  # compiling ahead adds to a pool the stages share; never in place of the stage's own compiles
                return
            kept.close()  # a search's earlier stage
            kept = None
        else:  # compiled ahead and needed now: its compiles not started yet go first
            for index in [item[0] for item in todo if item[0] in kept.submitted and not later]:
                kept.promote(index)
            todo = [item for item in todo if item[0] not in kept.submitted]
            if not todo:
                return
        passing = [item for item in todo if item[0] not in self.skip_pass]  # the same on every rank
        if options.precompile_fn is not None:
            measurer.compiles = precompile(self.group, self.label, options.precompile_fn, todo, self.args,
                                           self.kwargs, options.compile_threads, self.timeout, space, kept,
                                           AHEAD if later else NOW)
            measurer.watch.compiled += len(todo)
        elif passing and clocked(self.group, measurer.budget, compiles_here() and compile_pass.available(),
                                 f"{self.label} compile ahead", all, self.timeout):
            # every rank or none: the pass starts collectives; it stops at the time budget (the group's clock)
            budget = measurer.budget
            measurer.compiles = compile_pass.compile_pass(self.group, self.label, passing, measurer.aligned_run,
                                                          measurer.trial.call, options.compile_threads, self.timeout,
                                                          go_on=lambda: not budget.spent, space=space,
                                                          compiles=kept, rank=AHEAD if later else NOW)
            measurer.watch.compiled += measurer.compiles.passed
            if measurer.compiles.passed < len(passing):
                logs.rank_log().info("%s compile pass: %d of %d config(s), then the time budget was spent",
                                     self.label, measurer.compiles.passed, len(passing))

    def todo(self, index: int) -> Todo:
        """(index, config, description) of config ``index``."""
        return index, self.tuner.space[index], self.tuner.descriptions[index]


def on_console(tuning: Tuning, decision: Decision) -> None:
    """Group rank 0, after a tuning: its summary where printing is on (``autotune_verbose``,
    ``TRITON_PRINT_AUTOTUNING``), whose table lists the failed configs; else the failed configs alone, in one
    warning (:mod:`~triton_dist_tune.disk.failures`: each error once per function)."""
    tuner = tuning.tuner
    if logs.printing_enabled(tuning.verbose):
        logs.print_summary(tuner.name, tuning.key_text, tuning.group, decision,
                           tuning.not_written or tuner.cache.path(tuning.entry))
    else:
        say_failures(tuner.name, tuning.label, decision.outcomes, tuner.failures_said)


def cache_hit(tuning: Tuning, found: int, record: Any) -> dict[str, Any]:
    """Config ``found``, which the cache holds for ``tuning``'s entry (``record``: what ``_read_cache`` shares): a
    decision, kept and said as such."""
    tuner, group = tuning.tuner, tuning.group
    # a served decision is a decision: a later search of a nearby key is seeded from it, as after a tuning
    keep(tuning, decision_from_record(record, found, tuner.descriptions[found]), found)
    logs.rank_log().info("%s cache hit: config %d %s", tuning.label, found, tuner.descriptions[found])
    journal_of(tuning, create=False).remove(kept=tuning.kept, own=True)  # this job's cut attempt's, if any
    if group.rank == 0 and logs.printing_enabled(tuning.verbose):
        logs.print_cache_hit(tuner.name, tuning.key_text, group, tuner.descriptions[found],
                             tuner.cache.path(tuning.entry))
    return tuner.space[found]


def keep(tuning: Tuning, decision: Decision, index: int) -> None:
    """Keep ``decision`` (config ``index``), which every rank of ``tuning``'s group has now: the tuner's record of
    it, and the caller's (:attr:`Tuning.agreed`)."""
    keep_decision(tuning.tuner, tuning.group, tuning.key, tuning.agreed, decision, index)


def journal_of(tuning: Tuning, create: bool = True) -> Journal:
    """The tuning's crash journal on this rank, for its entry: its file names the group (name and global ranks)
    (``create=False``: only the journals that exist, unlocked, such as a cut attempt's). Its records name the entry
    the decision will be written as (``decision``): the file's name is the steady one's, and the command line
    credits each record to its decision (:func:`~triton_dist_tune.faults.unfinished.credit`)."""
    group = tuning.group
    return Journal(journal_path(tuning.tuner.cache.folder, tuning.journal_entry, group),
                   {"job": tuning.env.job_id, "group": group.name, "ranks": list(group.member_ranks),
                    "kept": tuning.kept, "decision": tuning.entry}, create)


def entry_of(tuner: TunedFunction, key_text: str, group_size: int, extra: str, layout: Layout | None) -> str:
    """The cache entry a tuning of the key ``key_text`` names on a group of ``group_size`` (and ``layout``) with
    ``extra`` (what it depends on, the kept set included)."""
    entry = entry_id(tuner.source, key_text, tuner.space_text, group_size, extra)
    return entry if layout is None else layout.entry(entry)


def kept_text(kept: list[int], size: int) -> str:
    """The part of a cache entry's identity that names the configs pruning kept: nothing when it kept every one
    (so such entries keep their names), else the kept indices."""
    return "" if len(kept) == size else "\nkept: " + ",".join(map(str, kept))


def kept_print(mark: str) -> str:
    """What a journal record says of the kept set and timing mode it was written under (``kept``): a fingerprint of
    :func:`kept_text` and the timing line of ``entry_extra``."""
    return fingerprint(mark)[:12]
