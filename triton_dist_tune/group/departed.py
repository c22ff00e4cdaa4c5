"""While a rank waits at an exchange of a torch group for ranks that have not arrived, whether one of them is known
gone: it counted out of the job (its process ends or has ended: :mod:`.exits`), or its process, on this host, has
ended without counting out (killed). Such a rank never comes, and the wait ends at once (:class:`Departures`)
instead of at its deadline ``T``; a rank merely slow (alive, not counted out) is waited for as before.

Why this is needed beside the failure board's beats (:mod:`.store_board`): a rank that dies before its group's first
exchange of a tuning (a crash in its model's set-up, a SIGKILL) or ends its program without making the call (a logic
error that skips the tuned call on one rank) has no beat yet, and its peers waited the whole ``T`` (300 s by
default) before their error named it.

What a look reads, and when:

- nothing during a wait's first :data:`START_S` seconds (a step where nobody waits, or where everyone comes within
  that, costs no request more); then once every :data:`LOOK_S` seconds (the slices between which the wait reads the
  late ranks' other signs: :mod:`.store`);
- the job's log of count-outs, ``exited/log``: one request that never waits, whatever the number of ranks missing
  (:func:`~.exits.count_outs`);
- for the ranks missing whose process record (written once, at ``init_distributed``) this process has not read yet:
  their records, in one ``check`` and one ``multi_get`` (a request each where one is missing), once per rank and
  process, and only where this process can read ``/proc`` itself; then ``/proc`` (no request) for those on this host
  (:func:`~.note.process_gone`). ``/proc`` is read before the log, so a rank that counted out and then ended is
  named as counted out;
- for a rank found gone, its key of the wait (:meth:`~.store_wait.Lookup.confirm`: a rank that wrote its message
  before it ended has come), a request each, only when one is found.

A rank other than the group's rank 0 also looks at rank 0, which it always waits for (the exchange's result, or the
attempt's name) and which writes no message to be seen missing. Nothing read is run: the log and the records are
parsed as plain text and numbers. A job whose store torchrun's agent hosts registers no count-out and no process
(:func:`~.exits.register` is not called): nothing is read, and the peers wait ``T`` as before (the agent ends the
other ranks when one fails). An mpi4py communicator has no store: unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from . import exits
from .note import on_this_host, parse_process, process_gone, this_process
from .store_peek import peek
from .store_wait import Lookup, SeenFrom

log = logging.getLogger("triton_dist_tune")

#: the seconds of a wait before its first look: an exchange whose ranks all come within them costs no request more
#: (most do within milliseconds; a straggler compiling a kernel may take longer, and is then looked at once a second)
START_S = 2.0
#: the seconds between two looks: the slices of a wait (:data:`.store.BOARD_SLICE_S`); a rank gone is named at most
#: this long after the look that could first see it
LOOK_S = 1.0


class Departures:
    """The looks of one wait (of group rank ``me`` of a group of ``global_ranks``) for its missing ranks' ends."""

    def __init__(self, lookup: Lookup, global_ranks: Sequence[int], me: int) -> None:
        self.lookup, self.global_ranks, self.me = lookup, list(global_ranks), me
        #: when (seconds waited) the next look is due
        self._due = START_S
        #: global ranks whose record this wait found missing (not read again in this wait)
        self._absent: set[int] = set()

    def look(self, late: Sequence[int], waited: float) -> dict[int, str]:
        """Group rank -> how it ended, for the ranks of ``late`` (a look-up's list of the ranks missing; with group
        rank 0 where this rank is not it) known gone and whose key of the wait is not set; empty where none is, where
        the look is not due (``waited``: the seconds waited so far), where this process registered in no job, or
        where the store fails (the wait's own requests then say so)."""
        job = exits.current()
        if job is None or waited < self._due:
            return {}
        self._due = waited + 0.9 * LOOK_S  # (the slices come a little over LOOK_S apart)
        ranks = [r for r in late if 0 <= r < len(self.global_ranks) and r != self.me]
        if self.me != 0 and 0 not in ranks:
            ranks.insert(0, 0)
        if not ranks:
            return {}
        try:
            killed = self._killed_here(job, ranks)  # (before the log: a rank that counted out, then ended, is out)
            out = exits.count_outs(job)
            found = {}
            for rank in ranks:
                if self.global_ranks[rank] in out:
                    how = out[self.global_ranks[rank]]
                    found[rank] = (f"came to this exchange and waited, then ended its process ({how})"
                                   if self._came(rank) else exits.without_coming(how))
                elif rank in killed:
                    found[rank] = killed[rank]
            return {rank: found[rank] for rank in self.lookup.confirm(list(found))} if found else {}
        except Exception as exc:  # the store is gone or failing: the wait's next request says so
            log.debug("triton_dist_tune: could not look whether the missing ranks have ended: %s", exc)
            return {}

    def _came(self, rank: int) -> bool:
        """Whether ``rank`` is group rank 0, which writes no message, and a look of this wait found it in the
        exchange's log of arrivals (it waited there too, and ended since: it gave up on the exchange itself)."""
        lookup = self.lookup
        return rank == 0 and isinstance(lookup, SeenFrom) and bool(lookup.peers.logged(0))

    def _killed_here(self, job: exits.Job, ranks: list[int]) -> dict[int, str]:
        """Group rank -> why, for the ranks of ``ranks`` whose process ran on this host and has ended."""
        if this_process() is None:  # (no /proc here: no rank's end can be read from it)
            return {}
        globals_ = [self.global_ranks[r] for r in ranks]
        unread = [g for g in globals_ if g not in job.records and g not in self._absent and g != job.rank]
        if unread:
            self._read_records(job, unread)
        found = {}
        for rank, g in zip(ranks, globals_, strict=True):
            process = job.records.get(g)
            if process is not None and process_gone(process):
                found[rank] = exits.killed_here(process[1])
        return found

    def _read_records(self, job: exits.Job, ranks: list[int]) -> None:
        """Read the process records of global ranks ``ranks`` into ``job.records`` (one ``check`` and one
        ``multi_get``; where one is missing, a request each, and those missing are not read again in this wait)."""
        keys = [f"{job.prefix}process/{g}" for g in ranks]
        if job.store.check(keys):
            values: list[bytes | None] = [bytes(v) for v in job.store.multi_get(keys)]
        else:  # (a rank that could not write its record, or was killed before it did)
            values = [peek(job.store, key) for key in keys]
        for g, value in zip(ranks, values, strict=True):
            if value is None:
                self._absent.add(g)
                continue
            process = parse_process(value.decode(errors="replace"))
            job.records[g] = process if process is not None and on_this_host(process) else None
