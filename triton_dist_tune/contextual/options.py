"""The options of one contextual tuned function, completed from the environment and checked when it is decorated."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import settings
from ..errors import BadInputError


@dataclass(frozen=True)
class ContextualOptions:
    """What ``@contextual_autotune(...)`` was given (see its docstring), with the environment's defaults filled in.

    Build it with :meth:`build`; a bad value raises :class:`~triton_dist_tune.errors.BadInputError` there, when
    the function is decorated, never during a call.
    """

    #: False or None (this process alone), True (the default group), or a process group or mpi4py communicator
    is_dist: Any
    #: the most rounds of the race
    n_repeat: int
    #: untimed steps (runs) per config before the race
    n_warmup: int
    #: seconds per run under the watchdog and per exchange; None: ``TRITON_DIST_AUTOTUNE_TIMEOUT`` (read when a
    #: call tunes)
    timeout: float | None
    #: compile every config of a newly met kernel in a thread pool before it is stepped (GPUs only)
    precompile: bool
    #: the function's name in logs and cache entries
    name: str
    #: the most runs of the function in one call
    max_runs: int
    #: calls between the group's agreements on keys met without tuning
    sync_every: int

    def __post_init__(self) -> None:
        _check_steps(self.n_warmup, self.n_repeat)
        _check_count(self.max_runs, "max_runs")
        _check_count(self.sync_every, "sync_every")

    @property
    def label(self) -> str:
        """The prefix of this function's log lines."""
        return f"[contextual {self.name}]"

    @classmethod
    def build(cls, fn: Callable[..., Any], is_dist: Any, n_repeat: int, n_warmup: int, *, timeout: float | None,
              precompile: bool, name: str | None, max_runs: int | None,
              sync_every: int | None) -> ContextualOptions:
        """The options of ``fn`` as decorated; ``max_runs`` / ``sync_every`` None take the environment's
        (``settings.current()``: ``TRITON_DIST_AUTOTUNE_MAX_RUNS``, ``..._SYNC_EVERY``)."""
        _check_steps(n_warmup, n_repeat)  # before the environment is read, as the decorator always checked
        if max_runs is None or sync_every is None:
            env = settings.current()
            max_runs = env.max_runs if max_runs is None else max_runs
            sync_every = env.sync_every if sync_every is None else sync_every
        return cls(is_dist=is_dist, n_repeat=n_repeat, n_warmup=n_warmup, timeout=timeout, precompile=precompile,
                   name=name or getattr(fn, "__qualname__", getattr(fn, "__name__", "function")),
                   max_runs=max_runs, sync_every=sync_every)


def _check_steps(n_warmup: int, n_repeat: int) -> None:
    if n_warmup < 0 or n_repeat < 1:
        raise BadInputError(f"need n_warmup >= 0 and n_repeat >= 1, got {n_warmup} and {n_repeat}")


def _check_count(value: Any, what: str) -> None:
    if not isinstance(value, int) or value < 1:
        raise BadInputError(f"{what} must be a positive whole number, got {value!r}")
