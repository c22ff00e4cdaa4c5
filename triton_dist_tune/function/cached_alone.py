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

from typing import Any

from .. import settings
from ..errors import BadInputError, describe_error
from ..space import describe_key, keeps
from .tuning import Tuning, cache_hit


def cached_alone(tuning: Tuning) -> tuple[dict[str, Any] | None, str | None]:
    """(the config this rank's disk cache holds for ``tuning``'s key on its group, else None; why this rank cannot
    serve the key, else None): read on this rank alone, no collective. The entry is named as the tuning names it
    (:meth:`~.tuning.Tuning._name_entry`), with the configs this rank's ``prune_fn`` keeps: a kept set other ranks
    would not keep names another entry, which is a miss (the policy serves). A ``cache_key_extra`` that raises is
    the problem returned (the serving raises it, as a tuning would); a ``prune_fn`` that raises, or keeps nothing,
    is a miss (the serving's own pruning says it)."""
    tuning.env = settings.current()
    try:
        tuning.key_text = describe_key(tuning.key, "the key key_fn returned")
        tuning.extra = tuning.tuner.entry_extra(tuning.args, tuning.kwargs)
    except BadInputError as exc:
        return None, str(exc)
    except Exception as exc:  # as the tuning's agreement says it
        return None, f"cache_key_extra: {describe_error(exc)}"
    tuning.label = f"[{tuning.tuner.name} key={tuning.key_text}]"
    try:
        kept = [i for i, config in enumerate(tuning.tuner.space)
                if keeps(tuning.tuner.prune_fn, config, tuning.args, tuning.kwargs)]
    except Exception:
        return None, None
    if not kept:
        return None, None
    tuning._name_entry(kept)  # steps 1 to 3 of a tuning (:mod:`.tuning`) on this rank alone: no agreement, this
    # rank's pruning, and its read of the cache folder; the ranks of a node share its folder: one of them marks the
    # decision served (and warns of its file)
    found = tuning._read_cache(quiet=settings.launcher().local_rank not in (None, 0))
    return (None, None) if found is None else (cache_hit(tuning, found[0], found[1]), None)
