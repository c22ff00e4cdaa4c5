"""A wrong-group note as the job's store holds it (:mod:`.unresolved`): its fields, read back from its lines, the
answers recorded for it (:func:`read_answers`), and where a rank waits when it reads notes.

Everything here is read from the store, written by any process (the store has no authentication): plain JSON,
checked field by field, never executed; a field not understood reads as not said.

Whether a note's process has gone: its note marked ended at its exit, or, on this host and pid namespace, no such
process in ``/proc`` (:meth:`Note.gone`); elsewhere (:func:`on_this_host` false), by its beat, which a waiting rank
reads (:mod:`~triton_dist_tune.group.beat`; a note says it beats in ``beat_s``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..records import finite_number
from .store_peek import peek

log = logging.getLogger("triton_dist_tune")

#: a group as a note names it: its name and its global ranks (those of :class:`Waiter`)
GroupId = tuple[str, tuple[int, ...]]
#: the most characters of a late rank's note that a waiting rank's error quotes
NOTE_CHARS = 600


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
    #: the process that posted it, as :func:`this_process` names it (None: not said), so that a rank on the same
    #: host can tell it has gone without marking its note (killed, or dead without running its exit hooks)
    process: tuple[str, int, int] | None = None
    #: seconds between the beats of that process while its note stands (None: not said, no beat), so that a rank
    #: on another host can tell it has gone (:mod:`~triton_dist_tune.group.beat`)
    beat_s: float | None = None
    #: never read from the store: set by a waiting rank that read the process gone by its beat, the seconds that
    #: beat had not moved (:meth:`~triton_dist_tune.group.beat.Silence.lost`)
    silent: float | None = None
    #: the class of the rank's error (its note's ``error``; not said: a wrong group's ``BadInputError``)
    kind: str = "BadInputError"

    def gone(self) -> bool:
        """Whether the rank's process has ended: its note says so (:attr:`ended`), or it ran on this host and is
        gone (:func:`process_gone`). (Elsewhere its beat tells: :class:`~triton_dist_tune.group.beat.Silence`.)"""
        return self.ended is not None or process_gone(self.process)

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

    def why_ended(self, rank: int) -> str:
        """For the error of a wait for global rank ``rank``, whose note this is and whose process has ended: why the
        wait stopped (the note's error quoted, up to :data:`NOTE_CHARS` characters)."""
        how = "its process exited normally (its exit hook marked its note in the job's store)"
        if self.ended is None and self.silent is not None:
            how = (f"its process (pid {self.process[1] if self.process else '?'}, on another host or pid namespace) "
                   f"showed no sign of life for {self.silent:.0f} s (the beat it keeps in the job's store while its "
                   "note stands stopped): it was killed, died without running its exit hooks, or is frozen")
        elif self.ended is None:
            how = (f"its process (pid {self.process[1] if self.process else '?'}, on this host) is gone: it was killed "
                   "or died without running its exit hooks")
        return (f"global rank {rank}, which has ended: {how}, so it comes to no exchange any more and this wait "
                f"cannot succeed. Before it ended, it raised {self.kind}{self.went_on()}: {self.text[:NOTE_CHARS]}")

    def why_withdrawn(self, rank: int, since: float) -> str:
        """For a timeout's message, of a wait for global rank ``rank`` that began at ``since`` (unix seconds) after
        this note's withdrawal: the likely cause, which no rule can tell (see :mod:`.unresolved`)."""
        return (f" Before this wait began, global rank {rank} raised {self.kind} in a call of this function"
                f"{self.went_on()} (its note withdrawn {max(0.0, since - (self.withdrawn or 0.0)):.1f} s before this "
                "wait began), never on this one: if this wait was for that call, the rank never comes (this rank "
                "cannot tell that call from a later one the rank may still make here, so it waited its deadline): "
                f"{self.text[:NOTE_CHARS]}")


def parse_about(line: str) -> tuple[tuple[str, ...], float | None, tuple[GroupId, ...] | None]:
    """A note's second line: a JSON object with the names (``about``), when it was posted (``posted``) and, for a
    note that passes an error on, its call's groups (``groups``), or a JSON list of names; anything else, written
    by another process: any call, at an unknown time, in groups not said."""
    value = _read(line)
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
    value = _fields(line)
    when, ended = _time_of(value.get("withdrawn")), _time_of(value.get("ended"))
    return when, (_groups_of(value.get("to")) or ()) if when is not None else (), ended


def parse_process(line: str) -> tuple[str, int, int] | None:
    """A note's second line's ``process`` (:func:`this_process`), or None (not said, or not understood)."""
    found = _fields(line).get("process")
    if not (isinstance(found, list) and len(found) == 3 and isinstance(found[0], str)
            and type(found[1]) is int and type(found[2]) is int):
        return None
    return found[0], found[1], found[2]


def parse_kind(line: str) -> str:
    """A note's second line's ``error``, the class of the rank's error (a short identifier), else a wrong group's
    ``BadInputError``."""
    kind = _fields(line).get("error")
    return kind if isinstance(kind, str) and kind.isidentifier() and len(kind) <= 40 else "BadInputError"


def parse_beat(line: str) -> float | None:
    """A note's second line's ``beat_s`` (a positive finite number of seconds), or None (not said, not understood)."""
    beat = _time_of(_fields(line).get("beat_s"))
    return beat if beat is not None and beat > 0 else None


def this_process() -> list[Any] | None:
    """This process as a note names it: ``[host, pid, start]``, where ``host`` is the machine's boot id and its pid
    namespace (pids of two processes with the same ``host`` name processes alike), and ``start`` the process's start
    time in clock ticks since boot (a pid used again names another start); None where ``/proc`` does not say."""
    try:
        host = f"{Path('/proc/sys/kernel/random/boot_id').read_text().strip()}:{os.stat('/proc/self/ns/pid').st_ino}"
        start = _started(os.getpid())
    except (OSError, ValueError, IndexError):
        return None
    return None if start is None else [host, os.getpid(), start]


def on_this_host(process: tuple[str, int, int] | None) -> bool:
    """Whether ``process`` (a note's :attr:`Note.process`) ran on this host and pid namespace, where
    :func:`process_gone` tells whether it has ended (False: not said, or ``/proc`` does not say)."""
    me = this_process()
    return process is not None and me is not None and process[0] == me[0]


def process_gone(process: tuple[str, int, int] | None) -> bool:
    """Whether ``process`` (a note's :attr:`Note.process`) ran on this host (as :func:`this_process` names it) and
    has ended: no process has its pid now, or one that started at another time, or it is a zombie. False wherever
    that cannot be told (another host, another pid namespace, ``/proc`` unreadable)."""
    me = this_process()
    if process is None or me is None or process[0] != me[0]:
        return False
    try:
        return _started(process[1]) != process[2]
    except FileNotFoundError:
        return True
    except (OSError, ValueError, IndexError):
        return False


def started_at() -> float:
    """When this process started, in unix seconds (its start in clock ticks since boot, set against the boot clock
    now: within a few hundredths of a second); where ``/proc`` does not say, when this module was imported (later
    than the start)."""
    global _STARTED_AT
    if _STARTED_AT is None:
        try:
            ticks = _started(os.getpid())
            uptime = float(Path("/proc/uptime").read_text().split()[0])
            _STARTED_AT = time.time() - uptime + (ticks or 0) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            _STARTED_AT = _IMPORTED_AT
    return _STARTED_AT


_IMPORTED_AT = time.time()
_STARTED_AT: float | None = None


def _started(pid: int) -> int | None:
    """Process ``pid``'s start time (clock ticks since boot; ``/proc/PID/stat``'s 22nd field), None for a zombie
    (ended, not yet reaped)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _read(line: str) -> Any:
    """A note's second line as JSON, or None where it is not JSON (nested deeper than the JSON reader goes too:
    written by another process, no note's line)."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _fields(line: str) -> dict[str, Any]:
    """A note's second line's JSON object; ``{}`` for anything else (each field then reads as not said)."""
    value = _read(line)
    return value if isinstance(value, dict) else {}


def _time_of(value: Any) -> float | None:
    """A time a note's second line says (unix seconds), or None (anything but a finite number)."""
    return float(value) if finite_number(value) else None


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


def read_answers(store: Any, prefix: str, root: str) -> list[tuple[int, str, list[int]]]:
    """The answers recorded for ``root`` under the notes' ``prefix``
    (:meth:`~triton_dist_tune.group.unresolved.Notes.pass_on`): (global rank, group name, its global ranks)."""
    found = []
    try:
        count = int(store.add(f"{prefix}answered/{root}/count", 0))
        for k in range(1, count + 1):
            key = f"{prefix}answered/{root}/{k}"
            raw = peek(store, key)
            if raw is not None:
                value = json.loads(raw.decode(errors="replace"))
                if (isinstance(value, list) and len(value) == 3 and type(value[0]) is int
                        and isinstance(value[1], str) and isinstance(value[2], list)):
                    found.append((value[0], value[1], value[2]))
    except Exception as exc:  # a damaged or foreign value: the note is read as unanswered
        log.debug("triton_dist_tune: could not read the answers to a group error: %s", exc)
    return found
