"""A hot call: the function runs once, each launch of a decided (kernel, key) runs its config, and nothing else
happens (no communication, no session). The first launch of a key this rank has not decided starts a
:class:`~triton_dist_tune.contextual.session.Session` in the middle of the run, which then handles every launch of
the run and, after it, goes on as a session does (settling the undecided keys, tuning when the group does)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from . import intercept
from .intercept import Autotuner
from .session import Session

if TYPE_CHECKING:
    from ..group.channel import Group
    from .tuner import ContextualTuner

_lock = threading.Lock()

#: what :func:`launch_decided` returns for a key not decided
UNDECIDED: Any = object()


def launch_decided(autotuner: Autotuner, args: tuple, kwargs: dict[str, Any], identity: tuple) -> Any:
    """The hot path: when group ``identity`` decided this launch's key, launch its config as
    :func:`~.intercept.launch_with` does and return what the kernel returns; else return :data:`UNDECIDED` (nothing
    launched). The key is computed as :func:`~.intercept.tuning_key` does, with the arguments named once for both."""
    table = autotuner.__dict__.get(intercept.DECIDED)
    if table is None:
        return UNDECIDED
    nargs, named = intercept.named_arguments(autotuner, args, kwargs)
    config = table.get((identity, intercept.key_of(autotuner, named)))
    if config is None:
        return UNDECIDED
    if len(args) > intercept.first_config_position(autotuner) or not intercept.config_names(autotuner).isdisjoint(
            kwargs):
        return intercept.launch_with(autotuner, config, args, kwargs)  # caller-given meta-parameters: cut them first
    autotuner.nargs = nargs
    autotuner.best_config = config
    try:
        meta = config.all_kwargs()
        if config.pre_hook is not None:
            config.pre_hook({**nargs, **kwargs, **meta})
        return autotuner.fn.run(*args, **kwargs, **meta)
    finally:
        autotuner.nargs = None


class HotCall:
    """The handler of one hot call (see the module docstring)."""

    __slots__ = ("tuner", "group", "identity", "call_number", "session")

    def __init__(self, tuner: ContextualTuner, group: Group, call_number: int) -> None:
        self.tuner, self.group, self.identity, self.call_number = tuner, group, group.identity, call_number
        #: the session started by the first undecided launch, if any
        self.session: Session | None = None

    def launch(self, autotuner: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A decided key: its config, exactly as stock Triton launches it; anything else: the session's."""
        session = self.session
        if session is None:
            out = launch_decided(autotuner, args, kwargs, self.identity)
            if out is not UNDECIDED:
                return out
            session = self._start()
        return session.launch(autotuner, args, kwargs)

    def _start(self) -> Session:
        with _lock:
            if self.session is None:
                session = Session(self.tuner, self.group, False, self.call_number)
                session.runs, session.final_run = 1, True  # in its first run, which has no track yet
                self.session = session
            return self.session

    def call(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Run the function once; when a session started, let it finish the call."""
        out, error = intercept.run_with(self, self.tuner.fn, args, kwargs)
        session = self.session
        if session is None:
            self.tuner.last_runs = 1
            if error is not None:
                raise error
            return out
        try:
            return session.call(args, kwargs, first=(out, error))
        finally:
            self.tuner.last_runs = session.runs
