"""A wait for the slowest of several units, tied to their progress instead of a worst case.

Three places wait for units that each do a long, variable share of work: a round of a campaign waits for every
unit's keys (:mod:`~triton_dist_tune.function.campaign`), a tuning with ``autotune_replicas`` waits for every
replica's share of the configs, then for every replica's race of the leaders
(:mod:`~triton_dist_tune.measure.replicas`), and a ``sharded=True`` tuning waits for every rank's share
(:mod:`~triton_dist_tune.measure.sharded`). A
fixed deadline is wrong both ways (a slow but healthy unit makes the others give up; a dead unit makes them wait the
whole worst case). Instead every rank of the exchange group beats a counter in the job's key-value store while the
work runs (a daemon thread, every :func:`beat_interval` seconds), and marks in the store when it has finished its
share of a round. A rank waiting at a round watches the others' marks and counters: while a unit's counter moves it
is alive and its work goes on under the tuning's own deadlines (the watchdog bounds every run of a config, every
exchange of its group has its deadline), so the wait goes on; a unit whose counter has not moved for
``exchange_timeout(T)`` seconds (its process ended, was killed, or is frozen) ends the wait on every other rank with
a :class:`~triton_dist_tune.GroupTimeoutError` naming it, within T + grace of its end. Only when every unit has
marked the round does the round's exchange run (with an exchange deadline: everyone is there). A unit that leaves
with an error says so in the store (:meth:`RoundWatch.leave`): the others end their wait at once.

A beat means progress, not only a live process: the user code a unit runs that no deadline of the tuner bounds
(the campaign's build of a key's call, ``key_fn``, ``prune_fn``, ``ref_prog``) is marked with :func:`user_code`,
and a unit whose watching thread has been inside it for longer than ``exchange_timeout(T)`` (what a rank gets to
reach an exchange elsewhere, where the others wait at the next exchange for a rank stuck there) stops beating and
notes in the store where it is stuck: the others end their wait as for a dead unit, ``exchange_timeout(T)`` later,
with an error saying where it is stuck. The stuck unit itself stays there (Python code cannot be interrupted
safely): its process has to be ended. If it comes back, it beats again.

A group without a key-value store (mpi4py) has no side channel: its users keep one deadline per round, long enough
for the round's worst case.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..errors import AutotuneError, GroupTimeoutError, RankFailedError, describe_error
from ..faults.watchdog import exchange_timeout
from ..group.beat import Members, counts
from ..group.channel import Group
from ..group.clients import side_client
from ..group.pauses import PAUSES, ran
from ..group.store_silence import Silence, answering, beat, lost_reason
from ..group.store_wait import ArrivalLog, Arrivals, Pace, StoreWaitTimeout, quiet_store_wait
from ..group.waiting import report_waiting
from ..settings import current, store_host
from .unit_notes import NoteLog

#: per thread: the user code without a deadline it is in (what, and when it entered), read by the beat threads
_inside: dict[int, tuple[str, float]] = {}


@contextmanager
def user_code(what: str) -> Iterator[None]:
    """Mark the calling thread as inside user code that no deadline of the tuner bounds (``what``: e.g.
    ``"key_fn"``). A watched unit whose thread stays inside longer than ``exchange_timeout(T)`` stops beating (see
    the module docstring); elsewhere the mark costs a dict entry. Nested marks: the outermost counts."""
    me = threading.get_ident()
    if me in _inside:
        yield
        return
    _inside[me] = (what, time.monotonic())
    try:
        yield
    finally:
        _inside.pop(me, None)


def beat_interval(timeout: float) -> float:
    """Seconds between two beats of a unit, and between two looks of a waiting rank: at most a second, and a
    quarter of the deadline for small ones."""
    return max(0.05, min(1.0, timeout / 4))


#: per store (weakly), per (watch kind in a group's namespace, member): the exchange number this process last opened
#: such a watch at
_opened: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_opened_lock = threading.Lock()


def _claimed(group: Any, kind: str) -> str:
    """The store scope of a watch of ``kind`` on ``group`` (its exchange number now), claimed by this process's member
    of ``group`` once. A second watch of one kind at one exchange number (no exchange of the group since the first:
    a watch some ranks open and others do not, a side path of their own) would share the first's keys: a note of
    leaving the first kept was then read, by a peer at the second, as the unit leaving the second, and the ranks'
    outcomes differed (found on a real store). No path of the tuner opens one: every watch follows an exchange of its
    group (a campaign's agreement on its keys, a tuning's exchange of journals, the replicas' agreement), so a watch
    that would is the tuner's bug, refused here before a key is written
    (``test_scale.py::test_a_second_watch_with_no_exchange_since_the_first_is_refused_and_no_stale_note_is_read``)."""
    scope = group.at_exchange(kind)
    base, _, seq = scope.rstrip("/").rpartition("/")
    with _opened_lock:
        try:
            opened = _opened.setdefault(group.store, {})
        except TypeError:  # (a store no weak reference can point at: not checked)
            return scope
        if opened.get((base, group.rank)) == seq:
            raise AutotuneError(f"triton_dist_tune: rank {group.rank} of group '{group.title}' opened a second "
                                f"progress watch ({kind}) with no exchange of the group since its first, at the same "
                                "scope of the store (a bug of the tuner: please report it)")
        opened[(base, group.rank)] = seq
    return scope


@dataclass
class _Seen:
    """What a waiting rank last saw of a unit: its beat counter and when the counter last moved."""

    count: int | None
    since: float


@dataclass
class RoundWatch:
    """The progress side channel of one piece of work on its exchange group (see the module docstring)."""

    group: Group
    #: what the units do together, for messages: ``"campaign NAME"``, ``"tuning [NAME key=...]"``
    title: str
    timeout: float
    #: what a unit is, and what it leaves, for messages: ``"unit"`` of a ``"campaign"``, ``"replica"`` of a
    #: ``"tuning"``
    unit: str = "unit"
    work: str = "campaign"
    #: what to do after an error, for messages
    rerun: str = "Rerun the campaign: the keys decided so far are in the cache"
    #: the store keys' prefix of this watch (None: no store, a plain deadline per round)
    scope: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    #: the thread doing the work (whose :func:`user_code` marks stop the beat)
    _owner: int = field(default_factory=threading.get_ident)
    #: a store client other than the job's, with a short timeout, for the beats' ``multi_get`` (:meth:`_counts`):
    #: the process's side client (:func:`~triton_dist_tune.group.clients.side_client`), asked for at each read of
    #: beats (a wait that outlasted a look) until it is made (until then the beats are read with adds, which never
    #: wait)
    _reader: Any = None
    #: the units that have closed the watch: the last of the group's to close deletes every unit's beat counter and
    #: the notes (:meth:`close`)
    _members: Members | None = None
    #: the watch over the beats on the side client: the store's host not answering
    #: (:mod:`~triton_dist_tune.group.store_silence`)
    _silence: Silence | None = None

    @classmethod
    def start(cls, group: Group, title: str, timeout: float, **words: str) -> RoundWatch:
        """The watch of some work on ``group``, beating already (every member calls this at the same point of the
        group's exchanges, and an exchange of the group separates two watches of one kind of work: their store keys
        are scoped by its exchange number; ``words``: ``unit``, ``work`` and ``rerun`` for its messages)."""
        watch = cls(group, title, timeout, **words)
        if group.size > 1 and hasattr(group, "at_exchange") and hasattr(group, "store"):
            # scoped by the group's exchange number now, which every member shares at this point (a count of the
            # watches this process started would not be: a rank that ever started one the others did not would
            # never meet them again); a campaign's watch and a tuning's inside it are told apart by their kinds
            watch.scope = _claimed(group, f"watch/{watch.work}/{watch.unit}")
            _open(watch, group.store)  # type: ignore[attr-defined]
            watch._thread = threading.Thread(target=watch._beating, name=f"tdt-beat-{title}", daemon=True)
            watch._thread.start()
        return watch

    @classmethod
    def of_tuning(cls, group: Group, label: str, timeout: float, unit: str) -> RoundWatch:
        """The watch of one tuning's units on ``group`` (``unit``: ``"replica"``, ``"rank"``), for messages that name
        the tuning and point to its journals."""
        return cls.start(group, f"tuning {label}", timeout, unit=unit, work="tuning",
                         rerun="Run the job again: the configs measured so far are in the journals")

    def __enter__(self) -> RoundWatch:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        """The work is over: a unit that leaves with an error says so first (the units waiting at a round end
        now, not ``exchange_timeout(T)`` later), then it stops beating (:meth:`close`)."""
        if exc is not None:
            self.leave(describe_error(exc))
        self.close()

    def arrive(self, round_: int, what: str, unwatched: float) -> float:
        """This unit has finished round ``round_``: mark it and wait for every unit's (:meth:`wait`). Returns the
        deadline of the round's exchange: one exchange's when watched (everyone is there), else ``unwatched``
        (the round's worst case, for a group without a store)."""
        self.finished(round_)
        self.wait(round_, what)
        return exchange_timeout(self.timeout) if self.watched else unwatched

    @property
    def watched(self) -> bool:
        """Whether the rounds are watched through the store (else a plain deadline per round)."""
        return self.scope is not None

    def _beat_key(self, unit: int) -> str:
        return f"{self.scope}beat/{unit}"

    def _done_key(self, round_: int, unit: int) -> str:
        return f"{self.scope}done/{round_}/{unit}"

    def _notes(self, kind: str, store: Any = None) -> NoteLog:
        """The units' notes of ``kind`` (``"left"``: the error each left the work with; ``"stuck"``: where each is
        stuck in user code), on ``store`` (default: the group's), read in one request (:class:`NoteLog`)."""
        return NoteLog(self.group.store if store is None else store,  # type: ignore[attr-defined]
                       f"{self.scope}{kind}/notes", lambda unit: f"{self.scope}{kind}/{unit}")

    def _beat(self) -> None:
        beat(self._silence, self.group.store, self._beat_key(self.group.rank))  # type: ignore[attr-defined]

    def _beating(self) -> None:
        every, limit = beat_interval(self.timeout), exchange_timeout(self.timeout)
        store, told = self.group.store, False  # type: ignore[attr-defined]
        while not PAUSES.wait(self._stop.wait, every):
            inside = _inside.get(self._owner)
            try:
                if inside is not None and ran(inside[1]) > limit:
                    if not told:  # stuck in user code: no beat, the others end their wait as for a dead unit
                        self._notes("stuck", store).write(self.group.rank, inside[0])
                        told = True
                    continue
                if told:  # it came back after all
                    self._notes("stuck", store).write(self.group.rank, None)
                    told = False
                self._beat()
            except Exception:  # the store is gone: the waits say so; a beat thread must never raise
                return

    def finished(self, round_: int) -> None:
        """This unit has finished its share of round ``round_``."""
        if self.watched:
            try:
                self.group.store.set(self._done_key(round_, self.group.rank), b"1")  # type: ignore[attr-defined]
            except Exception as exc:  # e.g. this unit comes back from user code after the others gave up on it
                raise GroupTimeoutError(self._store_lost(f"round {round_ + 1}", exc)) from exc

    def passed(self, round_: int) -> None:
        """Every unit has left round ``round_`` (its exchange ran): this unit's mark of it is no longer read."""
        if self.watched:
            try:
                self.group.store.delete_key(self._done_key(round_, self.group.rank))  # type: ignore[attr-defined]
            except Exception:
                pass

    def wait(self, round_: int, what: str) -> None:
        """Return when every unit has finished round ``round_``; raise :class:`GroupTimeoutError` (naming the
        units) when some unit shows no sign of life for ``exchange_timeout(T)`` seconds.

        Its store requests do not grow with the number of units: one ``check`` of the marks still missing (all at
        once) per poll (every 50 ms for the wait's first second, then less and less often, every 0.25 s from its
        third: :func:`~triton_dist_tune.group.store_wait.poll_pause`), each :func:`beat_interval` a look-up of the
        units still missing (a log of the round's arrivals, which this unit appends to at its first look, and a
        ``check`` of the marks it names: :class:`~triton_dist_tune.group.store_wait.Arrivals`), their beats (two
        requests), and one request for whether some unit left (:meth:`_left`; one more for every unit's note once
        one has). The log is a hint, the marks the truth: a unit is given up on only
        once its mark is read missing. Before, every unit's mark and its note of leaving were read one by one at
        each round: ``2 (N - 1)`` requests per rank and round, ``2 N (N - 1)`` at the store's server; then, while
        units were late, the look-up read the units still missing one by one: with half the group waiting for the
        other half, about ``N² / 4`` requests a second at the server."""
        if not self.watched:
            return
        store = self.group.store  # type: ignore[attr-defined]
        others = [u for u in range(self.group.size) if u != self.group.rank]
        marks = Arrivals({u: self._done_key(round_, u) for u in others}, store.check,
                         ArrivalLog(store, f"{self.scope}done/{round_}/log", self.group.rank))
        try:
            self._wait(what, marks)
        finally:
            marks.close()

    def _wait(self, what: str, marks: Arrivals) -> None:
        """:meth:`wait`'s loop, looking up the units still missing through ``marks``."""
        store, every = self.group.store, beat_interval(self.timeout)  # type: ignore[attr-defined]
        window, progress_s = exchange_timeout(self.timeout), current().progress_s
        others = list(marks.keys)
        started = time.monotonic()
        pace = Pace(started)  # (the polls' pauses grow with the whole wait, not each slice)
        seen = {u: _Seen(None, started) for u in others}
        reported = 0.0
        missing = others  # (the units whose mark this rank has not seen: a mark stays until every unit passed)
        while True:
            counts: dict[int, int] = {}
            try:
                if missing:
                    try:  # a unit tunes its keys for seconds: look without blocking (no store warnings on screen),
                        # less and less often as the wait goes on (its pace)
                        quiet_store_wait(store, [marks.keys[u] for u in missing], every, block=False, pace=pace)
                        missing = []
                    except StoreWaitTimeout:  # ``every`` s passed (a store that is gone raises another error)
                        pass
                if not missing:
                    # a unit that marked the round and then left (interrupted while it waited) misses the exchange
                    left = self._left(others)
                    if not left:
                        return
                else:
                    missing = marks.missing()  # (a hint: each decision below reads the marks of the units it names)
                    counts = self._counts(missing)
                    left = self._left(missing)
                    if left:  # (a unit that marked the round, then left: found once every unit marked it, above)
                        kept = marks.confirm(list(left))
                        left = {u: why for u, why in left.items() if u in kept}
                now = time.monotonic()
                for unit, count in counts.items():
                    if count != seen[unit].count:
                        seen[unit] = _Seen(count, now)
                lost = [u for u in missing if ran(seen[u].since, now) > window]  # (not a paused machine's seconds)
                lost = marks.confirm(lost) if lost and not left else lost  # (a unit that marked and ended is not)
            except Exception as exc:
                raise GroupTimeoutError(self._store_lost(what, exc)) from exc
            if left:  # a unit that left with an error (Ctrl-C, SIGTERM, an exception) said so: no wait for it
                raise RankFailedError(self._left_message(left, what, now - started))
            if lost:
                raise GroupTimeoutError(self._lost_message(lost, what, now - started, self._stuck(lost)))
            if now - started - reported >= progress_s:
                reported = now - started
                report_waiting(self.group.rank, self.group.title, what, missing,
                               getattr(self.group, "global_ranks", None), reported, window)

    def _counts(self, units: list[int]) -> dict[int, int]:
        """Each of ``units``' beat count now (:func:`~triton_dist_tune.group.beat.counts`), the ``multi_get`` through
        a client of this watch's own with a short timeout: on the job's client, a unit that closed its watch between
        the two requests left it waiting for the store's timeout (600 s under init_distributed's default), then this
        rank said it lost the store, which was alive."""
        store = self.group.store  # type: ignore[attr-defined]
        if self._reader is None:
            self._reader = side_client(store)
        return counts(store, self._reader, {u: self._beat_key(u) for u in units})

    def _store_lost(self, what: str, exc: Exception) -> str:
        members = getattr(self.group, "global_ranks", None)
        globals_ = f" (global ranks {list(members)})" if members else ""
        return (f"triton_dist_tune: rank {self.group.rank} of group '{self.group.title}'{globals_} lost the key-value "
                f"store at '{what}' ({type(exc).__name__}): the process hosting it ({store_host()}) {lost_reason()}")

    def leave(self, why: str) -> None:
        """This unit leaves the work with an error (``why``): say so in the store, so that the units waiting
        at a round end at once (:meth:`wait`) instead of after ``exchange_timeout(T)`` with no beat."""
        if self.watched:
            try:
                self._notes("left").write(self.group.rank, why)
            except Exception:  # the store is gone (the others have ended): nobody waits
                pass

    def _left(self, units: list[int]) -> dict[int, str]:
        """The error each of ``units`` said it left the work with (units that said nothing are left out): one
        request while no unit has left, one more once one has, whatever the number of units (before: one per unit
        of ``units``, at each look of a wait where some unit had left, and for every other unit at a round's end)."""
        notes = self._notes("left")
        if not units or not notes.noted():
            return {}
        return notes.read(units)

    def _left_message(self, left: dict[int, str], what: str, waited: float) -> str:
        ranks: Any = getattr(self.group, "global_ranks", None)
        units = "; ".join(f"{self.unit} {u}{f' (global rank {ranks[u]})' if ranks else ''} left the "
                          f"{self.work} with {why}" for u, why in left.items())
        return (f"triton_dist_tune: {self.title}: rank {self.group.rank} of group '{self.group.title}' "
                f"waited {waited:.1f} s at '{what}': {units}. {self.rerun}")

    def _stuck(self, units: list[int]) -> dict[int, str]:
        """Where each of ``units`` noted it is stuck in user code (units that noted nothing, or came back, are left
        out), in one request whatever their number (before: one per unit)."""
        try:
            return self._notes("stuck").read(units)
        except Exception:  # the store is gone: the units are reported as lost, without a place
            return {}

    def _lost_message(self, lost: list[int], what: str, waited: float, stuck: dict[int, str]) -> str:
        ranks: Any = getattr(self.group, "global_ranks", None)
        globals_ = f" (global ranks {[ranks[u] for u in lost]})" if ranks else ""
        window = exchange_timeout(self.timeout)
        places = "".join(f"; {self.unit} {u} has been stuck in {place} (user code the tuner gives no deadline) for "
                         f"more than {window:g} s: its process is alive but stays there, end it"
                         for u, place in stuck.items())
        return (f"triton_dist_tune: {self.title}: rank {self.group.rank} of group '{self.group.title}' "
                f"waited {waited:.1f} s at '{what}'; {self.unit}(s) {lost}{globals_} showed no sign of life for "
                f"{window:g} s (their process ended, was killed or is frozen, or is stuck in user code){places}. "
                f"{self.rerun}")

    def close(self) -> None:
        """Stop beating (the work is over, or this rank leaves it with an error); the last of the group's units to
        close its watch deletes the watch's keys that every open unit reads (:meth:`_keys_to_delete`: every unit's
        beat counter, the notes of where units were stuck, and those of why they left where every unit left with
        one; :class:`~triton_dist_tune.group.beat.Members`). Before, each
        unit deleted its own counter: one that left with an error while a unit still waited at a round held that
        unit's read of the beats for 2 s (:func:`~triton_dist_tune.group.beat.counts`); and the notes stayed (a
        withdrawn note is a line more in its log: a unit stuck in user code that came back left that key behind)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * beat_interval(self.timeout))
        if self._members is not None:
            try:  # (no beat watches the store now)
                with answering(self.group.store, self.timeout):  # type: ignore[attr-defined]
                    self._members.close(self._keys_to_delete)
            except Exception:  # the store is gone (the job is ending): nothing to tidy
                pass

    def _keys_to_delete(self) -> list[str]:
        """The watch's keys that the last of its group's units to close deletes (:meth:`close`): every unit's beat
        counter and the notes of why units left and of where they were stuck, which only a unit open with them reads
        (no unit opens a watch at this scope again: :func:`_claimed`). Before that was refused, a failed watch where
        some unit closed without an error kept its notes of leaving, for a unit whose counted close was of a watch of
        its own at this scope (a side path), which could still open the group's watch there."""
        units = list(range(self.group.size))
        return [*map(self._beat_key, units), *self._notes("left").keys(units), *self._notes("stuck").keys(units)]


def _open(watch: RoundWatch, store: Any) -> None:
    """Open ``watch`` in ``store``: its members' count, the watch over its beats, its first beat. These requests come
    before any watched beat: they run in a section (:func:`~triton_dist_tune.group.store_silence.answering`), so a
    frozen host ends them (before, a unit that opened its watch as the host froze waited without end:
    ``test_frozen_host.py``); a store lost there is the tuner's error."""
    try:
        with answering(store, watch.timeout):
            watch._members = Members(store, f"{watch.scope}closed", watch.group.size, watch.group.rank)
            watch._members.open()
            watch._silence = Silence(store, exchange_timeout(watch.timeout), watch._stop)
            watch._silence.start()
            watch._beat()
    except Exception as exc:
        watch._stop.set()
        raise GroupTimeoutError(watch._store_lost("open the progress watch", exc)) from exc
