"""Which calls of tuned functions a thread is inside, and the groups each resolved: what a wrong-group note is about
(:mod:`~triton_dist_tune.group.unresolved`). ``autotune``'s, a campaign's and a ``contextual_autotune`` function's
calls mark themselves (:func:`calling`); group resolution adds each group it resolved (:func:`joined`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from .note import GroupId

#: per thread: the names of the tuned functions whose calls it is inside, outermost first (:func:`calling`), and for
#: each call the groups it resolved (:func:`joined`)
_inside = threading.local()
#: per function name: when this process's last call of it ended (unix seconds; :func:`calling`)
_ended: dict[str, float] = {}


def names() -> list[str]:
    """The tuned functions whose calls this thread is inside, outermost first (the list itself)."""
    calls = getattr(_inside, "calls", None)
    if calls is None:
        calls = _inside.calls = []
    return calls


def groups() -> list[list[GroupId]]:
    """For each call this thread is inside, outermost first, the groups it resolved (the list itself)."""
    groups = getattr(_inside, "groups", None)
    if groups is None:
        groups = _inside.groups = []
    return groups


@contextmanager
def calling(name: str) -> Iterator[None]:
    """Mark the calling thread as inside a call of the tuned function ``name`` (its group's resolution, its
    exchanges): a note the thread posts meanwhile is about that call, and its waits raise only notes about a
    function it is inside (:mod:`~triton_dist_tune.group.unresolved`). Nested marks add up."""
    inside, resolved = names(), groups()
    inside.append(name)
    resolved.append([])
    try:
        yield
    finally:
        inside.pop()
        resolved.pop()
        _ended[name] = time.time()


def joined(name: str, ranks: Sequence[int]) -> None:
    """The call this thread is inside (:func:`calling`) resolved the group ``name`` of global ``ranks``: a note it
    passes on names it among its call's groups (``Notes.pass_on``). Outside a call: nothing."""
    resolved = groups()
    if resolved:
        resolved[-1].append((name, tuple(ranks)))


def ended(name: str) -> float:
    """When this process's last call of the tuned function ``name`` ended (unix seconds; 0.0: none has)."""
    return _ended.get(name, 0.0)
