"""The disk cache read by one rank alone, for a rank-local function (``sharded=True``, or one given to a
``local=True`` campaign) whose key an ``undecided`` policy would serve: its first served call of a key looks up the
entry its own tuning would read and write, with no exchange (the function talks to no other rank; reading the disk
is local), and a decision found there is served, not the policy's config. It is not a decision of the group (the
tuner keeps it apart from its decided keys): another rank's folder may lack the entry, and under ``undecided="tune"``
the whole group tunes the key together (a rank that held it as decided ran it while the others tuned it alone).

A collective function's group reads the cache through the tuning's steps 1 to 3 instead (:mod:`.tuning`,
``cached_only``): agreed, read by group rank 0 and broadcast.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from .. import settings
from ..errors import BadInputError, describe_error
from ..group.channel import Group
from ..measure.replicas import Layout
from ..space import describe_key, keeps
from .tuned import TunedFunction
from .tuning import Tuning, cache_hit


def cached_alone(tuner: TunedFunction, group: Group, key: Hashable, args: tuple, kwargs: dict[str, Any],
                 verbose: bool | None, layout: Layout | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(the config this rank's disk cache holds for ``key`` on ``group``, else None; why this rank cannot serve
    the key, else None): read on this rank alone, no collective. ``kwargs``: the call's keywords as its tuning
    sees them. The entry is named as the tuning names it (:meth:`~.tuning.Tuning._name_entry`), with the configs
    this rank's ``prune_fn`` keeps: a kept set other ranks would not keep names another entry, which is a miss (the
    policy serves). A ``cache_key_extra`` that raises is the problem returned (the serving raises it, as a
    tuning would); a ``prune_fn`` that raises, or keeps nothing, is a miss (the serving's own pruning says it)."""
    return _Alone(tuner, group, key, args, kwargs, verbose, False, layout).cached()


class _Alone(Tuning):
    """Steps 1 to 3 of a tuning (:mod:`.tuning`) on this rank alone: no agreement, this rank's pruning, and this
    rank's read of its cache folder."""

    def cached(self) -> tuple[dict[str, Any] | None, str | None]:
        self.env = settings.current()
        try:
            self.key_text = describe_key(self.key, "the key key_fn returned")
            self.extra = self.tuner.entry_extra(self.args, self.kwargs)
        except BadInputError as exc:
            return None, str(exc)
        except Exception as exc:  # as the tuning's agreement says it
            return None, f"cache_key_extra: {describe_error(exc)}"
        self.label = f"[{self.tuner.name} key={self.key_text}]"
        try:
            kept = [i for i, config in enumerate(self.tuner.space)
                    if keeps(self.tuner.prune_fn, config, self.args, self.kwargs)]
        except Exception:
            return None, None
        if not kept:
            return None, None
        self._name_entry(kept)
        # the ranks of a node share its folder: one of them marks the decision served (and warns of its file)
        found = self._read_cache(quiet=settings.launcher().local_rank not in (None, 0))
        return (None, None) if found is None else (cache_hit(self, found[0], found[1]), None)
