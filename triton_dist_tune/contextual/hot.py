"""A hot call: the function runs once, each launch of a decided (kernel, key) runs its config, and nothing else
happens (no communication, no session). The first launch of a key this rank has not decided starts a
:class:`~triton_dist_tune.contextual.session.Session` in the middle of the run, which then handles every launch of
the run and, after it, goes on as a session does (settling the undecided keys, tuning when the group does)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..capture import capturing, tuning_in_capture
from ..group.store_texts import said_as
from . import intercept
from .intercept import _ACTIVE, Autotuner
from .session import Session

if TYPE_CHECKING:
    from ..group.channel import Group
    from .state import TunerState

_lock = threading.Lock()

#: what :func:`launch_decided` returns for a key not decided
UNDECIDED: Any = object()

#: what tunes a contextual key ahead, for the message of a call that would tune inside a CUDA-graph capture
TUNE_AHEAD = ("call the tuned function once with the same shapes before capturing (a warm-up call tunes every "
              "(kernel, key) it meets; later calls are decided and can be captured)")


#: where an autotuner keeps its hot-path plan (made once): the positions of its key arguments, the argument count
#: from which a config's meta-parameter is passed by position, the keyword names that need the full path (kernel
#: arguments and config meta-parameters), and {id(config): (config, config.all_kwargs())}
PLAN = "_tdt_hot_plan"


def _plan(autotuner: Autotuner) -> tuple[tuple[int, ...], int, frozenset[str], dict[int, tuple[Any, dict]]]:
    names = list(autotuner.arg_names)
    positions = tuple(names.index(k) for k in autotuner.keys if k in names)
    slow = intercept.arg_name_set(autotuner) | intercept.config_names(autotuner)
    plan = (positions, intercept.first_config_position(autotuner), slow, {})
    autotuner.__dict__[PLAN] = plan
    return plan


def launch_decided(autotuner: Autotuner, args: tuple, kwargs: dict[str, Any], identity: tuple) -> Any:
    """The hot path: when group ``identity`` decided this launch's key, launch its config as
    :func:`~.intercept.launch_with` does and return what the kernel returns; else return :data:`UNDECIDED` (nothing
    launched).

    The common launch (kernel arguments by position, no meta-parameter given by the caller) computes the key as
    ``Autotuner.run`` does (:func:`~.intercept.key_of`: the key arguments' values, then every argument's dtype)
    straight from the positional arguments, with the plan made once per autotuner, and launches with the config's
    meta-parameters made once per config; any other launch takes the full path. The config goes back into the
    kernel's ``cache`` where that lacks it (cleared since: ``kernel.cache.clear()``), for later stock launches."""
    table = autotuner.__dict__.get(intercept.DECIDED)
    if table is None:
        return UNDECIDED
    positions, first_meta, slow, metas = autotuner.__dict__.get(PLAN) or _plan(autotuner)
    count = len(args)
    if count > first_meta or not slow.isdisjoint(kwargs):
        return _launch_decided_full(autotuner, args, kwargs, identity, table)
    key = []
    for p in positions:
        if p < count:
            key.append(args[p])
    for value in args:
        if hasattr(value, "dtype"):
            key.append(str(value.dtype))
    key_tuple = tuple(key)
    config = table.get((identity, key_tuple))
    if config is None:
        return UNDECIDED
    cache = autotuner.cache
    if cache.get(key_tuple) is not config:  # cleared since (``kernel.cache.clear()``), or another's
        cache[key_tuple] = config  # the group's choice again, for later stock launches (:func:`~.tracks.decide`)
    known = metas.get(id(config))
    if known is None or known[0] is not config:
        known = metas[id(config)] = (config, config.all_kwargs())
    meta = known[1]
    autotuner.best_config = config
    if config.pre_hook is None:
        return autotuner.fn.run(*args, **kwargs, **meta)
    nargs = autotuner.nargs = dict(zip(autotuner.arg_names, args, strict=False))
    try:
        config.pre_hook({**nargs, **kwargs, **meta})
        return autotuner.fn.run(*args, **kwargs, **meta)
    finally:
        autotuner.nargs = None


def _launch_decided_full(autotuner: Autotuner, args: tuple, kwargs: dict[str, Any], identity: tuple,
                         table: dict) -> Any:
    """:func:`launch_decided` for a launch that passes kernel arguments or meta-parameters by keyword (or a
    meta-parameter by position): the key from every named argument, the caller's meta-parameters cut."""
    key = intercept.tuning_key(autotuner, args, kwargs)
    config = table.get((identity, key))
    if config is None:
        return UNDECIDED
    if autotuner.cache.get(key) is not config:  # as :func:`launch_decided`
        autotuner.cache[key] = config
    return intercept.launch_with(autotuner, config, args, kwargs)


class HotCall:
    """The handler of one hot call (see the module docstring)."""

    __slots__ = ("tuner", "group", "identity", "call_number", "session")

    def __init__(self, tuner: TunerState, group: Group, call_number: int) -> None:
        self.tuner, self.group, self.identity, self.call_number = tuner, group, group.identity, call_number
        #: the session started by the first undecided launch, if any
        self.session: Session | None = None

    def launch(self, autotuner: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A decided key: its config, exactly as stock Triton launches it (:func:`launch_decided`); anything else:
        the session's."""
        session = self.session
        if session is None:
            out = launch_decided(autotuner, args, kwargs, self.identity)
            if out is not UNDECIDED:
                return out
            if capturing():  # a key to tune, met inside a CUDA-graph capture: nothing is launched for it
                raise tuning_in_capture(f"{self.tuner.options.name}: kernel {intercept.kernel_name(autotuner)}",
                                        f"key {intercept.tuning_key(autotuner, args, kwargs)!r} is not decided",
                                        TUNE_AHEAD)
            session = self._start()
        return session.launch(autotuner, args, kwargs)

    def _start(self) -> Session:
        with _lock:
            if self.session is None:
                # it settles (and may tune) when its run ends: in flight from now on (see TunerState.settling)
                self.tuner.settling(self.identity, self.call_number)
                session = Session(self.tuner, self.group, False, self.call_number)
                session.runs, session.final_run = 1, True  # in its first run, which has no track yet
                self.session = session
            return self.session

    def call(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Run the function once, its launches sent here (through :data:`~.intercept._ACTIVE`); when a session
        started, let it finish the call."""
        if not intercept._installed:
            intercept.install()
        token = _ACTIVE.set(self)
        try:
            out, error = self.tuner.fn(*args, **kwargs), None
        except Exception as exc:
            out, error = None, exc
        except BaseException:
            if self.session is not None:
                self.tuner.settled(self.identity, self.call_number)
            raise
        finally:
            _ACTIVE.reset(token)
            if self.session is not None:  # the run is over: what follows waits (turns, exchanges) under no deadline
                self.session.disarm()  # of a run (a timed launch of it, alone, armed the watchdog)
        session = self.session
        if session is None:
            self.tuner.last_runs = 1
            if error is not None:
                raise error
            return out
        # a key this rank has not decided: settling it and, when every rank met it, tuning it are exchanges, so
        # threads of this process take turns on the group (as tunings do; see Group.turn), alone too (tuning it),
        # in the order of their call numbers (once every earlier call has ended, see TunerState.settle_turn)
        try:
            self.tuner.settle_turn(self.group, self.call_number)
            with self.group.turn(), said_as("contextual"):  # (a wait that runs out names this tuner's causes)
                return session.call(args, kwargs, first=(out, error))
        finally:
            self.tuner.last_runs = session.runs
            self.tuner.settled(self.identity, self.call_number)
