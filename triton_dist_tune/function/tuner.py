"""The routing of the calls of one function decorated with :func:`~triton_dist_tune.autotune` that are not the hot
path: a call with tuner keywords or an undecided key is served, or tuned (:mod:`~.tuning`); the function's space,
options and decisions are its :class:`~.tuned.TunedFunction`'s."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from .. import settings
from ..disk import logs
from ..errors import BadInputError, describe_error
from ..group.calls import calling
from ..group.channel import Group
from ..group.resolve import find_group, resolve_group
from ..group.store_texts import said_as
from ..measure.replicas import Layout
from ..space import CALL_KEYWORDS, check_call, check_no_clash, describe, describe_key, keeps, unfit_call
from .cached_alone import cached_alone
from .cached_keys import cached_keys
from .options import TuneOptions
from .tuned import TunedFunction
from .tuning import Tuning

#: the folders whose frames lie between the caller of a tuned function and the tuner: this package's and Dynamo's
#: (:func:`~triton_dist_tune.capture.eagerly` runs the call under ``torch._dynamo.disable``)
_INSIDE = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
           f"{os.sep}torch{os.sep}_dynamo{os.sep}")


def caller_level() -> int:
    """The ``stacklevel`` that makes a warning raised by the function calling this one name the line of the tuned
    function's caller (the first frame outside this package and Dynamo's wrappers), whatever the path in between."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and (frame.f_code.co_filename.startswith(_INSIDE[0])
                                        or _INSIDE[1] in frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


