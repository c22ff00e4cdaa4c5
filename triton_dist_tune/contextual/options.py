"""The options of one contextual tuned function, completed from the environment and checked when it is decorated."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import checks, settings
from ..errors import BadInputError
from ..group.mpi import is_communicator, not_a_communicator


@dataclass(frozen=True)
class ContextualOptions:
    """What ``@contextual_autotune(...)`` was given (see its docstring), with the environment's defaults filled in.

    Build it with :meth:`build`; a bad value raises :class:`~triton_dist_tune.errors.BadInputError` there, when
    the function is decorated, never during a call.
    """

    #: None (the default: the default torch.distributed group when it is initialized with several ranks, else this
    #: process alone), True (the default group), False (this process alone, on purpose), or a torch.distributed
    #: ProcessGroup or an mpi4py communicator
    is_dist: Any
    #: the most rounds of the race
    n_repeat: int
    #: untimed steps (runs) per config before the race
    n_warmup: int
    #: seconds per run under the watchdog and per exchange; None: ``TRITON_DIST_AUTOTUNE_TIMEOUT`` (read when a
    #: call tunes)
    timeout: float | None
    #: compile the configs of a newly met kernel and key ahead, each once per node (GPUs only; :mod:`~.compiling`)
    precompile: bool
    #: the function's name in logs and cache entries
    name: str
    #: the most runs of the function in one call
    max_runs: int
    #: calls between the group's agreements on keys met without tuning
    sync_every: int
    #: ``auto``, ``search`` or ``exhaustive``: whether a kernel's large space is searched (the job's
    #: ``TRITON_DIST_AUTOTUNE_SEARCH`` wins, read when a call meets the kernel)
    search: str = "auto"

    def __post_init__(self) -> None:
        _check_steps(self.n_warmup, self.n_repeat)
        check_is_dist(self.is_dist)
        checks.whole(self.max_runs, "max_runs", 1)
        checks.whole(self.sync_every, "sync_every", 1)
        checks.timeout(self.timeout)
        checks.flag(self.precompile, "precompile")
        checks.text(self.name, "name")
        checks.search(self.search)

    @property
    def label(self) -> str:
        """The prefix of this function's log lines."""
        return f"[contextual {self.name}]"

    @classmethod
    def build(cls, fn: Callable[..., Any], is_dist: Any, n_repeat: int, n_warmup: int, *, timeout: float | None,
              precompile: bool, name: str | None, max_runs: int | None,
              sync_every: int | None, search: str = "auto") -> ContextualOptions:
        """The options of ``fn`` as decorated; ``max_runs`` / ``sync_every`` None take the environment's
        (``settings.current()``: ``TRITON_DIST_AUTOTUNE_MAX_RUNS``, ``..._SYNC_EVERY``)."""
        _check_steps(n_warmup, n_repeat)  # before the environment is read, as the decorator always checked
        if max_runs is None or sync_every is None:
            env = settings.current()
            max_runs = env.max_runs if max_runs is None else max_runs
            sync_every = env.sync_every if sync_every is None else sync_every
        return cls(is_dist=is_dist, n_repeat=n_repeat, n_warmup=n_warmup, timeout=timeout, precompile=precompile,
                   name=name if name is not None else getattr(fn, "__qualname__", getattr(fn, "__name__", "function")),
                   max_runs=max_runs, sync_every=sync_every, search=search)


def check_is_dist(value: Any) -> None:
    """Raise :class:`~triton_dist_tune.errors.BadInputError` naming ``is_dist`` unless it is None, True, False, a
    ``torch.distributed`` ProcessGroup or an ``mpi4py`` communicator (checked when decorating, never in a call)."""
    if value is None or value is True or value is False:
        return
    if is_communicator(value):
        return
    module = type(value).__module__
    if module.startswith("torch"):
        from torch.distributed import ProcessGroup

        if isinstance(value, ProcessGroup):
            return
    raise BadInputError(f"contextual_autotune(is_dist=...) must be True, False, None (the default group when "
                        f"torch.distributed is initialized), a torch.distributed ProcessGroup or an mpi4py "
                        f"communicator, not {value!r} "
                        f"({not_a_communicator(value) if module.startswith('mpi4py') else type(value).__name__})")


def _check_steps(n_warmup: Any, n_repeat: Any) -> None:
    checks.whole(n_warmup, "n_warmup", 0)
    checks.whole(n_repeat, "n_repeat", 1)
