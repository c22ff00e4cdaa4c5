"""While a rank waits at a torch group's first exchange, whether a rank it waits for waits at the first exchange of
another group of the same global ranks: the ranks created their groups in different orders, so torch named the
group otherwise there (torch names a group by how many ``new_group`` calls came before it on each rank), and the
two waits can never meet (:class:`Names`). Before, each rank waited the whole ``T`` (300 s by default) and its
error could only guess at this cause.

Why such a pair of waits cannot be right: a rank's waits only ever stand at one place while its tunings run from one
thread, so a rank that waits at group ``'1'`` (its name here) cannot come to group ``'2'`` before that wait ends,
and a peer that waits at ``'2'``, a group of the same ranks whose first exchange needs this rank too, cannot come to
``'1'`` before its own ends: neither wait ends but by its deadline. So a rank writes, and reads, only while no
other thread of its process could run the user's code (:func:`alone`: every other live Python thread is one the
tuner started); a process that tunes from several threads, or runs any thread of its own beside the waiting one,
writes and reads nothing, and its waits end as before (a thread of it could yet come to the other group).

What a look writes and reads (under the attempt's prefix ``P`` of :mod:`.exits`; a group's global ranks ``R``,
fingerprinted as in the group's namespace):

- nothing during a wait's first :data:`WRITE_S` seconds, nor at any exchange but a channel's first (where ranks
  that name a group otherwise meet; at a later one they have met), nor where this process registered in no job;
- at the first look from :data:`WRITE_S` seconds on: a ticket taken from ``P groups/<R>/clock`` (one ``add``) and
  ``P groups/<R>/<global rank>`` set to the name this rank knows the group by, with the keys its wait waits for
  (the exchange's result; group rank 0: its peers' messages; none past :data:`KEYS_CHARS`) (one request; two in
  all, once per wait); deleted as the wait ends (one request);
- at each look from the next one on (once a second): one of the missing ranks' keys, in turn (one request that never
  waits, :func:`~.store_peek.peek`), with group rank 0 among them for a rank other than 0 (it writes no message
  to be seen missing). A key that names another group means that rank waits there: :class:`Names` says so, and the
  wait raises :class:`~triton_dist_tune.errors.BadInputError` (a call's group that cannot be used as given)
  :data:`LINGER_S` seconds later, after confirming that the rank's message is still missing and that the keys
  its key lists have not all arrived (one request). Where they have, that rank's wait there is over: it met its
  peers there (this rank's own part of that exchange among them), and was stopped or slow between its wait's end
  and the delete of its key, while this rank's call there ended at that exchange on every rank (an agreement's
  error) and this rank came here: waited for, that key's text not counted again. A rank merely late has no key (it
  is not waiting): waited for. A key naming this same group: waited for.
- a wait that raises so leaves its key for the peers that have not read it yet (:meth:`Names.leave`), marked with a
  ticket taken as it left: a reader counts such a key only where it left after the reader took its own ticket (so
  while the reader waited: both waits stood at once, and neither could end). A key left before the reader's wait
  (the leaver's process has gone on, and may be late to the reader's group, not waiting elsewhere) is waited for;
  so is one left less than about 2 s into the reader's wait (before its ticket), which the leaver's
  :data:`LINGER_S` makes a wait that began after the leaver found the other group.

What is read is plain text (a name of at most :data:`NAME_CHARS` characters, and keys whose presence one ``check``
asks), never run. A job started without ``init_distributed`` (a plain torchrun's ``init_process_group``, or the
user's own) or whose store torchrun's agent hosts registers no job in :mod:`.exits`, and an mpi4py communicator has
no store: nothing is written or read there, and the peers wait ``T`` as before (the timeout's error names this cause
among others; under MPI, where duplicates made in another order are other communicators, another ``autotune_pg``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import exits
from .departed import LOOK_S, START_S
from .store_peek import peek

log = logging.getLogger("triton_dist_tune")

#: the seconds of a wait before its rank writes the name it waits under (the first look at its late ranks' ends)
WRITE_S = START_S
#: the seconds a wait goes on after it found a rank waiting elsewhere, before it raises and leaves its key: a rank
#: whose wait had begun when it found it takes its ticket meanwhile (from :data:`WRITE_S` into its wait, at the look
#: of a slice), before the leaver's (:meth:`Names.leave`)
LINGER_S = WRITE_S + LOOK_S
#: the longest name read: torch's names are numbers, or a hash of the ranks (``use_local_synchronization``)
NAME_CHARS = 80
#: the most characters of keys a rank's key lists (the keys its wait waits for: one for a rank other than group
#: rank 0, the result; one a peer for rank 0); a wait of more lists none, and a reader cannot tell it ended. Only
#: group rank 0's list grows with the group (about 5,500 characters for 64 ranks whose group torch names by a hash
#: of its ranks, the longest names; past about 90 such ranks, or 165 of a numbered group, it lists none), and no
#: reader needs it: rank 0 deletes its key before it writes the result that lets a peer go on elsewhere
KEYS_CHARS = 8192
#: the names of the threads the tuner starts (its watchdog, beats, clients, compile pools): none runs the user's code
TUNER_THREADS = ("tdt-", "triton_dist_tune-")


def alone() -> bool:
    """Whether every live Python thread of this process but this one is the tuner's own (:data:`TUNER_THREADS`):
    no other thread can come to a group's exchange while this one waits."""
    me = threading.current_thread()
    return all(t is me or t.name.startswith(TUNER_THREADS) for t in threading.enumerate())


