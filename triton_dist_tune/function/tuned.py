"""What one function decorated with :func:`~triton_dist_tune.autotune` is and has decided: its space, options,
cache entry's dependencies and decisions.

A :class:`TunedFunction` is what a tuning of one of its keys reads and fills (:mod:`~.tuning`, :mod:`~.agreed`,
:mod:`~.campaign`); its :class:`~triton_dist_tune.function.tuner.Tuner` adds the routing of its calls.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from .. import settings
from ..disk.cache import DiskCache, dependency_text, source_of
from ..errors import BadInputError
from ..measure.timing import timing_mode
from ..records import Decision
from ..space import check_space_signature, describe, fingerprint, validate_space, without_repeats
from .options import TuneOptions
from .policy import Undecided

#: the last line of :meth:`TunedFunction.entry_extra`, which names the timing mode: part of a cache entry's name (a
#: decision timed cold is no answer for steady timing) but not of its journals' (a config that hung or crashed under
#: one timing mode is left out under the other; ``Tuning._name_entry``)
TIMING_LINE = "\ntiming: "


def as_steady(extra: str) -> tuple[str, str]:
    """``entry_extra``'s text as steady timing writes it (its last line names the timing mode:
    :data:`TIMING_LINE`), and that line where it names another mode, else "": a steady tuning's journals and
    records are named as before the timing mode left the journals' names."""
    cut = extra.rfind(TIMING_LINE)
    if cut < 0 or extra[cut:] == f"{TIMING_LINE}steady":
        return extra, ""
    return f"{extra[:cut]}{TIMING_LINE}steady", extra[cut:]


