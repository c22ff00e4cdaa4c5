"""A wrong-group note as the job's store holds it (:mod:`.unresolved`): its fields, read back from its lines, and
where a rank waits when it reads notes.

Everything here is read from the store, written by any process (the store has no authentication): plain JSON,
checked field by field, never executed; a field not understood reads as not said.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

#: a group as a note names it: its name and its global ranks (those of :class:`Waiter`)
GroupId = tuple[str, tuple[int, ...]]


class Note(NamedTuple):
    """A late rank's note as read from the store."""

    #: the id of the error it passes on (its root)
    root: str
    #: the tuned functions whose call it was posted in (empty: any call)
    about: tuple[str, ...]
    #: the rank's error
    text: str
    #: when it was posted (unix seconds; None: not said)
    posted: float | None = None
    #: a note that passes an error on (:meth:`~triton_dist_tune.group.unresolved.Notes.pass_on`): the groups of
    #: the call it was posted in (None: not said, or an error of the rank's own, posted before its call's groups
    #: were all resolved)
    groups: tuple[GroupId, ...] | None = None
    #: when the rank's next call resolved its group well (unix seconds; None: not yet): only a wait that began
    #: before then may still be about the note's call (:meth:`~triton_dist_tune.group.unresolved.Notes.withdraw`)
    withdrawn: float | None = None
    #: the groups that next call (and the rank's later ones) resolved, where the rank is coming (:meth:`matters`)
    to: tuple[GroupId, ...] = ()
    #: when the rank's process ended normally (unix seconds; None: not said): it comes to no exchange any more
    #: (:meth:`~triton_dist_tune.group.unresolved.Notes.end`)
    ended: float | None = None

    def concerns(self, inside: Sequence[str]) -> bool:
        """Whether a wait inside calls of the functions ``inside`` is concerned (either side unmarked: yes)."""
        return not self.about or not inside or not set(self.about).isdisjoint(inside)

    def matters(self, where: Waiter | None) -> bool:
        """Whether the note may still stop a wait on the group ``where`` names: a note not withdrawn, yes; a
        withdrawn one only for a wait that began before its withdrawal, on a group the rank's next calls did not
        resolve (there it is coming)."""
        if self.withdrawn is None:
            return True
        return where is not None and where.since < self.withdrawn and (where.group, where.ranks) not in self.to

    def went_on(self) -> str:
        """For a message: where the rank called again after its error (its note withdrawn), or nothing."""
        if self.withdrawn is None:
            return ""
        return f" and called again on {', '.join(f'group {n!r} {list(r)}' for n, r in self.to) or 'another group'}"

    def why_ended(self, rank: int, chars: int) -> str:
        """For the error of a wait for global rank ``rank``, whose note this is and whose process has ended: why the
        wait stopped (the note's error quoted, up to ``chars`` characters)."""
        return (f"global rank {rank}, which has ended: its process exited normally (its exit hook marked its note in "
                "the job's store), so it comes to no exchange any more and this wait cannot succeed. Before it ended, "
                f"it raised BadInputError{self.went_on()}: {self.text[:chars]}")

    def why_withdrawn(self, rank: int, since: float, chars: int) -> str:
        """For a timeout's message, of a wait for global rank ``rank`` that began at ``since`` (unix seconds) after
        this note's withdrawal: the likely cause, which no rule can tell (see :mod:`.unresolved`)."""
        return (f" Before this wait began, global rank {rank} raised BadInputError in a call of this function"
                f"{self.went_on()} (its note withdrawn {max(0.0, since - (self.withdrawn or 0.0)):.1f} s before this "
                "wait began), never on this one: if this wait was for that call, the rank never comes (this rank "
                "cannot tell that call from a later one the rank may still make here, so it waited its deadline): "
                f"{self.text[:chars]}")


def parse_about(line: str) -> tuple[tuple[str, ...], float | None, tuple[GroupId, ...] | None]:
    """A note's second line: a JSON object with the names (``about``), when it was posted (``posted``) and, for a
    note that passes an error on, its call's groups (``groups``), or a JSON list of names; anything else, written
    by another process: any call, at an unknown time, in groups not said."""
    try:
        value = json.loads(line)
    except ValueError:
        return (), None, None
    names, posted, groups = ((value.get("about"), value.get("posted"), value.get("groups")) if isinstance(value, dict)
                             else (value, None, None))
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        return (), None, None
    return tuple(names), _time_of(posted), _groups_of(groups)


def parse_marks(line: str) -> tuple[float | None, tuple[GroupId, ...], float | None]:
    """A note's second line's marks: its withdrawal
    (:meth:`~triton_dist_tune.group.unresolved.Notes.withdraw`), when (``withdrawn``, unix seconds) and the groups
    the rank went on to (``to``), and when its process ended (``ended``,
    :meth:`~triton_dist_tune.group.unresolved.Notes.end`); anything else: not withdrawn, not ended."""
    try:
        value = json.loads(line)
    except ValueError:
        return None, (), None
    if not isinstance(value, dict):
        return None, (), None
    when, ended = _time_of(value.get("withdrawn")), _time_of(value.get("ended"))
    return when, (_groups_of(value.get("to")) or ()) if when is not None else (), ended


def _time_of(value: Any) -> float | None:
    """A time a note's second line says (unix seconds), or None (anything but a finite number)."""
    return float(value) if type(value) in (int, float) and math.isfinite(value) else None


def _groups_of(value: Any) -> tuple[GroupId, ...] | None:
    """A note's ``groups``: a list of ``[name, [global ranks]]`` pairs (anything else: not said)."""
    if not isinstance(value, list):
        return None
    found = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], list)
                and all(type(r) is int for r in pair[1])):
            return None
        found.append((pair[0], tuple(pair[1])))
    return tuple(found)


class Waiter(NamedTuple):
    """Where a rank waits for late ranks: its group's name and global ranks, and its own global rank."""

    group: str
    ranks: tuple[int, ...]
    me: int
    #: when the wait began (unix seconds; not said: after every withdrawal, :meth:`Note.matters`)
    since: float = math.inf