def fingerprint(global_ranks: Sequence[int]) -> str:
    """The fingerprint of a group's global ranks (as in :func:`.store.namespace`)."""
    return hashlib.sha256(",".join(map(str, global_ranks)).encode()).hexdigest()[:8]


class Names:
    """The looks of one wait (of group rank ``me`` of a torch group ``name`` of ``global_ranks``) at the missing
    ranks' names of the group; ``first``: the wait is at the channel's first exchange (else nothing is done).
    ``keys``: the keys the wait waits for (in the store of the group's exchanges), which this rank's key lists;
    ``arrived``: whether every one of some such keys is in that store (one request; False where it cannot say)."""

    def __init__(self, name: str, global_ranks: Sequence[int], me: int, first: bool, keys: Sequence[str] = (),
                 arrived: Callable[[list[str]], bool] | None = None) -> None:
        self.name, self.global_ranks, self.me = name, list(global_ranks), me
        self.job = exits.current() if first else None
        listed = "\n".join(keys)
        self._listed = listed if len(listed) <= KEYS_CHARS and all("\n" not in k for k in keys) else ""
        self._arrived = arrived
        #: when (seconds waited) the next look is due; whether this wait's key is written; the next missing rank read
        self._due, self._written, self._turn = WRITE_S, False, 0
        #: the ticket taken as this rank wrote its key (a key another rank left counts only with a later ticket)
        self._ticket = 0
        #: a rank found waiting elsewhere (group rank -> its name), said once the wait reaches ``_raise_at`` seconds
        #: unless the keys its key lists (``_found_keys``) have all arrived; its key's text
        self._found: dict[int, str] = {}
        self._raise_at, self._found_text = 0.0, ""
        self._found_keys: list[str] = []
        #: group rank -> the text of its key, where the keys it lists had all arrived (its wait there is over)
        self._over: dict[int, str] = {}
        if self.job is not None:
            _forget_left(self.job)

    def key(self, global_rank: int) -> str:
        """The key under which global rank ``global_rank`` says which group of these ranks it waits at."""
        assert self.job is not None
        return f"{self.job.prefix}groups/{fingerprint(self.global_ranks)}/{global_rank}"

    def clock(self) -> str:
        """The counter from which the waits at these ranks' groups take their tickets."""
        assert self.job is not None
        return f"{self.job.prefix}groups/{fingerprint(self.global_ranks)}/clock"

    def look(self, late: Sequence[int], waited: float) -> dict[int, str]:
        """Group rank -> the name it knows this group's ranks' group by, for a rank of ``late`` (the look-up's list
        of the ranks missing; with group rank 0 where this rank is not it) found waiting at another group of the same
        global ranks; empty where none is found, where the look is not due (``waited``: the seconds waited), where
        nothing is looked at (see the module docstring), or where the store fails (the wait's own requests then say
        so). At most one store request per look."""
        job = self.job
        if job is not None and self._found:  # (found: said after LINGER_S, the wait going on meanwhile, where no
            if waited < self._raise_at:  # other thread started meanwhile)
                return {}
            found, self._found = self._found, {}
            return found if alone() and not self._ended(found) else {}
        if job is None or waited < self._due:
            return {}
        self._due = waited + 0.9 * LOOK_S  # (the slices come a little over LOOK_S apart)
        try:
            if not alone():  # (a thread of this process could yet come to the other group)
                self._withdraw()
                return {}
            if not self._written:
                self._ticket = int(job.store.add(self.clock(), 1))
                job.store.set(self.key(self.global_ranks[self.me]), f"{self.name}\n\n{self._listed}")
                self._written = True
                return {}
            ranks = [r for r in late if 0 <= r < len(self.global_ranks) and r != self.me]
            if self.me != 0 and 0 not in ranks:
                ranks.insert(0, 0)
            if not ranks:
                return {}
            rank = ranks[self._turn % len(ranks)]
            self._turn += 1
            value = peek(job.store, self.key(self.global_ranks[rank]))
        except Exception as exc:  # the store is gone or failing: the wait's next request says so
            log.debug("triton_dist_tune: could not look at the names of the missing ranks' groups: %s", exc)
            return {}
        text = None if value is None else value.decode(errors="replace")
        said = None if text is None or self._over.get(rank) == text else _said(text, self._ticket)
        if said is not None and said.name != self.name:
            self._found, self._raise_at = {rank: said.name}, waited + LINGER_S
            self._found_keys, self._found_text = said.keys, text
        return {}

    def _ended(self, found: dict[int, str]) -> bool:
        """Whether the wait of the rank ``found`` waiting elsewhere is over after all: every key its key lists is in
        the store (one request), so it met its peers there and is merely late to delete its key (a process stopped,
        or slow, between its wait's end and the delete). Such a rank is waited for, and its key's text not counted
        again."""
        if not self._found_keys or self._arrived is None or not self._arrived(self._found_keys):
            return False
        for rank in found:
            self._over[rank] = self._found_text
        log.debug("triton_dist_tune: the ranks %s named another group of these ranks, but their wait there is over",
                  sorted(found))
        return True

    def close(self) -> None:
        """The wait is over: delete this rank's key, where it wrote one."""
        try:
            self._withdraw()
        except Exception as exc:  # the store is gone: nobody reads it
            log.debug("triton_dist_tune: could not delete this rank's name of its group: %s", exc)

    def leave(self) -> None:
        """The wait ends with this rank raising that its peers wait at another group: its key stays, marked with a
        ticket taken now, so that a peer that waited meanwhile and has not looked yet finds it and raises too, and
        a peer whose wait begins later does not (deleted at this process's next first exchange, where it waits
        somewhere else: :func:`_forget_left`)."""
        if self._written and self.job is not None:
            self._written = False
            key = self.key(self.global_ranks[self.me])
            with _LEFT_LOCK:
                _left.append(key)
            try:
                self.job.store.set(key, f"{self.name}\n{int(self.job.store.add(self.clock(), 1))}")
            except Exception as exc:  # the store is gone: nobody reads it
                log.debug("triton_dist_tune: could not mark this rank's name of its group left: %s", exc)

    def _withdraw(self) -> None:
        if self._written and self.job is not None:
            self._written = False
            self.job.store.delete_key(self.key(self.global_ranks[self.me]))