def positional_limit(fn: Callable[..., Any], tuned: frozenset[str]) -> float:
    """How many positional arguments ``fn`` takes before its first tuned parameter (infinity when that cannot be
    told: no signature, or ``*args`` before any tuned parameter)."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return float("inf")
    count = 0
    for p in parameters:
        if p.kind is p.VAR_POSITIONAL:
            return float("inf")
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.name in tuned:
            return count
        count += 1
    return count


def _tensor_devices(args: tuple, kwargs: dict[str, Any]) -> str:
    kinds = {v.device.type for v in (*args, *kwargs.values()) if hasattr(v, "device") and hasattr(v, "data_ptr")}
    return ",".join(sorted(kinds))


class TunedFunction:
    """One decorated function: its space, options and decisions (see :func:`~triton_dist_tune.autotune`)."""

    def __init__(self, fn: Callable[..., Any], config_space: Sequence[dict[str, Any]],
                 key_fn: Callable[..., Hashable], prune_fn: Callable[..., bool] | None, options: TuneOptions) -> None:
        if not callable(key_fn):
            raise BadInputError(f"key_fn must be callable, got {key_fn!r}" + (
                ": triton.autotune's key=[...] names arguments; key_fn is a function of the call's arguments that "
                "returns the key, e.g. key_fn=lambda x, n, **kw: (n, x.dtype) (Triton adds every tensor argument's "
                "dtype to its key by itself; key_fn's key is what it returns)"
                if isinstance(key_fn, (list, tuple)) and all(isinstance(k, str) for k in key_fn) else ""))
        if prune_fn is not None and not callable(prune_fn):
            raise BadInputError("prune_fn must be callable or None")
        self.fn = fn
        self.name = options.name or getattr(fn, "__name__", "tuned")
        self.space = validate_space(config_space)
        check_space_signature(fn, self.space, self.name)
        self.space = without_repeats(self.space, self.name)
        try:
            self.params = frozenset(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            self.params = frozenset()
        #: every name some config sets
        self.space_names = frozenset(name for config in self.space for name in config)
        self.options = options.for_function(fn, self.space_names)
        self.key_fn, self.prune_fn = key_fn, prune_fn
        self.descriptions = [describe(c) for c in self.space]
        #: positional arguments a call may pass before the first tuned parameter: a call with more passes a tuned
        #: parameter by position, and goes to the slow path, which names it
        self.positional_limit = positional_limit(fn, self.space_names)
        self.space_text = "\n".join(self.descriptions)
        #: what the group compares before serving an undecided key by index (:mod:`.policy`)
        self.space_print = fingerprint(self.space_text)
        self.cache = DiskCache(self.name)
        self.source = source_of(fn)
        self._dependencies: str | None = None
        #: what a call does with a key not decided yet (``undecided=``)
        self.undecided = Undecided(self.name, options.undecided, options.distance)
        #: decisions of calls on the default group, key -> config (the hot path reads this)
        self.decided: dict[Hashable, dict[str, Any]] = {}
        #: decisions of calls with an explicit group, (group identity: kind, name, global ranks; key) -> config
        self.decided_in: dict[tuple[tuple, Hashable], dict[str, Any]] = {}
        #: keys of :attr:`decided` this rank tuned alone in a multi-rank job before torch.distributed was
        #: initialized (each rank chose for itself): once it is, the hot path drops them, and the group tunes them
        self.alone: set[Hashable] = set()
        #: the last decision per (group name, key), with every config's outcome, for inspection
        self.decisions: dict[tuple[str, Hashable], Decision] = {}
        #: the function talks to no other rank (``sharded=True``, or a ``local=True`` campaign said so): a config
        #: served for an undecided key is this rank's own choice, not agreed with the group
        self.rank_local = False
        #: the configs' errors group rank 0 has said on the console (:mod:`~triton_dist_tune.disk.failures`)
        self.failures_said: dict[str, None] = {}

    def forget_alone(self) -> None:
        """Drop the keys this rank tuned alone (:attr:`alone`) once torch.distributed is initialized: the default
        group then tunes them, so that every rank runs the same config."""
        dist = sys.modules.get("torch.distributed")
        if self.alone and dist is not None and dist.is_available() and dist.is_initialized():
            for key in list(self.alone):
                self.decided.pop(key, None)
            self.alone.clear()

    def search_mode(self) -> str:
        """``auto``, ``search`` or ``exhaustive``: the job's ``TRITON_DIST_AUTOTUNE_SEARCH``, else ``search=``."""
        return settings.current().search or self.options.search

    @property
    def tables(self) -> dict[tuple[str, Hashable], list[dict[str, Any]]]:
        """The last decision's outcomes per (group name, key), as JSON-style rows (a view of ``decisions``)."""
        return {slot: [o.to_json() for o in d.outcomes] for slot, d in self.decisions.items()}

    @property
    def dependencies(self) -> str:
        """The code a decision depends on besides the function's own source: the Triton kernels it names and the
        sources of ``key_fn`` and ``prune_fn`` (:func:`~triton_dist_tune.disk.cache.dependency_text`)."""
        if self._dependencies is None:
            self._dependencies = dependency_text(self.fn, self.key_fn, self.prune_fn)
        return self._dependencies

    @property
    def source_print(self) -> str:
        """The fingerprint of the function's code (its source and :attr:`dependencies`), recorded in each decision
        as ``source``: a decision of the same key with another one is superseded (``triton-dist-tune list``)."""
        return fingerprint(f"{self.source}\n{self.dependencies}")

    @property
    def origin(self) -> str:
        """Where the function is defined (its source file and qualified name), recorded in each decision: only a
        decision of the same origin supersedes another, so that two programs whose tuned functions share a name
        and a cache folder never mark each other's decisions superseded."""
        try:
            where = inspect.getsourcefile(self.fn) or "?"
        except TypeError:  # a builtin or a callable object without a source file
            where = "?"
        return f"{where}:{getattr(self.fn, '__qualname__', type(self.fn).__qualname__)}"

    def user_extra(self) -> str:
        """This call's ``cache_key_extra`` as text (its function called where it is one, and what it returns made
        text as the entry's name always made it; '' where none is given)."""
        extra = self.options.cache_key_extra
        return str(extra()) if callable(extra) else (extra or "")

    def entry_extra(self, args: tuple, kwargs: dict[str, Any], extra: str | None = None) -> str:
        """What the cache entry depends on besides the function's source, key, space and group size: the code it
        uses, the devices of its tensors, ``cache_key_extra`` (``extra``: its text already read, else read here)
        and the timing mode (a decision timed cold is no answer for steady timing), last, after
        :data:`TIMING_LINE` (the journals are named without it)."""
        extra = self.user_extra() if extra is None else extra
        return (f"{self.dependencies}\ndevices: {_tensor_devices(args, kwargs)}\nextra: {extra}"
                f"{TIMING_LINE}{timing_mode(self.options.timing)}")
