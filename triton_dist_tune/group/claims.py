"""One rank number, one process, in each start of a job: two processes started with the same rank (a launch script
that forgot to set ``RANK`` per process, two copies of a launch by hand) are told apart at
:func:`~triton_dist_tune.group.dist.init_distributed`'s start, where global rank 0 hosts the job's store (no
torchrun agent, whose ranks torchrun numbers itself).

Before, with ``WORLD_SIZE=3`` and ``RANK=0,1,1`` every rank waited the init timeout and was told "ranks [2] never
joined", not that rank 1 was there twice; with ``WORLD_SIZE=2`` one of the two failed inside gloo or waited the init
timeout for "ranks [0]". Now (:class:`Claims`, run inside :func:`~triton_dist_tune.group.epoch.agree`):

- every claim belongs to ONE start: the naming of its attempt, whose name (global rank 0's draw, new in each start)
  is in each claim's key (``claim/<name>/<rank>``). A later start in the same processes (after
  ``destroy_process_group``, the ranks renumbered, swapped or fewer) begins with no claims, though rank 0 keeps its
  store (the first version of this, reverted, kept one claim per rank number for the store's life and refused
  those starts);
- a rank other than 0, given the name, claims its number with a compare-and-set of its process, as
  :func:`~triton_dist_tune.group.note.this_process` names it (the machine's boot id and pid namespace, the pid, the
  start in clock ticks: a process of another pid namespace with the same host name is another process), before it
  confirms the name. A claim whose process has ended (:func:`~triton_dist_tune.group.note.process_gone`: a rank
  that failed at its start, started again by hand on the same host) is taken over; a live one's (or one whose end
  cannot be told: another host, another pid namespace) makes this process the second claimant: it reports it to
  rank 0 (``dup/<name>``) and ends at once, naming the rank, both processes and the launcher's variable;
- rank 0 writes the name of the start it runs (``current``) before it answers anyone, and reads the reports at each
  look of its wait (:meth:`Claims.halt`): one ends the start, and rank 0 tells every rank that took part why,
  naming the ranks no process has claimed;
- a process that comes after the job's start ended (the second of two processes started as rank 1 of a job of two)
  gets no answer from rank 0, which names no attempt any more: before its hello it reads ``current``
  (:meth:`Claims.arrive`); where that start's claim of its rank is a live process's and this process took no part
  in that start, it waits for a new start to begin (rank 0 names another, or a process of that start says it starts
  again: ``again/<name>``), as when the job's processes start again after ``destroy_process_group`` with this one
  among the ranks, or a rank's new process replaces one that lingers. Where none begins within its init timeout, or
  the job's store goes away meanwhile (the job ended), it ends the same way. (A first version waited at most 3 s
  and refused a replacement that came more than 3 s before its job's new start.)

Each rank's share is a few requests at its start, none after.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from .. import settings
from ..errors import AutotuneError
from .epoch import Halt
from .note import process_gone, this_process

#: the names of the starts this process claimed a rank in (or, as rank 0, named): a later start of the same
#: processes is no newcomer's (:meth:`Claims.arrive`)
_member: set[str] = set()
#: this process's claim value, by pid (a fork of a process that imported this module makes its own)
_mine: dict[int, str] = {}


def mine() -> str:
    """This process's claim value: its process as :func:`~triton_dist_tune.group.note.this_process` names it (None
    where ``/proc`` does not say), its pid and host name (for the messages) and a draw no other process has."""
    pid = os.getpid()
    if pid not in _mine:
        _mine[pid] = json.dumps({"process": this_process(), "pid": pid, "host": socket.gethostname()[:80],
                                 "draw": os.urandom(8).hex()})
    return _mine[pid]


def _record(value: str) -> dict[str, Any]:
    try:
        record = json.loads(value)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _process(value: str) -> tuple[str, int, int] | None:
    found = _record(value).get("process")
    if (isinstance(found, list) and len(found) == 3 and isinstance(found[0], str) and type(found[1]) is int
            and type(found[2]) is int):
        return found[0], found[1], found[2]
    return None


def who(value: str, other: str | None = None) -> str:
    """A claim value in words: ``pid 123 on host``; where ``other``'s process ran on the same machine in another pid
    namespace, with its namespace (``pid 1 on host, pid namespace 4026532712``: the same pid names two processes)."""
    record, process = _record(value), _process(value)
    if not isinstance(record.get("pid"), int):
        return f"a process that wrote {value[:40]!r}"
    theirs = _process(other) if other is not None else None
    apart = (process is not None and theirs is not None and process[0] != theirs[0]
             and process[0].split(":")[0] == theirs[0].split(":")[0])
    return (f"pid {record['pid']} on {str(record.get('host'))[:80]}"
            + (f", pid namespace {process[0].partition(':')[2]}" if apart and process is not None else ""))


def gone(value: str) -> bool:
    """Whether the process of the claim ``value`` has ended, as this host can tell (False where it cannot)."""
    return value != mine() and process_gone(_process(value))


def _started_with(rank: int) -> str:
    """How the launcher gave this process its rank (``RANK=1``): the first of the rank variables set."""
    name = next((name for name in settings.RANK_VARIABLES if os.environ.get(name, "").strip()), "RANK")
    return f"{name}={rank}"


def twice_said(rank: int, first: str, second: str) -> str:
    """The words for global rank ``rank`` claimed by two processes, ``first`` and then ``second``."""
    return (f"global rank {rank} was claimed by two processes ({first}, then {second}): two processes of the job "
            f"were started with {_started_with(rank)}")


class Claims:
    """One start's claims of rank numbers in the job's ``store`` (rank 0 hosts it), under keys starting with ``base``
    (see the module docstring). ``rank`` and ``world``: this process's; ``where``: the store, as messages say it;
    ``join_s``: the init timeout, the longest a process that found its rank held by a live process of the job's
    last start waits for a new start."""

    def __init__(self, store: Any, base: str, rank: int, world: int, where: str, join_s: float) -> None:
        self.store, self.base, self.rank, self.world, self.where = store, base, rank, world, where
        self.join_s = join_s
        #: rank 0: the name of its start and the reports of it read so far
        self._name, self._seen = "", 0

    def _get(self, key: str) -> str | None:
        if not self.store.check([key]):
            return None
        return bytes(self.store.get(key)).decode(errors="replace")

    def opened(self, name: str) -> None:
        """Rank 0, before it answers any hello: ``name`` is the start it runs."""
        self._name = name
        _member.add(name)
        self.store.set(f"{self.base}current", name)

    def arrive(self) -> None:
        """A rank other than 0, before its hello: where the job's last start holds this rank for a live process
        and this process took no part in it, wait up to the init timeout for a new start (at once where that start
        is still on: the claim is of this one), else end as the second claimant (:meth:`_refuse`), as where the
        store goes away meanwhile. A process of that start says that it starts again (``again/<name>``)."""
        last = self._get(f"{self.base}current")
        if last is None:
            return
        if last in _member:
            self.store.add(f"{self.base}again/{last}", 1)
            return
        theirs = self._get(f"{self.base}claim/{last}/{self.rank}")
        if theirs is None or theirs == mine() or gone(theirs):
            return
        deadline = time.monotonic() + (self.join_s if self._get(f"{self.base}joined/{last}") is not None else 0)
        while True:
            try:
                if self._get(f"{self.base}current") != last or int(self.store.add(f"{self.base}again/{last}", 0)):
                    return
            except Exception:  # the store's host (rank 0) ended: the job this process came to join is over
                self._refuse(last, theirs)
            if time.monotonic() >= deadline:
                self._refuse(last, theirs)
            time.sleep(0.1)

    def claim(self, name: str) -> None:
        """A rank other than 0, given the start's ``name``: claim this rank in it before confirming the name; another
        live process's claim there: :meth:`_refuse`."""
        key, value = f"{self.base}claim/{name}/{self.rank}", mine()
        theirs = bytes(self.store.compare_set(key, "", value)).decode(errors="replace")
        if theirs != value and gone(theirs):  # (one that ended at its start: this one, started again, replaces it)
            theirs = bytes(self.store.compare_set(key, theirs, value)).decode(errors="replace")
        if theirs != value:
            self._refuse(name, theirs)
        _member.add(name)

    def _refuse(self, name: str, theirs: str) -> None:
        """Report to rank 0 that this rank of the start ``name`` is claimed twice, and raise, naming both."""
        try:
            entry = int(self.store.add(f"{self.base}dup/{name}", 1))
            self.store.set(f"{self.base}dup/{name}/{entry}",
                           twice_said(self.rank, who(theirs, mine()), who(mine(), theirs)))
        except Exception:  # (best effort: this process ends with the line below either way)
            pass
        said = twice_said(self.rank, who(theirs, mine()), f"this one, {who(mine(), theirs)}")
        raise AutotuneError(f"init_distributed: rank {self.rank}: at {self.where}, {said}: start each rank of "
                            f"0..{self.world - 1} once")

    def halt(self) -> Halt | None:
        """Rank 0, at each look of its wait: the first report of its start (:meth:`_refuse`) as the reason to end
        it, naming the ranks no process has claimed, with the number of ranks that will read its word (those
        claimed); None where there is none (one request)."""
        if int(self.store.add(f"{self.base}dup/{self._name}", 0)) <= self._seen:
            return None
        said = self._get(f"{self.base}dup/{self._name}/{self._seen + 1}")
        if said is None:  # (counted, not written yet: read at the next look)
            return None
        unclaimed = [r for r in range(1, self.world) if not self.store.check([f"{self.base}claim/{self._name}/{r}"])]
        if unclaimed:
            said += f", and no process has joined as {_listed(unclaimed)} so far"
        return Halt(f"{said[:2000]}: start each rank of 0..{self.world - 1} once", self.world - 1 - len(unclaimed))


def _listed(ranks: list[int]) -> str:
    """``rank 2`` / ``ranks [2, 3]``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"