class Tuner(TunedFunction):
    """One decorated function (:class:`~.tuned.TunedFunction`: its space, options and decisions) and the routing
    of its calls that are not the hot path (see :func:`autotune`)."""

    def __init__(self, fn: Callable[..., Any], config_space: Sequence[dict[str, Any]],
                 key_fn: Callable[..., Hashable], prune_fn: Callable[..., bool] | None, options: TuneOptions) -> None:
        super().__init__(fn, config_space, key_fn, prune_fn, options)
        self._overwrite_warned: set[str] = set()
        self._untuned_warned: set[int] = set()  # autotune=False's configs after a pruned first, said once each
        self._not_cached: set[Hashable] = set()  # slots an ``undecided`` policy serves: their cache held nothing
        #: a rank-local function's slots whose cache entry this rank read alone (:mod:`.cached_alone`): served that
        #: decision, but not decided (another rank's entry may be missing: under ``tune`` the group tunes it together)
        self._read_alone: dict[Hashable, dict[str, Any]] = {}

    def call(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A call that carries tuner keywords or whose key is not decided yet."""
        # ``autotune=None`` turned tuning off where ``autotune="no"`` tuned, and ``autotune_allow_arg_overwrite="no"``
        # let the caller's value win: a flag that is not a bool is a mistake of the call, agreed like the others
        # (ranks that passed the flag right wait for this one at the agreement)
        enabled = kwargs.pop("autotune", True)
        verbose = kwargs.pop("autotune_verbose", None)
        overwrite = kwargs.pop("autotune_allow_arg_overwrite", False)
        problem = next((f"{self.name}: {name}= must be True or False, not {value!r}" for name, value in
                        (("autotune", enabled), ("autotune_allow_arg_overwrite", overwrite),
                         ("autotune_verbose", False if verbose is None else verbose))
                        if not isinstance(value, bool)), None)
        if problem is not None:
            enabled, overwrite, verbose = enabled is not False, overwrite is True, verbose is True
        pg = kwargs.pop("autotune_pg", None)
        replicas = kwargs.pop("autotune_replicas", None)
        typos = sorted(k for k in kwargs if k.startswith("autotune") and k not in self.params)
        if typos and problem is None:
            problem = (f"{getattr(self.fn, '__qualname__', self.name)}() got unknown tuner keyword(s) {typos}; the "
                       f"tuner's call keywords are {sorted(CALL_KEYWORDS)}")
        if len(args) > self.positional_limit:  # a tuned parameter by position: named, decided key or not
            problem = problem or self._call_problem(args)
        if not enabled:
            if problem:
                raise BadInputError(problem)
            return self._run(args, kwargs, self._first_config(args, kwargs, overwrite), overwrite)
        # a malformed variable, maybe on this rank only: read as its default here, and carried by the first exchange;
        # a wrong group's note is about this function's call, and so are the notes this call's waits raise; a wait
        # that runs out names autotune's causes (inside a contextual function's run too)
        with settings.overlooking(), calling(self.name), said_as("autotune"):
            return self._tune_or_serve(args, kwargs, pg, verbose, overwrite, replicas, typos, problem)

    def _tune_or_serve(self, args: tuple, kwargs: dict[str, Any], pg: Any, verbose: bool | None, overwrite: bool,
                       replicas: Any, typos: list[str], problem: str | None) -> Any:
        """The rest of :meth:`call` once tuning is on: a decided key runs, an undecided one is served or tuned. A
        malformed variable (:func:`~triton_dist_tune.settings.problem`, read for an undecided key only) fails every
        rank alike at the first exchange of the serving or the tuning."""
        group = resolve_group(pg)
        layout = None if replicas is None else Layout(group, resolve_group(replicas, "autotune_replicas"))
        if layout is not None and self.options.sharded:
            raise BadInputError(f"{self.name}: autotune_replicas is for lock-step tuning, not sharded=True")
        key_exc: Exception | None = None  # what key_fn raised: the cause of the agreed error, with its frames
        try:  # without a mistyped tuner keyword, which key_fn would reject before the mistake could be named
            key = self.key_fn(*args, **({k: v for k, v in kwargs.items() if k not in typos} if typos else kwargs))
            key_error = None
        except Exception as exc:
            # a tuned parameter the call passed (by position, or by keyword unless allowed) is the likely cause of a
            # key_fn written for the call without it: named as such, not as key_fn's TypeError
            key, key_error, key_exc = None, (self._call_problem(args, None if overwrite else kwargs)
                                             or f"key_fn failed: {describe_error(exc)}"), exc
        if key_error is None:
            try:
                hash(key)
            except Exception as exc:  # a key whose __hash__ raises anything: agreed below, as key_fn's errors are
                key, key_error = None, (f"key_fn returned an unhashable key ({describe_error(exc)}): return a tuple "
                                        "(of numbers, strings, tuples) instead of a list, dict, set or array")
        self.forget_alone()
        table, slot = self._place(key, pg, group, layout)
        config = table.get(slot) if key_error is None else None
        with ExitStack() as turn:
            turn.enter_context(_caused_by(key_exc))  # (left last: after the group's turn)
            # serving or tuning: threads of this process take turns on the group, so that their exchanges never
            # interleave (a decided key takes none); with replicas, on the replicas' group too, which the tuning
            # exchanges on: that one first, as a campaign takes its rounds' group first (one lock order)
            # a decision this rank's interrupted call left unread is kept first, if any: by a decided key's call too,
            # which makes no exchange (before, its rank's decisions lacked it until its next tuning call)
            if config is None or group.has_unread():
                if layout is not None:
                    turn.enter_context(layout.replicas.turn())
                turn.enter_context(group.turn())
                group.read_unread()
                config = table.get(slot) if key_error is None else None  # decided by a thread before us, or just read?
            env_problem = settings.problem() if config is None else None  # agreed below, never raised alone

            def tuning() -> Tuning:  # (made where a step of the protocol runs, never for a slot served already)
                return Tuning(self, group, key, args, self._tuned_kwargs(kwargs, overwrite), verbose, overwrite,
                              layout)

            if config is None and self.undecided.current() != "tune":  # ``undecided="nearest"|"first"``: no tuning
                # a key key_fn could not give, or one that is no key (a tensor, nan): raised by every rank at the
                # cache lookup's agreement, else (a rank-local function, a key looked up before) at the serving
                serve_problem = key_error or _key_problem(key) or env_problem
                config, serve_problem = self._cached(table, slot, tuning, serve_problem, key_error,
                                                     problem or env_problem)
                if config is None:
                    config = self._serve(table, slot, group, args, kwargs, overwrite, serve_problem, layout)
            if config is not None and not problem and not overwrite and not self.space_names.isdisjoint(kwargs):
                problem = self._call_problem((), kwargs)  # a tuned parameter by keyword: named, decided key or not
            if config is not None and problem:
                raise BadInputError(problem)  # decided: the other ranks are not tuning, so nothing to agree on
            if config is None:
                # a call no config can make whole (a required argument neither it nor any config gives): every
                # config would fail alike, so the call's mistake is said, agreed like the others, before any runs
                problem = problem or unfit_call(self.fn, self.space_names, args, kwargs, self.name)
                tuned = tuning()
                tuned.agreed = lambda chosen: self._decided(table, slot, group, key, chosen)
                config = tuned.run(key_error, problem or env_problem)
        return self._run(args, kwargs, config, overwrite)

    def _cached(self, table: dict[Hashable, dict[str, Any]], slot: Hashable, tuning: Callable[[], Tuning],
                serve_problem: str | None, key_error: str | None,
                problem: str | None) -> tuple[dict[str, Any] | None, str | None]:
        """Before an ``undecided`` policy serves ``slot``: (its decision in the disk cache, else None; the serving's
        problem). A key the cache holds is its decision, not the policy's config: a collective function's group reads
        the cache first, as a tuning does (``tuning()``'s steps 1 to 3), agreeing on the call, and a hit is decided on
        every rank; a rank-local function's rank reads its own entry alone (it talks to nobody:
        :mod:`.cached_alone`), and a hit is served, never decided: another rank's entry may be missing (its node's
        disk), and a decision held by some ranks only would have the others tune it alone under ``tune``. Each slot's
        cache is read once (a miss: :attr:`_not_cached`)."""
        local = self.options.sharded or self.rank_local
        if local and serve_problem:
            return None, serve_problem
        if local and slot in self._read_alone:
            return self._read_alone[slot], None
        if slot in self._not_cached:
            return None, serve_problem
        looked = tuning()
        if local:
            config, serve_problem = cached_alone(looked)
            if config is not None:
                self._read_alone[slot] = config
        else:
            config = looked.run(key_error, problem, cached_only=True)
            if config is not None:
                self._decided(table, slot, looked.group, looked.key, config)
        if config is None and serve_problem is None:
            self._not_cached.add(slot)
        return config, serve_problem

    def _decided(self, table: dict[Hashable, dict[str, Any]], slot: Hashable, group: Any, key: Hashable,
                 config: dict[str, Any]) -> dict[str, Any]:
        """Keep ``config``, tuned or read from the cache, as ``slot``'s decision; returns it."""
        table[slot] = config
        if table is self.decided and group.size == 1 and (settings.current().world_size or 1) > 1:
            self.alone.add(key)  # decided before the job's group existed: the group tunes it once it does
        return config

    def decided_config(self, key: Hashable, pg: Any, replicas: Any) -> dict[str, Any] | None:
        """The config decided for ``key`` where a call with ``autotune_pg=pg`` and ``autotune_replicas=replicas``
        looks for it, else None: the capture check's question, asked before anything runs. A group object no call
        has used yet has decided nothing: it is not set up here (an mpi4py communicator's would be a collective
        inside the capture, on this rank alone). A decision this rank's interrupted call left unread is read first,
        as a call does (a read of the key-value store: nothing is launched)."""
        group = resolve_group(None) if pg is None else find_group(pg)
        across = None if replicas is None else find_group(replicas)
        if group is None or (replicas is not None and across is None):
            return None
        layout = None if across is None else Layout(group, across)
        table, slot = self._place(key, pg, group, layout)
        try:
            if slot not in table and group.has_unread():  # (the turn: never waited for where none is left)
                with group.turn():
                    group.read_unread()
            return table.get(slot)
        except TypeError:  # an unhashable key: never decided
            return None

    def _place(self, key: Hashable, pg: Any, group: Group, layout: Layout | None) -> tuple[dict, Hashable]:
        """The table a decision for ``key`` lives in and its slot there: the default group's by key, another
        group's by its identity, a layout's by both groups' identities."""
        if layout is not None:
            return self.decided_in, (group.identity, layout.replicas.identity, key)
        return (self.decided, key) if pg is None else (self.decided_in, (group.identity, key))

    def _call_problem(self, args: tuple, kwargs: dict[str, Any] | None = None) -> str | None:
        """The message for a tuned parameter passed by position (what makes a ``key_fn`` written for the call
        without it fail) or by keyword (the same message as for an undecided key), else None."""
        try:
            check_call(self.fn, self.space, args, kwargs or {}, self.name)
        except BadInputError as exc:
            return str(exc)
        return None

    def _serve(self, table: dict[Hashable, dict[str, Any]], slot: Hashable, group: Any, args: tuple,
               kwargs: dict[str, Any], overwrite: bool, problem: str | None = None,
               layout: Layout | None = None) -> dict[str, Any] | None:
        """The ``undecided`` policy's config for an undecided key (None: tune it): one ``prune_fn`` keeps for this
        call, agreed by the group (and, with a ``layout``, across its replicas) unless the function is rank-local
        (see :mod:`.policy`); ``problem`` (a malformed variable on this rank) is raised on every rank of the group
        instead."""
        tuned_kwargs = self._tuned_kwargs(kwargs, overwrite)

        def kept(config: dict[str, Any]) -> bool:
            return keeps(self.prune_fn, config, args, tuned_kwargs)

        def on_disk() -> list[tuple[Hashable, str, int]]:  # read on group rank 0 alone (this rank, if rank-local)
            try:
                extra = self.entry_extra(args, tuned_kwargs)
            except Exception:  # a cache_key_extra that raises: no entry of the call to match (the lookup said why)
                return []
            return cached_keys(self, group.size, extra, layout)

        local = self.options.sharded or self.rank_local
        timeout = self.options.timeout if self.options.timeout is not None else settings.current().timeout
        config = self.undecided.serve(table, slot, table is self.decided_in, self.space, kept,
                                      None if local else group, timeout, announce=getattr(group, "rank", 0) == 0,
                                      problem=problem, space_print=self.space_print,
                                      replicas=None if local or layout is None else layout.replicas, on_disk=on_disk)
        if config is not None and not overwrite:
            check_no_clash(config, tuned_kwargs)
        return config

    def _run(self, args: tuple, kwargs: dict[str, Any], config: dict[str, Any], overwrite: bool) -> Any:
        """Call the function with ``config``; with ``autotune_allow_arg_overwrite``, the caller's keywords win."""
        if overwrite:
            clash = sorted(set(config).intersection(kwargs))
            for name in clash:
                if name not in self._overwrite_warned:
                    self._overwrite_warned.add(name)
                    text = (f"triton_dist_tune: {self.name}: the caller's {name}={kwargs[name]!r} overrides the "
                            "tuned config's value (autotune_allow_arg_overwrite=True)")
                    logs.warn(text, UserWarning, caller_level())
            return self.fn(*args, **{**config, **kwargs})
        return self.fn(*args, **kwargs, **config)

    def _tuned_kwargs(self, kwargs: dict[str, Any], overwrite: bool) -> dict[str, Any]:
        """The call's keywords while configs are tried: with ``autotune_allow_arg_overwrite``, without those a
        config sets (``prune_fn`` and every measured call see the config under test, as in Triton-distributed)."""
        if not overwrite:
            return kwargs
        return {k: v for k, v in kwargs.items() if k not in self.space_names}

    def _first_config(self, args: tuple, kwargs: dict[str, Any], overwrite: bool = False) -> dict[str, Any]:
        kwargs = self._tuned_kwargs(kwargs, overwrite)
        for position, config in enumerate(self.space):
            if keeps(self.prune_fn, config, args, kwargs):
                if not overwrite:
                    check_no_clash(config, kwargs)
                if position and position not in self._untuned_warned and _in_a_job():
                    self._untuned_warned.add(position)
                    logs.warn(f"{self.name}: autotune=False ran config {position} ({describe(config)}), the "
                              "first config prune_fn keeps on this rank: without tuning, prune_fn is asked on each "
                              "rank alone (no communication), so a rank where it answers otherwise runs another "
                              "config; make prune_fn answer alike on every rank, or tune (ranks then keep only the "
                              "configs every rank keeps)", RuntimeWarning, caller_level())
                return config
        raise BadInputError(f"{self.name}: prune_fn keeps no config for this call (autotune=False)")


@contextmanager
def _caused_by(cause: Exception | None) -> Iterator[None]:
    """A :class:`BadInputError` raised inside (every rank's agreed error) chained to ``cause``, what this rank's
    ``key_fn`` raised, where it has no cause of its own: the user's frames, as Triton-distributed's stack gives them."""
    try:
        yield
    except BadInputError as err:
        if cause is not None and err.__cause__ is None:
            err.__cause__ = cause
        raise


def _in_a_job() -> bool:
    """Whether this process is one rank of several (the launcher's variables, or torch.distributed's group)."""
    if (settings.current().world_size or 1) > 1:
        return True
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _key_problem(key: Hashable) -> str | None:
    """Why ``key`` is no tuning key (a tensor, an object hashed by identity, nan:
    :func:`~triton_dist_tune.space.describe_key`), as the tuning's agreement says it, or None."""
    try:
        describe_key(key, "the key key_fn returned")
    except BadInputError as exc:
        return str(exc)
    return None
