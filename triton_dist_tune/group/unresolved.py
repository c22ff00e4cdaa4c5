"""A rank whose group option is wrong tells the whole job, so that its peers do not wait their deadline for it.

A rank that passes a wrong ``autotune_pg`` (or ``autotune_replicas``: a group it is not in, an object that is no
group) raises :class:`~triton_dist_tune.BadInputError` before it knows which group it was meant to talk through, so
it cannot tell that group. Its peers, who passed the right group, would wait at their first exchange for the whole
deadline and then raise a :class:`~triton_dist_tune.GroupTimeoutError` guessing why. Instead the rank writes a note
under its global rank in the job's key-value store (torch.distributed's default store, under the restart attempt: a
new attempt never reads an old one's notes; where the job shares no attempt name, several torchrun nodes whose job
started torch.distributed itself, every attempt's notes under one name, an earlier attempt's told apart by when it
was posted: :meth:`Notes.read`), and a rank waiting at an exchange for group ranks that are late looks
for their notes between its store waits (:meth:`Notes.look`, never on a healthy exchange's first wait): one request,
a counter, while nobody posted one. The waiting rank then raises a ``BadInputError`` naming the rank and quoting its
error, at once, and posts that error as its own note: the ranks waiting for it (in another group of a layout) learn
it in turn.

A note is about the call it was posted in: the tuned functions the rank was inside (``calls.calling``, by name:
``autotune``'s function, a campaign's, a ``contextual_autotune`` function), which every rank the wrong call would
have met is inside too, at the same exchange. A waiting rank raises only the notes about a function it is inside
itself: a rank of another group that waits for the wrong rank later, in a tuning of another function (the wrong
rank merely late, still handling its error), waits for it as for any late rank. A note or a wait outside any
marked call concerns every wait, as before.

The same function may be called again, on another group, while the note's rank is late (still handling its error):
a rank that had no part in the call the note was about then waits for that rank inside a call of the same name. A
rank that raises a note's error records its answer in the store (its global rank and the group it waited on), and
a waiting rank reads a note as stale when a rank of its own group (other than the note's and itself) answered it
in another group: that rank met it in an earlier call. A note answered in the waiting rank's own group is this
call's. A rank that has ended a call of the function since the note was posted (the note's second line says when)
reads a note nobody has answered as stale for :data:`STALE_GRACE_S`, the time the rank that waited for the note's
rank in the call it was about takes to answer it, then raises it (a wrong rank that was early for this call, and
whose peers were all still in an earlier call of the function when it posted, is raised that much later). A rank
that answered a note and is itself late to the next call leaves its own note in the store, which passes the error
on: that note names the groups of the call it was posted in (those the call resolved, ``calls.joined``, and the one
it waited on), and a rank that waits for it in a group the note does not name reads it as stale (a rank waits for
it in that call only in one of that call's groups); answered or not, with no grace.

The note stays until that rank's next call resolves its group well (a user who catches the error and calls again
with the right group): then it is withdrawn (:meth:`Notes.withdraw`), marked with the time and the groups that call
resolved rather than deleted, since a peer already waiting for the rank in the note's call may not have read it
yet (it looks once a second, and the rank may call again within milliseconds): a wait that began before the
withdrawal, on a group the rank did not go on to, still raises it; a later wait does not (the ranks' wall clocks
are compared, as for :data:`STALE_GRACE_S`). The rank's first call after twice the timeout that resolves a group
deletes the note.

A peer that reaches its wait for the rank only after the withdrawal, on a group the rank did not go on to, stops
at once only if the rank's process has ended. A process that posted a note marks it ended at its normal exit (an
exit hook, :meth:`Notes.end`, on a clone of the store made from the note's posting on a helper thread, so that a
process that destroyed its process group first still marks it, and on the job's client while that clone still
connects; within :data:`ENDED_WAIT_S`, every error swallowed), withdrawn
or not: the rank comes to no exchange of this restart attempt any more (the notes' keys are the attempt's), so a
wait for it cannot succeed, whatever call the note was about. A waiting rank that finds a late rank's note so
marked (and not one that stops it with its error, above) raises :class:`~triton_dist_tune.GroupTimeoutError` at
once, naming the rank as ended and quoting its note's error; it neither passes it on nor takes back its message
(as after a timeout: the rank never comes, and every rank of the group that waits for it stops at the same
exchange, each reading the same mark). Nothing marks the note of a process killed, or that died without running
its exit hooks (``os._exit``, a signal), nor a process group's destruction (torch has no hook for it, and a
process may initialize torch.distributed again). A note names the process that posted it, though (the machine's
boot id and pid namespace, its pid and start time: :func:`~triton_dist_tune.group.note.this_process`): a waiting
rank on the same host and pid namespace reads that process gone (no such process, or a zombie) as ended too. On
another host (or pid namespace), where ``/proc`` cannot tell, it reads the note's beat instead
(:mod:`~triton_dist_tune.group.beat`): while its note stands and is not marked ended, a thread of the note's
process advances a counter of its own in the store every second, and a waiting rank reads the process gone once
that counter has not moved for ``TRITON_DIST_AUTOTUNE_LOST_S`` (default 30 s) by its own clock, naming the rank
as showing no sign of life. A live process whose beat thread cannot run that long (frozen, or its GIL held by one C
call) reads gone too; with ``LOST_S`` at or over the deadline, a wait on another host for a killed rank is bounded
by its deadline alone, as is one for a note of an older tuner (it does not say it beats).

Without the mark, that peer waits its deadline: no rule can stop it safely. The wrong rank never resolved the group
it was meant for, so its note cannot say which group or exchange it was about, and its wrong call took no sequence
number of any group: once it has withdrawn the note it may come to any group it has not gone on to yet, in a later
call, at the very exchange the peer waits at. The peer may then be in the call the note was about (the rank never
comes) or in a later call the rank will make (it comes, and the wait succeeds). Say global rank 1's wrong call was
meant for its replica group {1, 3}; it calls again there (the withdrawal names {1, 3}), then on its TP group {0, 1},
where rank 0, late, waits for it: that wait succeeds. Had the wrong call been meant for {0, 1}, with the same call
on {1, 3} after it, rank 0 would read the same note (same function, same groups gone on to) while waiting on the
same group at the same exchange: a rule that stops rank 0 there stops it in the first case too. A wait that began
before the withdrawal is read as the note's call, as is any wait for the rank inside the function while its note
stands (the rank was then still in its wrong call); after it, nothing tells. The late peer's ``GroupTimeoutError``
names the withdrawn note instead and quotes its error (:meth:`Notes.withdrawn_before`), read on that error path
only.

Every note carries the id of the error it passes on (its root: the wrong group's note, which a waiting rank's
note quotes), and a rank raises a root in one call only: a late rank's note of a call this rank has already
answered (its own error, or one it raised quoting a note) is not raised again when the ranks call again, the
late rank's coming after the others' (its note then still in the store).
A waiting rank that raises a note's error also takes back its message of the exchange (``store.py``): the late
rank never entered it, and the two are in step when they call again. Without torch.distributed (an mpi4py job)
there is no job store, and no note: the peers wait their deadline, as the error of the waiting rank says.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from .. import settings
from . import calls, epoch, exits
from .beat import BEAT_S, Beat, Silence
from .clients import Connecting
from .note import (
    GroupId,
    Note,
    Waiter,
    on_this_host,
    parse_about,
    parse_beat,
    parse_kind,
    parse_marks,
    parse_process,
    read_answers,
    started_at,
    this_process,
)
from .store_peek import peek
from .store_silence import answering, cut_store, tuner_timeout

log = logging.getLogger("triton_dist_tune")


#: how long a rank that has ended a call of a function since a note about it was posted waits for that note to be
#: answered before raising it (:meth:`Notes.unanswered`): the rank that waited for the note's rank in the call it was
#: about looks for notes about once a second, so its answer can come some seconds after this rank first read the
#: note on a loaded machine; 3 s (the first value) was within a few of its test's answer time (10 s: the cost is an
#: error raised that much later, in the one case where a wrong rank is early for a call whose peers were all still
#: in an earlier call of it)
STALE_GRACE_S = 10.0
#: how long this process's exit may take to mark its note ended (:meth:`Notes.end`): the store's timeout of its
#: requests there, and the most the exit waits for them (a store whose host is gone or frozen holds no exit longer)
ENDED_WAIT_S = 2.0
#: how long the exit then waits for the mark's thread and the note's beat to end, once it has cut a store that did
#: not answer the mark (their requests then raise at once)
ENDED_AFTER_CUT_S = 0.5


#: the notes' namespace where no attempt name is shared by the whole job (:func:`epoch.named_by_each_group`: the job
#: started torch.distributed itself, under torchrun on several nodes, whose agents count restarts apart): every
#: attempt's notes, told apart by when they were posted (:meth:`Notes.read`)
EVERY_ATTEMPT = "tdt/every-attempt/unresolved/"


def _prefix() -> str:
    """The notes' keys: the attempt's (``init_distributed``'s name, or the launcher's restart count on one node),
    else :data:`EVERY_ATTEMPT`'s."""
    return EVERY_ATTEMPT if epoch.named_by_each_group() else f"tdt/{epoch.current()}/unresolved/"