@dataclass(frozen=True)
class Said:
    """What a rank's key says: the name it waits under, and the keys its wait waits for (none where it left)."""

    name: str
    keys: list[str]


def _said(text: str, ticket: int) -> Said | None:
    """What a rank's key says (``text``: its value: the name, a line with the ticket of a wait that left, else
    empty, then the keys the wait waits for, one a line), None where it is a key left by a wait that ended before
    the reader took its ``ticket`` (:meth:`Names.leave`) or is not the tuner's."""
    parts = text.split("\n")
    name, left, keys = parts[0], parts[1] if len(parts) > 1 else "", parts[2:]
    if left:
        try:
            if int(left) < ticket:
                return None
        except ValueError:
            return None
        keys = []
    if len(text) > NAME_CHARS + KEYS_CHARS + 32:  # (not what a rank writes: its keys are not checked)
        keys = []
    return Said(name[:NAME_CHARS], [k for k in keys if k])


#: the keys of waits that ended raising (:meth:`Names.leave`), kept for the peers still waiting
_left: list[str] = []
_LEFT_LOCK = threading.Lock()


def _forget_left(job: exits.Job) -> None:
    """Delete the keys this process left at waits that raised (a request each: only after such an error), at the
    first exchange of a channel: this rank waits elsewhere now, and says so itself from its wait's first look."""
    with _LEFT_LOCK:
        keys = list(_left)
        _left.clear()
    for key in keys:
        try:
            job.store.delete_key(key)
        except Exception as exc:  # the store is gone: nobody reads it
            log.debug("triton_dist_tune: could not delete %s: %s", key, exc)


def named_otherwise_message(opening: str, name: str, global_ranks: Sequence[int], found: dict[int, str]) -> str:
    """The error of a wait (``opening``: who waited, how long, where) at the first exchange of group ``name`` (of
    ``global_ranks``) whose missing ranks ``found`` (group rank -> its name of their group) wait at another group
    of the same global ranks."""
    there = "; ".join(f"global rank {global_ranks[r]} at {_called(n)}" for r, n in sorted(found.items()))
    opening = f"{opening}, the first exchange of {_called(name)} here, while the ranks it waits for wait at the " \
              f"first exchange of another group of the same global ranks {list(global_ranks)}: {there}."
    if DEFAULT in (name, *found.values()):  # one side tunes on the default group, the other on a group of all ranks
        return (f"{opening} Some ranks tune on the default group and others on a group they made of all the ranks "
                "(or they tune on these groups in different orders), and the waits can never meet: pass the same "
                "group (autotune_pg=) on every rank")
    return (f"{opening} The ranks created their groups of these ranks in different orders, so torch named this group "
            "otherwise there (or they tune these groups in different orders), and the waits can never meet: create "
            "the groups in the same order on every rank, or with use_local_synchronization=True (torch then names a "
            "group by a hash of its ranks, alike on every rank)")


#: torch's name of the default group (``dist.group.WORLD``)
DEFAULT = "0"


def _called(name: str) -> str:
    """How the error names a group torch named ``name``."""
    if name == DEFAULT:
        return "the default group (torch's '0')"
    if name.isdigit():
        return f"the group torch named '{name}' (by the order of that rank's new_group calls)"
    return f"the group torch named '{name}'"
