"""The beat of a process whose wrong-group note stands in the job's store (:mod:`~triton_dist_tune.group.unresolved`),
and a waiting rank's reading of it: how a rank tells that a note's process on another host (or in another pid
namespace) has gone, killed or dead without running its exit hooks, where it cannot read that process in ``/proc``
(:func:`~triton_dist_tune.group.note.process_gone`).

While this process has a note in the store that is not marked ended, a daemon thread of its own (:class:`Beat`,
one per process, started at the first note) adds 1 to a counter under its global rank in the store every
:data:`BEAT_S` seconds, on a client of its own (a clone of the store with a short timeout: it never holds the
caller, nor the process's exit; every store error is swallowed), and the note says so (``beat_s`` in its second
line, written only once the thread runs). The posting itself adds 1 first, on the caller's store, before it writes
the note: a note is never newer than its beat. The thread makes that client itself, at its first beat for the
note: a new connection may stall for seconds (torch's reverse DNS lookup of the store's address on a slow
resolver, docs/operations.md), and the caller, about to raise its error, would wait for it (before, it did, and
its note was posted that much later:
``test_layout.py::test_a_wrong_groups_note_is_posted_without_waiting_for_a_slow_new_client_of_the_store``).

A rank waiting for a late rank whose note says that it beats, and whose process it cannot check on its own host,
reads the counter at each look (about once a second; :class:`Silence`) and reads the process gone when the counter
has not moved for ``TRITON_DIST_AUTOTUNE_LOST_S`` seconds (default 30; at least three of the note's beats), as the
WAITING rank's monotonic clock measures between its own reads (from the reply of the read that first saw the value
to the request of the read that sees it still), less the spans the waiting rank itself stood still
(:func:`~.pauses.ran`: a machine paused with both processes on it, then continued, reads no one gone): the ranks'
wall clocks are never compared, and an unchanged value over that span means no beat reached the store in it. It
then raises as for an ended process, naming the rank as showing no sign of life. A wait still ends at its deadline
``T`` whatever the beat says, so the rule shortens only waits where ``LOST_S < T``.

Limits, stated plainly: a live process whose beat thread cannot run for ``LOST_S`` is read gone too: a frozen
process (SIGSTOP, a debugger), one whose main thread holds the GIL in one C call that long (the thread needs the GIL
for a moment per beat; torch's store and collective calls release it, an mpi4py collective does not: an mpi4py group
has no job store and no note, but a torch job's own code may call one while waiting for a slow peer), or one cut off
from the store's host. Its peer would then have waited for it: the wait ends early with a ``GroupTimeoutError`` it
would otherwise have escaped only if the process came back before ``T``. The default, 30 s, a tenth of the default
deadline, leaves room for such holds, thirty beats (how long the tuner's own code may hold the GIL was not
measured). The beat reads nothing on the rank's own host (``/proc`` tells there, exactly), and a note without
``beat_s`` (an older tuner's) or a counter that cannot be read is read as before: no beat rule. A beat whose
connection to the store is lost (``DistNetworkError``) connects again, once, at its next beat (a new clone of the
caller's store): a connection reset while the store lives costs one beat. Where that new connection fails too
(the store's host gone), or this process has cut its connections to the store (its host stopped answering:
:mod:`.store_silence`; a new connection would wait for ever in torch's connect), the beat stops until the next note:
its peers, who read the store through that host too, then read the process gone as one cut off from it. The thread
ends once its note's beat stops (a next note starts another), and the exit that marks the note ended waits for it
(:meth:`~triton_dist_tune.group.unresolved.Notes.end`): no thread of it is left at the interpreter's finalization.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .clients import own_client
from .note import Note
from .pauses import ran
from .store_silence import was_cut

log = logging.getLogger("triton_dist_tune")

#: seconds between two beats of a process whose note stands
BEAT_S = 1.0
#: the fewest of a note's beats a waiting rank sees missing before it reads the note's process gone
LEAST_BEATS = 3


class Beat:
    """This process's beat (see the module docstring): on while it has a note in the store not marked ended."""

    def __init__(self) -> None:
        #: what the beat thread beats; None: off
        self._on: _Beating | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0
        #: set by :meth:`stop`: the thread wakes at once, and ends
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # (the thread turns a lost connection's beat off, never a newer one)

    def start(self, store: Any, key: str) -> bool:
        """Beat under ``key`` of ``store`` (the job's store) from now on: one beat now, on ``store``,
        then one every :data:`BEAT_S` on a clone of it that this process's beat thread (started if it does not run)
        makes at its first beat, never the caller. Returns whether the thread runs (only then may a note say that it
        beats); False on any error."""
        try:
            store.add(key, 1)
        except Exception as exc:  # the note then says no beat (the beat of a note posted before goes on)
            log.debug("triton_dist_tune: no beat for this rank's group error: %s", exc)
            return False
        with self._lock:  # (the thread ends under it once off: it is running, or made anew)
            self._on, self._stopped = _Beating(store, key), threading.Event()
            if self._thread is not None and self._pid == os.getpid():
                return True
            try:
                self._thread = threading.Thread(target=self._run, name="triton_dist_tune-note-beat", daemon=True)
                self._thread.start()
            except RuntimeError as exc:  # no new thread (at the interpreter's exit): the note says no beat
                log.debug("triton_dist_tune: no beat for this rank's group error: %s", exc)
                self._thread, self._on = None, None
                return False
            self._pid = os.getpid()
        return True

    def stop(self) -> None:
        """No more beats: the note is deleted, or marked ended. The thread ends (at once, unless a beat is in
        flight); the next note starts another. Before, it stayed, idle, for the next note, and was still alive at
        the interpreter's finalization after a note's process exited normally (a thread alive then can abort the
        process; ``test_frozen_host.py``, a rank with a note exiting normally)."""
        with self._lock:
            self._on = None
            self._stopped.set()

    def join(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the thread to end (after :meth:`stop`): a beat in flight to a store whose host
        is frozen ends when this process cuts its connections (:mod:`.store_silence`)."""
        thread = self._thread
        if thread is not None and self._pid == os.getpid():
            thread.join(seconds)

    def _run(self) -> None:
        while True:
            self._stopped.wait(BEAT_S)  # (a note posted since its stop: a new event, not set)
            with self._lock:
                on = self._on
                if on is None:
                    self._thread = None
                    return
            if on.client is None:  # the note's first beat here, or the connection was lost at the last: connect
                if was_cut():  # (this process cut the store: a frozen host, whose connect would wait for ever)
                    self._off(on)
                    continue
                on.client = own_client(on.store)
            try:
                on.client.add(on.key, 1)
                on.lost = False
            except Exception as exc:  # a slow store: the next beat tries again
                log.debug("triton_dist_tune: could not beat for this rank's group error: %s", exc)
                if not any(c.__name__ == "DistNetworkError" for c in type(exc).__mro__):
                    continue
                if not on.lost:  # a reset connection: a new one at the next beat, once
                    on.client, on.lost = None, True
                    continue
                self._off(on)  # a new connection lost too: the store is gone (torch prints each failure: two, not
                # one a second)

    def _off(self, on: _Beating) -> None:
        """No more beats for ``on``, the store lost (a newer note's beat goes on)."""
        with self._lock:
            if self._on is on:
                self._on = None


class _Beating:
    """What the beat thread beats: the counter ``key`` through ``client`` (a clone of the caller's ``store``, made
    by the thread at its next beat while None: none made yet, or its connection was lost), and whether a connection
    was lost with no beat landed since (a new one lost too: the store is gone)."""

    def __init__(self, store: Any, key: str) -> None:
        self.store, self.key = store, key
        self.client: Any = None
        self.lost = False


def counts(store: Any, reader: Any | None, keys: dict[int, str]) -> dict[int, int]:
    """Each counter of ``keys`` (rank -> key) now: two requests (``check`` on ``store``, ``multi_get`` on
    ``reader``) where every counter exists, whatever their number; else an ``add`` of 0 each (a counter not there
    yet: read as 0, and written, deleted with the others by the last member to close, :class:`Members`), and so always
    without a ``reader`` (None: the side client is still connecting). No counter is deleted between the two
    requests: the beats' counters of a board or a watch are deleted only once every member of its group has closed
    it (:class:`Members`), and a reader reads them only while its own is open. Before, each member deleted
    its own counter as it closed: one that closed between a reader's two requests (its tuning over while a peer
    still waited at the last exchange; a unit leaving with an error) left the ``multi_get`` waiting for ``reader``'s
    timeout (2 s, :func:`~triton_dist_tune.group.clients.side_client`), holding every board's beats on the
    process's side client, and the adds then wrote the counter again, a key left behind
    (``test_store_reads.py::test_a_board_closed_between_a_peers_check_and_read_of_its_beat_does_not_hold_the_peer``).
    ``reader``'s short timeout stays the bound where a counter goes anyway (another process deleting the tuner's
    keys); a store that is gone makes the adds raise."""
    if keys and reader is not None and store.check(list(keys.values())):
        try:
            return {r: int(v) for r, v in zip(keys, reader.multi_get(list(keys.values())), strict=True)}
        except Exception:  # (a counter deleted since the check; a store without multi_get)
            pass
    return {r: int(store.add(key, 0)) for r, key in keys.items()}


class Silence:
    """A waiting rank's reading of the beats of the notes whose process it cannot check on its own host."""

    def __init__(self) -> None:
        #: global rank -> the note it was read for (root, posted), the counter's value, and when (``time.monotonic``,
        #: after the reply) this rank first read that value
        self._seen: dict[int, tuple[tuple[str, float | None], int, float]] = {}

    def lost(self, store: Any, key: str, rank: int, note: Note, lost_s: float) -> float | None:
        """Seconds global rank ``rank``'s beat (the counter under ``key``) has not moved, by this rank's clock, when
        that is ``lost_s`` or more (at least :data:`LEAST_BEATS` of the note's beats), else None (also for a note
        that does not say it beats, and where the counter cannot be read)."""
        if note.beat_s is None:
            return None
        before = time.monotonic()
        try:
            value = int(store.add(key, 0))
        except Exception as exc:  # a store error, a foreign value: no rule
            log.debug("triton_dist_tune: could not read the beat of global rank %s: %s", rank, exc)
            return None
        after, which, seen = time.monotonic(), (note.root, note.posted), self._seen.get(rank)
        if seen is None or seen[0] != which or seen[1] != value:
            self._seen[rank] = (which, value, after)
            return None
        silent = ran(seen[2], before)  # less the spans this rank stood still (its machine paused with the note's)
        return silent if silent >= max(lost_s, LEAST_BEATS * note.beat_s) else None


class Members:
    """The members of a group that have closed a board or a progress watch, counted under ``key`` of ``store`` (one
    ``add`` as each closes it), so that the keys every member reads while its own is open (the beats' counters, a
    watch's notes) are deleted by the last of the group's ``size`` members to close, once nobody reads them or will:
    a member that closes while others still wait, or have not opened theirs yet, deletes nothing (:func:`counts`).
    Counting the members open instead (an ``add`` as each opened) let a member that left with an error before a peer
    opened (the peer a poll behind it out of the exchange before) be the last out: it deleted its note of leaving,
    and the peer waited for its beat to stand still for the whole window
    (``test_wait_polls.py::test_a_unit_that_left_before_another_opened_its_watch_is_read_as_left``). A member that
    never closes (a process that ended without its exit hooks) keeps the count below ``size``: those keys then stay,
    as the keys of a failed exchange do.

    A member that opens one again at a scope where its close did not make the count (a watch only some ranks open,
    a side path of their own, then the group's next watch: no exchange between, so the same scope) takes that close
    back first (one ``add`` of -1; one more where the count was made meanwhile, the keys deleted: nothing to take
    back). Before, its first close counted as one of the group's: its second made the count at once, deleting the
    keys while a peer might still read them, and the peer's close then wrote the count again, a key left behind
    (``test_store_reads.py::test_a_members_close_is_taken_back_only_where_it_did_not_make_the_count``; a progress
    watch refuses such a second opening: :func:`~triton_dist_tune.faults.progress._claimed`). A peer that closes
    that next watch before this member has opened it again (it left with an error) still makes the count with this
    member's first close: no count tells a member's close of the group's watch from one of a watch of its own at
    the same scope. So the last out deletes only the keys that a member opening again can do without; a watch keeps
    its notes of leaving unless every member left with one
    (:meth:`~triton_dist_tune.faults.progress.RoundWatch.close`), and that member reads why its peer left at its
    first look, the keys of the failed watch then staying."""

    def __init__(self, store: Any, key: str, size: int, member: int) -> None:
        self.store, self.key, self.size = store, key, size
        #: this member's rank in the group (a test's process plays several)
        self._me = (key, member)
        self._open = False

    def open(self) -> None:
        """This member opens it (before its first beat; no request, unless this process has closed one at this
        scope before: its close is taken back)."""
        self._open = True
        with _closed_lock:
            try:
                again = _closed_here.get(self.store, {}).pop(self._me, False) is None
            except TypeError:  # (a store no weak reference can point at: nothing recorded)
                again = False
        if again and int(self.store.add(self.key, -1)) < 0:
            # the count was made since (the group's last member closed it and deleted its keys): that close was one
            # of the group's, of a watch every member had open; nothing to take back
            self.store.add(self.key, 1)

    def close(self, keys: Callable[[], list[str]]) -> None:
        """This member closes it (once; nothing where it never opened): the last of the group's members to close
        deletes ``keys()`` and the count. A store that is gone raises."""
        if not self._open:
            return
        self._open = False
        if int(self.store.add(self.key, 1)) < self.size:
            with _closed_lock:
                try:
                    closed = _closed_here.setdefault(self.store, {})
                except TypeError:  # (a store no weak reference can point at: never taken back, as before)
                    return
                closed[self._me] = None
                while len(closed) > _CLOSED_KEPT:
                    del closed[next(iter(closed))]
            return
        for key in [*keys(), self.key]:
            self.store.delete_key(key)


#: per store (weakly), the count keys (and member) of the latest boards and watches this process closed before the
#: count was made (in the order closed): one opened again at such a scope takes its close back
#: (:meth:`Members.open`). It is opened again right after (the group's next exchange scopes the next one apart), so
#: the latest few are kept
_closed_here: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_closed_lock = threading.Lock()
_CLOSED_KEPT = 64