def _job_store() -> Any | None:
    """The default group's store, or None without an initialized torch.distributed."""
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        if not (dist.is_available() and dist.is_initialized()):
            return None
        return c10d._get_default_store()
    except Exception:  # a destroyed group, a torch without distributed: nobody to tell
        return None


class Notes:
    """This process's note, if it posted one, and the reading of the others' notes."""

    def __init__(self) -> None:
        #: whether this process has a note in the store (so that a good call deletes it, and only then)
        self.posted = False
        #: the roots of the notes this process raised (its own, or quoted) in its call now, then in earlier calls:
        #: those are never raised again (a call may wait for the same late rank at several exchanges)
        self.raised: set[str] = set()
        self.spent: set[str] = set()
        #: root -> when this process first read a note of it while it could be stale (``time.monotonic``)
        self._seen: dict[str, float] = {}
        #: this process's note as posted: its root, its second line's fields, its error (for :meth:`withdraw`)
        self._said: tuple[str, dict[str, Any], str] | None = None
        #: where :meth:`end` marks the note at this process's exit: a client of the store of its own (connecting
        #: on a helper thread where it is not made yet), the note's key, and the id of the process that posted it
        #: (a forked child marks nothing)
        self._end: tuple[Connecting, str, int] | None = None
        self._hooked = False
        #: this process's beat while its note stands, and this rank's reading of the others' (:mod:`.beat`)
        self.beat, self.silence = Beat(), Silence()

    def post(self, message: str, root: str | None = None, groups: Sequence[GroupId] | None = None,
             kind: str | None = None) -> None:
        """Say to the job that this rank will not come to its group's exchanges of the call it is in
        (``calls.calling``): ``message`` is its error, which passes on the note ``root`` (None: an error of this
        rank's own, a root of its own); ``groups``: the groups of that call, said in the note (:meth:`pass_on`);
        ``kind``: the class of the error where it is no ``BadInputError``."""
        store = _job_store()
        if store is None:
            return
        try:
            import torch.distributed as dist

            with answering(store, tuner_timeout()):  # (a frozen host: cut, never waited for: store_silence)
                key = f"{_prefix()}{dist.get_rank()}"
                root = root or f"{dist.get_rank()}.{int(store.add(f'{_prefix()}roots', 1))}"
                self.raised.add(root)
                if not store.check([key]):
                    store.add(f"{_prefix()}count", 1)
                said: dict[str, Any] = {"about": list(calls.names()), "posted": time.time()}
                process = this_process()
                if process is not None:
                    said["process"] = process
                if groups is not None:
                    said["groups"] = [[name, list(ranks)] for name, ranks in groups]
                if kind is not None:
                    said["error"] = kind
                if self.beat.start(store, f"{_prefix()}beat/{dist.get_rank()}"):  # (a beat first: never newer)
                    said["beat_s"] = BEAT_S
                store.set(key, f"{root}\n{json.dumps(said)}\n{message}".encode())
                self._said = (root, said, message)
                self.posted = True
        except Exception as exc:  # best effort: the peers then wait their deadline, as before
            log.debug("triton_dist_tune: could not post this rank's group error to the job: %s", exc)
            if not self.posted:
                self.beat.stop()  # (no note of this process's in the store: nothing to beat for)
            return
        self._end_with(store, key)

    def _end_with(self, store: Any, key: str) -> None:
        """Keep what :meth:`end` needs to mark the note ``key`` at this process's exit, and register it (once). The
        store is cloned (a client of its own, with a short timeout: the job's store may be gone by then, its group
        destroyed, and a clone keeps no store host's server alive; a store that cannot be cloned is kept itself), on
        a helper thread (:class:`~.clients.Connecting`): a new connection may stall for seconds (a slow resolver,
        docs/operations.md), and the rank posting its note, about to raise, waited for it (``test_layout.py::
        test_a_wrong_groups_note_is_posted_without_waiting_for_a_slow_new_client_of_the_store``)."""
        self._end = (Connecting(store, ENDED_WAIT_S), key, os.getpid())
        if not self._hooked:
            self._hooked = True
            atexit.register(self.end)

    def pass_on(self, notes: dict[int, Note], message: str, where: Waiter | None = None) -> None:
        """This rank raises ``message`` because of the late ranks' ``notes`` (:meth:`unanswered`): their roots are
        answered in this call (its next call is not failed by them), and ``message`` is posted as this rank's note,
        passing on the first note's root. With ``where`` (the group it waited on), each root's answer is recorded
        in the job's store, for :meth:`unanswered` on other ranks: which rank answered it, in which group; and the
        note names the groups of this call (those it resolved, ``calls.joined``, and ``where``'s): the ranks it passes
        the error on to wait for this rank in one of them (:meth:`stale`)."""
        self.raised.update(note.root for note in notes.values())
        store = _job_store() if where is not None else None
        if store is not None:
            answer = json.dumps([where.me, where.group, list(where.ranks)])
            for root in dict.fromkeys(note.root for note in notes.values()):
                try:
                    count = int(store.add(f"{_prefix()}answered/{root}/count", 1))
                    store.set(f"{_prefix()}answered/{root}/{count}", answer.encode())
                except Exception as exc:  # best effort: a later wait then reads the note as before
                    log.debug("triton_dist_tune: could not record the answer to a group error: %s", exc)
        groups = None
        if where is not None:
            groups = list(dict.fromkeys([g for call in calls.groups() for g in call] + [(where.group, where.ranks)]))
        self.post(message, next(iter(notes.values())).root, groups)

    def withdraw(self, group: GroupId | None = None) -> None:
        """This rank resolved its group well (a new call; ``group``: that group, when its waits read notes): the
        notes it raised are answered, and its own note, if it posted one, is withdrawn. The note is marked, not
        deleted: a peer that was already waiting for this rank in the note's call (on another group) may not have
        read it yet (it looks once a second), and a rank may call again within milliseconds. The mark says when,
        and the groups this rank went on to (:meth:`Note.matters`); a later call on a new group adds it. The note
        is deleted by this rank's first call after twice the timeout (no wait that began before its withdrawal is
        still on then), or replaced by its next note."""
        if self.raised:  # (most calls: nothing to move, and nothing posted)
            self.spent |= self.raised
            self.raised.clear()
        if not self.posted:
            return
        store, said = _job_store(), self._said
        if store is None or said is None:
            self.posted = False
            return
        root, fields, message = said
        now = time.time()
        try:
            import torch.distributed as dist

            with answering(store, tuner_timeout()):  # (a frozen host: cut, never waited for: store_silence)
                key = f"{_prefix()}{dist.get_rank()}"
                withdrawn = fields.get("withdrawn")
                if withdrawn is not None and now - withdrawn > 2 * settings.current().timeout:
                    self.posted, self._said = False, None
                    if store.delete_key(key):
                        store.add(f"{_prefix()}count", -1)
                    self.beat.stop()  # (once the note is out of the store)
                    return
                to = fields.setdefault("to", [])
                if withdrawn is not None and (group is None or [group[0], list(group[1])] in to):
                    return  # (a call on a group already named: nothing to write)
                fields.setdefault("withdrawn", now)
                if group is not None:
                    to.append([group[0], list(group[1])])
                store.set(key, f"{root}\n{json.dumps(fields)}\n{message}".encode())
        except Exception as exc:
            log.debug("triton_dist_tune: could not withdraw this rank's group error: %s", exc)

    def end(self) -> None:
        """At this process's normal exit (an exit hook; not where it dies without running them): mark its note, if
        it still has one in the store (withdrawn or not), as ended: its rank comes to no exchange any more, in this
        restart attempt (the notes' keys are the attempt's), and a rank waiting for it stops at once
        (:meth:`look`). The mark is written on the store kept when the note was posted (:meth:`_end_with`) and read
        back once, so that it is in the store when the exit hooks registered before it run; within
        :data:`ENDED_WAIT_S` (the store's timeout, and the most the exit waits for a thread doing it), every error
        swallowed. Where that client is still connecting (a process that exits within a slow connect of its note's
        posting), the mark is written on the job's store itself, which the connect holds: its timeout is the job's,
        so only in the thread the exit waits :data:`ENDED_WAIT_S` for, never on the exit's own thread. A mark still
        unanswered then is a host that does not answer (frozen, or cut off): this process cuts its connections to
        the store (:func:`~.store_silence.cut_store`), so that the mark's thread and a beat in flight raise, and
        waits for them :data:`ENDED_AFTER_CUT_S` more. Before, both were still blocked at the interpreter's
        finalization, and the count-out at exit waited its own 6 s (``test_frozen_host.py``: 11 s from the freeze
        to the process's end, 3.0 s now)."""
        kept, said = self._end, self._said
        if kept is None or said is None or kept[2] != os.getpid():
            return
        self.beat.stop()  # (the mark says more than a beat)
        (store, bounded), key = kept[0].now(), kept[1]
        if store is None:  # (its clone failed to connect, and the job's store is gone: nothing to write on)
            self.beat.join(ENDED_WAIT_S)
            return
        root, fields, message = said
        value = f"{root}\n{json.dumps({**fields, 'ended': time.time()})}\n{message}".encode()

        def mark() -> None:
            try:
                store.set(key, value)
                store.check([key])  # a reply: the server has applied the mark
            except Exception as exc:  # the store's host has ended, or the store is failing: nobody to tell
                log.debug("triton_dist_tune: could not mark this rank's group error as ended: %s", exc)

        started = time.monotonic()
        try:
            writer = threading.Thread(target=mark, name="triton_dist_tune-note-ended", daemon=True)
            writer.start()
        except RuntimeError:  # no new thread at the interpreter's exit (Python 3.12+): the clone's timeout bounds it
            if bounded:
                mark()
            return
        writer.join(ENDED_WAIT_S)
        if writer.is_alive():  # unanswered: a frozen host (torch's client bounds no reply); its threads end once cut
            cut_store(store, time.monotonic() - started)
            writer.join(ENDED_AFTER_CUT_S)
        self.beat.join(max(ENDED_AFTER_CUT_S, ENDED_WAIT_S - (time.monotonic() - started)))

    @staticmethod
    def read(store: Any, global_ranks: Sequence[int]) -> dict[int, Note]:
        """The notes of ``global_ranks`` (global rank -> its note), read from ``store``; ``{}`` while none was
        posted in the job (one request). Under :data:`EVERY_ATTEMPT`, a note posted before this process started
        (or that does not say when) is taken for an earlier attempt's, and left out: the launcher ends every
        process of an attempt before it starts the next one's. The hosts' wall clocks are compared: a skew of more
        than the restart's seconds would mistake one attempt for another. A note of this attempt posted before this
        process started (where torch.distributed's initialization does not wait for every rank) is missed too: this
        rank then waits its deadline for that rank, as without notes."""
        prefix = _prefix()
        if int(store.add(f"{prefix}count", 0)) <= 0:
            return {}
        since = started_at() if prefix == EVERY_ATTEMPT else None
        found = {}
        for rank in global_ranks:
            key = f"{prefix}{rank}"
            value = peek(store, key)  # (a note withdrawn long enough is deleted by its rank)
            if value is not None:
                root, _, rest = value.decode(errors="replace").partition("\n")
                about, _, text = rest.partition("\n")
                names, posted, groups = parse_about(about)
                if since is not None and (posted is None or posted < since):
                    continue
                found[rank] = Note(root, names, text, posted, groups, *parse_marks(about), parse_process(about),
                                   parse_beat(about), kind=parse_kind(about))
        return found

    def look(self, store: Any, global_ranks: Sequence[int],
             where: Waiter | None = None) -> tuple[dict[int, Note], dict[int, Note]]:
        """A waiting rank's look at the late ranks' notes (``global_ranks``; one :meth:`read`): those that stop its
        wait on the group ``where`` names with their error (:meth:`unanswered`), and the others whose rank has
        ended (:meth:`end`): that rank comes to no exchange any more, so the wait cannot succeed, whatever call the
        note was about and whether it was withdrawn. A rank's process on another host (or pid namespace) is read
        gone once its beat stopped (:mod:`.beat`)."""
        found = self.read(store, global_ranks)
        stopping = self.unanswered(store, found, where)
        ended, lost_s = {}, None
        for rank, note in found.items():
            if rank in stopping:
                continue
            if note.gone():
                ended[rank] = note
            elif note.beat_s is not None and not on_this_host(note.process):
                lost_s = settings.current().lost_s if lost_s is None else lost_s
                silent = self.silence.lost(store, f"{_prefix()}beat/{rank}", rank, note, lost_s)
                if silent is not None:
                    ended[rank] = note._replace(silent=silent)
                    exits.given_up([rank], f"its note's beat stood still for {silent:.0f} s")  # (for the store host)
        return stopping, ended

    def unanswered(self, store: Any, found: dict[int, Note], where: Waiter | None = None) -> dict[int, Note]:
        """The notes ``found`` (:meth:`read`) about a call this thread is inside, whose root this process has not
        raised in an earlier call, and that are not stale for a wait on the group ``where`` names (see
        :meth:`stale`)."""
        inside = calls.names()
        return {rank: note for rank, note in found.items()
                if note.root not in self.spent and note.concerns(inside) and note.matters(where)
                and (where is None or not self.stale(store, rank, note, where, inside))}

    def withdrawn_before(self, store: Any, global_ranks: Sequence[int], where: Waiter) -> dict[int, Note]:
        """The notes of ``global_ranks`` (:meth:`read`) about a call this thread is inside, of a root this process
        has not raised, that were withdrawn before the wait on the group ``where`` names began, the rank going on
        to other groups (:meth:`Note.matters`: such a note stops no wait). For the message of that wait's timeout
        only: the wait may have been for the call the note was about (the rank never comes) or for a later call
        the rank may still make on that group, and nothing the peer reads tells which (see the module docstring)."""
        inside = calls.names()
        return {rank: note for rank, note in self.read(store, global_ranks).items()
                if note.withdrawn is not None and note.root not in self.spent | self.raised
                and note.concerns(inside) and not note.matters(where) and (where.group, where.ranks) not in note.to}

    def stale(self, store: Any, rank: int, note: Note, where: Waiter, inside: Sequence[str]) -> bool:
        """Whether the note of global rank ``rank`` is about an earlier call than the one this rank waits in, on
        the group ``where`` names (a note is about a function, and the same function may be called again on
        another group while the note's rank is late):

        - answered in this group: it is this call's (the rank that answered waits here too): not stale;
        - a note that passes the error on, posted in a call with no part in this group (the groups it names): the
          note's rank met it in an earlier call (a rank waits for it here in this call only where that call has
          this group too): stale;
        - answered by another rank of this group, in another group: that rank met it in an earlier call: stale;
        - neither, while this rank has ended a call of the function since the note was posted: not told yet,
          read as stale for :data:`STALE_GRACE_S` from when this rank first read it (the rank that waited for the
          note's rank in the call it was about answers within a second or two), then raised.
        """
        answers = read_answers(store, _prefix(), note.root)
        group = (where.group, list(where.ranks))
        if any((name, ranks) == group for _, name, ranks in answers):
            return False
        if note.groups is not None and (where.group, tuple(where.ranks)) not in note.groups:
            return True
        if any(a in where.ranks and a not in (rank, where.me) for a, _, _ in answers):
            return True
        relevant = set(note.about).intersection(inside) if note.about else set()
        if note.posted is None or not any(calls.ended(name) > note.posted for name in relevant):
            return False
        first = self._seen.setdefault(note.root, time.monotonic())
        return time.monotonic() - first < STALE_GRACE_S


NOTES = Notes()
