"""The options of :func:`~triton_dist_tune.autotune`, checked in one place.

:class:`TuneOptions` holds every keyword option of the decorator (what each means is in ``autotune``'s docstring).
Building one checks every option that can be checked without the function; :meth:`TuneOptions.for_function` then
checks the argument names of ``restore_value`` and ``reset_to_zero`` against the function's parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..errors import BadInputError
from ..measure.arguments import check_names
from ..measure.lockstep import Plan
from ..measure.race import RacePlan
from ..measure.timing import timing_mode
from .policy import check_policy


@dataclass(frozen=True)
class TuneOptions:
    """Every keyword option of :func:`~triton_dist_tune.autotune`, with its defaults; checked on construction."""

    n_warmup: int = 3
    n_repeat: int = 10
    timeout: float | None = None
    reset_to_zero: Iterable[str] = ()
    restore_value: Iterable[str] = ()
    pre_hook: Callable[..., Any] | None = None
    post_hook: Callable[..., Any] | None = None
    ref_prog: Callable[..., Any] | None = None
    rtol: float | None = None
    atol: float | None = None
    early_stop: float | None = None
    sharded: bool = False
    precompile_fn: Callable[..., Any] | None = None
    compile_threads: int | None = None
    refine_top: int = 0
    name: str | None = None
    timing: str | None = None
    batch: int | None = None
    budget: float | None = None
    cache_key_extra: str | Callable[[], str] | None = None
    undecided: str | None = None
    distance: Callable[[Any, Any], float | None] | None = None

    def __post_init__(self) -> None:
        if self.n_warmup < 0 or self.n_repeat < 1:
            raise BadInputError(f"need n_warmup >= 0 and n_repeat >= 1, got {self.n_warmup} and {self.n_repeat}")
        if self.timeout is not None and not 0 < self.timeout < float("inf"):
            raise BadInputError(f"timeout must be a positive number of seconds, got {self.timeout}")
        if self.early_stop is not None and self.early_stop <= 1:
            raise BadInputError(f"early_stop is a slowdown factor and must be > 1, got {self.early_stop}")
        if (self.rtol is None) != (self.atol is None):
            raise BadInputError("give both rtol and atol, or neither (then torch's defaults for the dtype apply)")
        extra = self.cache_key_extra
        if extra is not None and not (isinstance(extra, str) or callable(extra)):
            raise BadInputError("cache_key_extra must be a string or a function returning one")
        if self.refine_top < 0:
            raise BadInputError(f"refine_top must be >= 0, got {self.refine_top}")
        if self.batch is not None and not (isinstance(self.batch, int) and self.batch >= 1):
            raise BadInputError(f"batch must be a whole number of calls >= 1, got {self.batch!r}")
        if self.budget is not None and not 0 < self.budget < float("inf"):
            raise BadInputError(f"budget must be a positive number of seconds, got {self.budget!r}")
        check_policy(self.undecided)
        if self.distance is not None and not callable(self.distance):
            raise BadInputError("distance must be callable: distance(key, decided_key) -> float or None")
        timing_mode(self.timing)  # reject a bad mode now; the environment may still override it per call

    def for_function(self, fn: Callable[..., Any]) -> TuneOptions:
        """These options, with ``restore_value`` and ``reset_to_zero`` checked to name parameters of ``fn`` (and
        made tuples)."""
        return replace(self, restore_value=check_names(fn, self.restore_value, "restore_value"),
                       reset_to_zero=check_names(fn, self.reset_to_zero, "reset_to_zero"))

    def plan(self, timeout: float, timing: str, seed: str) -> Plan:
        """How one tuning measures: warm-up, the race's rules, timing mode and batch length."""
        race = RacePlan(max_rounds=self.n_repeat, budget_s=self.budget, early_stop=self.early_stop,
                        keep_top=self.refine_top or None, seed=seed)
        return Plan(self.n_warmup, timeout, race, timing, self.batch)
