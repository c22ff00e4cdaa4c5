"""The notes a progress watch's units leave in the job's key-value store for the others (why a unit left the work,
where it is stuck in user code): all notes of one kind under one key, read in one request (:class:`NoteLog`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..group.store_peek import peek, unsupported

#: an entry's text where its unit withdrew its note (a unit stuck in user code that came back)
WITHDRAWN = "-"


@dataclass(frozen=True)
class NoteLog:
    """Notes of one kind of a watch's units under one key of ``store``, ``key``, to which a unit appends a line
    ``<unit> <its note as a JSON string>`` to note something, ``<unit> -`` to withdraw it (its last line counts).
    Whatever the number of units, a waiting rank reads every note in one request that never waits
    (:func:`~triton_dist_tune.group.store_peek.peek`); before, each unit's note was a key of its own, read one by one:
    a request per unit of the wait, at a look of a wait where some unit had left, at the end of a round for every
    other unit, and for every lost unit when a wait gave up.

    A store without ``append`` (a Python ``Store`` of the user's) keeps each unit's note under ``per_unit(unit)`` as
    before, and ``key`` empty (set once a unit noted something): those notes are read one by one."""

    store: Any
    key: str
    per_unit: Callable[[int], str]

    def write(self, unit: int, note: str | None) -> None:
        """Unit ``unit`` notes ``note`` (None: withdraws its note). A store that is gone raises."""
        try:
            self.store.append(self.key, f"{unit} {WITHDRAWN if note is None else json.dumps(note)}\n")
            return
        except (NotImplementedError, AttributeError, RuntimeError) as exc:
            if not unsupported(exc):
                raise
        if note is None:
            self.store.delete_key(self.per_unit(unit))
            return
        self.store.set(self.per_unit(unit), note.encode())
        self.store.set(self.key, b"")  # (after the note: a rank that reads the key set finds it)

    def noted(self) -> bool:
        """Whether some unit has ever noted something here (one ``check``: nothing more is read while none has)."""
        return bool(self.store.check([self.key]))

    def read(self, units: list[int]) -> dict[int, str]:
        """The notes of ``units`` now, by unit (a unit that noted nothing, or withdrew its note, is left out): one
        request; on a store without ``append``, one more per unit of ``units``."""
        value = peek(self.store, self.key)
        if value is None:
            return {}
        if not value:  # (a store without append: a key per unit)
            found = {u: peek(self.store, self.per_unit(u)) for u in units}
            return {u: v.decode(errors="replace") for u, v in found.items() if v is not None}
        notes: dict[int, str] = {}
        for line in value.decode(errors="replace").splitlines():
            unit, _, text = line.partition(" ")
            if not unit.isdigit() or len(unit) > 9:  # (a line another process wrote: the store has no authentication)
                continue
            note = None if text == WITHDRAWN else _note(text)
            if note is None:
                notes.pop(int(unit), None)
            else:
                notes[int(unit)] = note
        return {u: notes[u] for u in units if u in notes}


    def keys(self, units: list[int]) -> list[str]:
        """The keys that hold notes of ``units`` now, for the last unit out to delete them (one request, a read of
        the log: none where no unit noted anything; on a store without ``append``, each unit's key too)."""
        value = peek(self.store, self.key)
        if value is None:
            return []
        return [self.key] if value else [self.key, *map(self.per_unit, units)]


def _note(text: str) -> str | None:
    """A note's text from its entry's JSON string (None for anything else: a JSON string cannot nest, so no entry
    another process wrote makes the reading recurse)."""
    if not text.startswith('"'):
        return None
    try:
        note = json.loads(text)
    except ValueError:
        return None
    return note if isinstance(note, str) else None
