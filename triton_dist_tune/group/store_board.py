"""A failure board of a torch.distributed group in the job's key-value store (:class:`StoreBoard`), with the beats
that tell a waiting rank which of its peers are alive."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from .. import settings
from .beat import Members, counts
from .channel import BadBoardEntry, Board, FailureReport
from .clients import side_client
from .pauses import PAUSES, ran
from .store_peek import peek
from .store_silence import Silence, answering, beat, tuner_timeout, was_cut

#: what a board's beat adds per whole second its process stood still since its last beat (stopped: SIGSTOP, a
#: debugger, a paused machine; :mod:`.pauses`), beside the beat's 1: far above any count of plain beats within a phase
#: (at most one a second: 11 days of them)
PAUSE_MARK = 1_000_000


class BoardOwner(Protocol):
    """What a board needs of its group (:class:`~triton_dist_tune.group.store.StoreGroup`)."""

    rank: int
    size: int

    @property
    def store(self) -> Any: ...

    def board_closed(self, board: StoreBoard) -> None: ...

log = logging.getLogger("triton_dist_tune")

#: how many of a rank's beats (and half a second more) :meth:`StoreBoard.stopped` sees missing before it reads the
#: rank stopped
STOPPED_BEATS = 3


class StoreBoard(Board):
    """A failure board in the job's store, outside the exchange sequence: ``<scope>count`` counts the reports,
    ``<scope><n>`` holds the n-th as JSON (plain data: nothing read is executed). Reading it costs one request
    while nothing new was posted.

    With a ``window``, the board also says which ranks are alive: while it is open a daemon thread beats a counter,
    ``<scope>beat/<rank>``, every ``window / 5`` seconds (at most one), and a rank waiting at an exchange reads the
    late ranks' counters between its store waits (:meth:`silent`). A rank whose counter has not moved for
    ``window`` seconds has ended, was killed or is frozen (every phase of a live one is under the watchdog, which
    ends a hung rank after ``T``): the waiting ranks give up on it then, not at the exchange's deadline, which for
    a steady round of ``n`` samples is ``n`` times longer.

    The board talks to the store through a client other than the job's, this process's side client, which every
    board and progress watch of the process shares (:func:`~triton_dist_tune.group.clients.side_client`): the job's
    client is the process group's too, and serves one request at a time, so a blocking ``get`` of the user's
    (NCCL's first use of a communicator, waiting for an id a peer that raised never sends) held the beat, the
    watchdog's look at the board and the posts behind it: the rank was taken for dead, or ended by the backstop with
    its config a crash suspect. The side client connects on a helper thread, begun as the process's first board
    opens; until it is made (milliseconds, or seconds where the resolver is slow), the board uses the job's client,
    in requests that never wait (:attr:`store`; for that while, a blocking ``get`` of the user's holds them, as it
    did before there was a side client). Before, the first board made it on the tuning's thread, and its connect
    held the tuning's first exchange, so every rank's
    (``test_scale.py::test_a_first_tuning_does_not_wait_for_a_slow_new_client_of_the_store``)."""

    def __init__(self, group: BoardOwner, scope: str, window: float | None = None,
                 outer: StoreBoard | None = None) -> None:
        self.group, self.scope = group, scope
        if group.size > 1:  # (its connect begins now; alone: nobody else to hear, no client but the job's)
            side_client(group.store)
        #: the board of a tuning this one runs inside (an ``autotune`` tuning in a ``contextual_autotune`` call on the
        #: same group): the group's board again when this one closes
        self.outer = outer
        self._seen: list[FailureReport] = []
        self._lock = threading.Lock()
        self.window = window if group.size > 1 else None
        #: per rank looked at: the beat count seen and when it last moved
        self._beats: dict[int, tuple[int, float]] = {}
        #: (when, every other rank's beat count then): the last :meth:`look`
        self._looked: tuple[float, dict[int, int]] | None = None
        #: the same, of the last guarded phase's first look, early in it (``look(first=True)``)
        self._first_look: tuple[float, dict[int, int]] = (-1.0, {})
        #: rank -> (beat count, since when it stood there): the ranks :meth:`stopped` read stopped, which
        #: :meth:`silent` reads silent at once while their beat still stands there
        self._stopped: dict[int, tuple[int, float]] = {}
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        #: the members that have closed the board: the last of the group's to close deletes every member's beat counter
        self._members = Members(self.store, f"{scope}closed", group.size, group.rank)
        #: a beat in flight for ``window`` s: the store's host does not answer (:mod:`.store_silence`)
        self._silence = Silence(group.store, self.window, self._stop) if self.window is not None else None
        if self._silence is not None:
            self._silence.start()
            self._members.open()
            self._beat()
            self._beater = threading.Thread(target=self._beating, name="tdt-board-beat", daemon=True)
            self._beater.start()

    @property
    def store(self) -> Any:
        """The client the board talks through: the process's side client, the job's until it is made (alone: the
        job's)."""
        job = self.group.store
        return (side_client(job) or job) if self.group.size > 1 else job

    def _beat(self, stood_s: float = 0.0) -> None:
        """One beat: 1, and :data:`PAUSE_MARK` more per whole second this process stood still since the last
        (:mod:`.pauses`), which a peer whose deadline passed reads as this rank stopped (:meth:`stopped`)."""
        key, amount = f"{self.scope}beat/{self.group.rank}", 1 + PAUSE_MARK * int(stood_s)
        if self.group.size > 1:  # on the side client once it is made, watched there (:func:`.store_silence.beat`)
            beat(self._silence, self.group.store, key, amount)
        else:
            self.group.store.add(key, amount)

    @property
    def every(self) -> float:
        """Seconds between two beats of a rank's board."""
        return max(0.05, min(1.0, (self.window or 5.0) / 5))

    def _beating(self) -> None:
        every = self.every  # (a wait woken late shows this process stood still: :mod:`.pauses`)
        while True:
            began = time.monotonic()
            if PAUSES.wait(self._stop.wait, every):
                return
            try:
                self._beat(PAUSES.within(began, time.monotonic()))
            except Exception:  # the store is gone: the waits say so; a beat thread never raises
                return

    def silent(self, ranks: Sequence[int]) -> list[int]:
        """Of ``ranks``, those whose beat this rank has not seen move for ``window`` seconds (none without a
        window), and those :meth:`stopped` read stopped whose beat still stands where it stood then: this rank read
        them so after its collective with them broke (a peer's process lost), and a broken connection and a still
        beat together are a process that ended (one frozen keeps its connections). Before, a waiting rank gave them
        the whole window, ``T``, at the exchange after that collective: a node lost from an elastic job left the
        other node's ranks waiting ``T + T/10`` s (330 s with the defaults) before its launcher could restart them.
        The first look at a rank starts its clock."""
        if self.window is None:
            return []
        now, silent = time.monotonic(), []
        for rank, count in self._counts(ranks).items():
            seen, stopped = self._beats.get(rank), self._stopped.pop(rank, None)
            if stopped is not None and stopped[0] == count:
                self._stopped[rank] = stopped
                self._beats.setdefault(rank, stopped)
                silent.append(rank)
            elif seen is None or seen[0] != count:
                self._beats[rank] = (count, now)
            elif ran(seen[1], now) > self.window:  # (not a paused machine's seconds: every rank on it stood still)
                silent.append(rank)
        return silent

    def _counts(self, ranks: Sequence[int]) -> dict[int, int]:
        """Each of ``ranks``' beat count now, in two requests where every counter exists (:func:`.beat.counts`;
        before, one request per rank: at a deadline on a group of N, N (N - 1) requests over its ranks)."""
        job = self.group.store  # (no side client yet: adds on the job's client, never a multi_get that may wait)
        side = side_client(job) if self.group.size > 1 else job
        return counts(side or job, side, {r: f"{self.scope}beat/{r}" for r in ranks})

    def quiet_s(self, ranks: Sequence[int]) -> float:
        """The shortest time this rank has seen the beats of ``ranks`` stand still (0 for a rank never looked at)."""
        now = time.monotonic()
        return min((ran(self._beats[r][1], now) if r in self._beats else 0.0 for r in ranks), default=0.0)

    @property
    def beats_span(self) -> float:
        """How long a rank's beat must stay still for :meth:`stopped` to read it stopped: :data:`STOPPED_BEATS`
        beats and half a second (0: no beats to read)."""
        return STOPPED_BEATS * self.every + 0.5 if self.window is not None else 0.0

    def look(self, first: bool = False) -> None:
        """Read every other rank's beat counter now, for :meth:`stopped`: the watchdog looks :attr:`beats_span`
        before a guarded phase's deadline, and, in a phase long enough, once early in it (``first``,
        :data:`~triton_dist_tune.faults.watchdog.FIRST_LOOK_S` in; :meth:`~triton_dist_tune.faults.watchdog.Guard.
        next_look`): a phase that ends sooner pays nothing."""
        if self.window is None:
            return
        try:
            counts = self._counts([r for r in range(self.group.size) if r != self.group.rank])
        except Exception:  # the store is going away: nothing to compare with later
            return
        if first:
            self._first_look = (time.monotonic(), counts)
        else:
            self._looked = (time.monotonic(), counts)

    def stopped(self, ranks: Sequence[int], since: float | None = None) -> list[int]:
        """Of ``ranks``, those whose beat has not moved for :attr:`beats_span` seconds, since :meth:`look` (or
        since now, waiting that long): a live process beats through any wait of its own, a hung kernel or a
        collective included; one frozen (SIGSTOP), killed or holding the GIL in one C call does not. And those whose
        beat says that they stood still a second or more (:data:`PAUSE_MARK`) within that span, or since the
        phase's first look (``first``) where it came after ``since``, the phase's start: a rank continued (SIGCONT)
        since, whose beat moved again, but which was stopped while this rank waited for it (before, this rank then
        journaled its own config ``hung``:
        ``test_faults.py::test_a_peer_continued_before_the_deadline_is_still_read_stopped_...``). Asked by a
        rank whose deadline passed inside a run (:mod:`~triton_dist_tune.measure.guarding`, :mod:`~triton_dist_tune.
        contextual.state`). None without beats, or when the store cannot be read."""
        if self.window is None or not ranks:
            return []
        looked = self._looked  # a look from this phase's watchdog, a span ago; an older one would miss a recent end
        if looked is None or time.monotonic() - looked[0] > self.beats_span + 1.0 or not set(ranks) <= set(looked[1]):
            self.look()
            looked = self._looked
        if looked is None:
            return self._silent_host(ranks)
        time.sleep(max(0.0, self.beats_span - (time.monotonic() - looked[0])))
        try:
            now = self._counts(ranks)  # (still, or beating again after standing still within the span: continued)
            first = self._first_look if since is not None and self._first_look[0] >= since else (-1.0, {})
            found = [r for r in ranks if now[r] == looked[1][r] or now[r] - looked[1][r] >= PAUSE_MARK
                     or now[r] - first[1].get(r, now[r]) >= PAUSE_MARK]
        except Exception:  # the store is going away: nothing can be told, unless its host stopped answering
            return self._silent_host(ranks)
        self._stopped.update((r, (looked[1][r], looked[0])) for r in found)
        return found

    def _silent_host(self, ranks: Sequence[int]) -> list[int]:
        """Of ``ranks``, the one whose process hosts the store (global rank 0, without torchrun's agent) where this
        process cut its connections to the store because it stopped answering (:mod:`.store_silence`): a frozen
        host beats no more than a frozen peer does, and its beats cannot be read."""
        if not was_cut() or settings.launcher().agent_store:
            return []
        world = getattr(self.group, "global_ranks", None) or []
        return [r for r in ranks if r < len(world) and world[r] == 0]

    #: this rank's last report posted here (what :meth:`~.leaving.LeavingChannel.leave` tells of an interruption)
    posted: FailureReport | None = None

    def post(self, report: FailureReport) -> None:
        self.posted = report
        store = self.store
        n = store.add(f"{self.scope}count", 1)
        store.set(f"{self.scope}{n}", report.to_json())

    def read(self) -> list[FailureReport]:
        with self._lock:
            store = self.store
            count = store.add(f"{self.scope}count", 0)
            for n in range(len(self._seen) + 1, count + 1):
                key = f"{self.scope}{n}"
                value = peek(store, key)  # (rank 0 deletes the reports when it closes the board: never a get)
                if value is None:
                    break  # counted, not written yet (or deleted: the board is closing): next time
                try:
                    report = FailureReport.from_json(value)
                except BadBoardEntry as exc:  # written by another process: refused, once, with a warning
                    log.warning("triton_dist_tune: rank %d refused the failure board entry %r: not a report of "
                                "the tuner (%s); a process other than the tuner wrote under its keys of the "
                                "key-value store. It is ignored: it blames no config and ends no rank",
                                self.group.rank, key, exc)
                    report = FailureReport(-1, -1, "", "refused")
                self._seen.append(report)
            return [r for r in self._seen if 0 <= r.rank < self.group.size]

    def close(self, clean: bool = True) -> None:
        """The tuning is over: stop beating and delete this board's keys (the last rank to close its board every
        rank's beat counter, :class:`~triton_dist_tune.group.beat.Members`: a peer still waiting at the tuning's last
        exchange reads them; group rank 0 the reports and their count), so that a job of thousands of tunings leaves
        no keys behind. Not ``clean`` (this rank's tuning ended by its own error or interruption, its peers maybe
        still waiting for it): the reports stay, so that a peer reads this rank's report of why it left (deleted,
        the report went unread and the peer waited for the beat to fall silent: ``T + T/10``)."""
        self._stop.set()
        if self._beater is not None:
            self._beater.join(timeout=2.0)  # its last beat must not write the key again after the deletion
        self.group.board_closed(self)
        try:  # (no beat watches the store now: a frozen host is read by the section's prober)
            with answering(self.group.store, tuner_timeout()):
                store = self.store
                self._members.close(lambda: [f"{self.scope}beat/{r}" for r in range(self.group.size)])
                if not clean:
                    return
                if self.group.rank == 0:  # the reports it read (up to a gap: a count another process added to is
                    self.read()  # no bound on the keys to delete, which went on for hours at close)
                    for n in range(1, min(int(store.add(f"{self.scope}count", 0)), len(self._seen)) + 1):
                        store.delete_key(f"{self.scope}{n}")
                    store.delete_key(f"{self.scope}count")
        except Exception as exc:  # the store is gone (the job is ending): nothing to tidy
            log.debug("triton_dist_tune: could not delete the failure board's keys (%s)", exc)
