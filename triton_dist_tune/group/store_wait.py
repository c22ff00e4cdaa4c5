"""A wait for keys of the job's key-value store that prints nothing while nothing is wrong
(:func:`quiet_store_wait`), on a client that no other request uses while it waits
(:func:`~triton_dist_tune.group.clients.waiter`), and the look-up of which ranks of a wait have set their key
(:class:`Arrivals`, through a log of the wait's arrivals: :class:`ArrivalLog`)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from .clients import waiter
from .store_peek import peek

#: a store wait that looks for its keys instead of blocking (:func:`quiet_store_wait`) looks this often during its
#: first :data:`FAST_S` seconds
POLL_S = 0.05
#: the seconds of a wait during which it looks every :data:`POLL_S`: where a healthy exchange or round ends (an
#: exchange's first second is one blocking wait anyway)
FAST_S = 1.0
#: past :data:`FAST_S`, the pause between two looks doubles every this many seconds of the wait...
DOUBLING_S = 0.5
#: ...up to this: a long wait (a straggler compiling, a slow unit) costs 4 looks a second per waiting rank, not 20,
#: and notices its keys at most this much later than before. Far below the slices between which a wait reads the
#: late ranks' signs of life (1 s at an exchange, ``beat_interval(T)`` at a progress watch): a pause never outlasts
#: its slice, so those reads, and the giving up on a dead rank, keep their times
POLL_CAP_S = 0.25


def poll_pause(waited: float) -> float:
    """The pause after a look made ``waited`` seconds into a wait: :data:`POLL_S` for its first :data:`FAST_S`
    seconds, then growing geometrically (doubling every :data:`DOUBLING_S` s) to :data:`POLL_CAP_S`, reached 1.16 s
    later (after about 12 looks). A wait of ``W`` s (``W`` > 2.2) looks about ``4 W + 23`` times, not ``20 W`` (an
    exchange's, whose first second blocks: ``4 W + 3``, not ``20 (W - 1)``)."""
    if waited <= FAST_S:
        return POLL_S
    return min(POLL_CAP_S, POLL_S * 2 ** ((waited - FAST_S) / DOUBLING_S))


@dataclass
class Pace:
    """The looks of one wait, which may run in slices (several calls of :func:`quiet_store_wait`, with the late
    ranks' signs of life read between them): when it began, and when it last looked. Each look comes
    :func:`poll_pause` after the one before, whichever slice it falls in (a slice does not start the pauses again,
    nor look at once after the look that ended the slice before)."""

    since: float = field(default_factory=time.monotonic)
    #: ``time.monotonic()`` at the last look (None: none yet)
    last: float | None = None

    def next_look(self) -> float:
        """When the next look is due (``time.monotonic()``): at once for the first."""
        return self.since if self.last is None else self.last + poll_pause(self.last - self.since)


class StoreWaitTimeout(TimeoutError):
    """A slice of :func:`quiet_store_wait` ran out before its keys were set."""


def quiet_store_wait(store: Any, keys: list[str], seconds: float, block: bool,
                     poll: Callable[[], None] | None = None, alone: bool = False, pace: Pace | None = None) -> None:
    """Return once every key of ``keys`` is in ``store``; raise :class:`StoreWaitTimeout` after ``seconds``.
    ``block``: one blocking ``wait`` (a key set meanwhile ends it at once: the first slice of a wait, where
    most exchanges end within milliseconds), on a client of ``store`` that no other request uses while it waits
    (:func:`~triton_dist_tune.group.clients.waiter`: none free yet, its connect under way, the wait looks as below
    until one is, then blocks for the rest of ``seconds``); else ``store.check`` at pauses that grow as the wait
    goes on (:func:`poll_pause`: every :data:`POLL_S` for its first :data:`FAST_S` s, then less and less often, at
    least every :data:`POLL_CAP_S`), the last look at the deadline (or less than :data:`POLL_S` before it: a slice
    that begins just after a look does not look again at once); ``pace``: the :class:`Pace` of the whole wait,
    where this call is a slice of a longer one (default: a wait that begins now). A blocking wait that runs out
    makes torch's store client print two ``waitForInput ... likely a timeout`` warnings on the rank's screen,
    although nothing is wrong: a wait that outlasts its first slice (a peer compiling, a campaign's unit tuning a
    key alone) goes on quietly. A store that is gone raises at once either way (a blocking wait without a client
    yet: at its first look; before, a thread's first blocking wait waited up to half its seconds for its client's
    connect, which a gone host makes fail only after the store's timeout, twice).
    ``poll``: called before each look (not with ``block``). ``alone``: no other thread uses ``store`` (the
    attempt's naming in ``init_distributed``, before any group exists): a blocking wait uses ``store`` itself, and
    the process keeps no connection for it."""
    started = time.monotonic()
    if block and alone:
        store.wait(keys, timedelta(seconds=seconds))
        return
    deadline, pace = started + seconds, Pace(started) if pace is None else pace
    loan = waiter(store) if block else None
    broken = False
    try:
        while True:
            client = loan.take() if loan is not None else None
            if client is not None and deadline - time.monotonic() >= POLL_S:
                try:
                    client.wait(keys, timedelta(seconds=deadline - time.monotonic()))
                except Exception as exc:  # (a lost connection is not lent again; a timeout's client is)
                    broken = any(c.__name__ == "DistNetworkError" for c in type(exc).__mro__)
                    raise
                return
            due, now = pace.next_look(), time.monotonic()
            if due > deadline and pace.last is not None and deadline - pace.last < POLL_S:  # (looked just before)
                time.sleep(max(0.0, deadline - now))
                raise StoreWaitTimeout(f"store keys not set within {seconds:.3f} s")
            if min(due, deadline) > now:
                time.sleep(min(due, deadline) - now)
            if poll is not None:
                poll()
            pace.last = time.monotonic()
            if store.check(keys):
                return
            if pace.last >= deadline:
                raise StoreWaitTimeout(f"store keys not set within {seconds:.3f} s")
    finally:
        if loan is not None:
            loan.close(broken)


class Lookup(Protocol):
    """A waiting rank's look-up of which ranks have not arrived: :class:`Arrivals`, or a known list (:class:`Known`)."""

    def missing(self) -> list[int]:
        """The ranks not seen arrived at this look (a hint: see :class:`Arrivals`)."""
        ...

    def confirm(self, ranks: list[int]) -> list[int]:
        """Of ``ranks``, those whose key is not set now, read key by key: what a decision about them reads."""
        ...

    def close(self, left: bool = False) -> None:
        """The wait is over: tidy what the look-ups wrote. ``left``: it ended with this rank leaving a wait the others
        may still be at (a timeout, an error, an interrupt), whose log stays for them (:class:`ArrivalLog`)."""
        ...


class Known:
    """A look-up whose answer is known: ``ranks`` (a rank other than 0 naming an attempt waits for rank 0)."""

    def __init__(self, ranks: list[int]) -> None:
        self.ranks = ranks

    def missing(self) -> list[int]:
        return list(self.ranks)

    def confirm(self, ranks: list[int]) -> list[int]:
        return list(ranks)

    def close(self, left: bool = False) -> None:
        pass


@dataclass(frozen=True)
class ArrivalLog:
    """The log of a wait's arrivals: one key of ``store`` per wait (an exchange's, a round's), to which each rank
    that waits there appends ``"<me>,"`` at its first look (:class:`Arrivals`), after it set its own key: a rank
    waits only once it has arrived, and every rank that arrived waits while one is missing. ``tidy``: each rank that
    appended deletes the key when its wait ends (a wait ends for all once every rank arrived, and the last request
    of each rank that appended is its delete: the key does not outlive the wait); else its owner keeps it (an
    attempt's naming keeps its keys).

    A rank that leaves a wait the others may still be at (an exchange's wait that timed out, gave up on a silent
    rank, or was interrupted: ``close(left=True)``) keeps it: the ranks that come later read the entries of those
    still waiting there, group rank 0's among them, whose arrival nothing else records (it gathers the exchange and
    sets no key to be missed). Before, such a rank deleted the log, and a rank that came more than a slice later
    named a rank 0 waiting there all along as "never arrived". Such a log stays after an exchange that failed, as
    the messages of the ranks that gave up do; a rank whose wait ends with the exchange (or with the exchange
    undone on every rank) deletes it, so a healthy exchange leaves no key and makes no request more."""

    store: Any
    key: str
    me: int
    tidy: bool = True


class Arrivals:
    """Which ranks of a wait have set their key, looked up once per slice of the wait, remembering what the looks
    before found.

    With an :class:`ArrivalLog` (a store with ``append``: torch's ``TCPStore``, ``FileStore``, ``HashStore``,
    ``PrefixStore``) a look costs a few requests whatever the group's size: the rank appends its own id to the log at
    its first look, then each look reads the log (one request that never waits,
    :func:`~triton_dist_tune.group.store_peek.peek`) and confirms the ranks it names, with those found before, in one
    ``check`` of their keys. The key stays the truth and the log a hint: a rank the log names whose key is not set (a
    rank that took its message back: its wait ended on a late rank's note; an entry another process wrote) fails that
    check, and the look then checks every rank's key one by one, and no longer trusts those entries (unless ``done``
    says the wait's own keys are set since: the ranks deleted their keys after the exchange completed, between the log's
    read and the check; the look then names no rank missing, the wait ends at its next poll); a rank that set its key
    but has not appended yet (it arrived within the last look's slice, or ended between its two requests) is missing
    from the log: :meth:`missing` names it, and a decision about it (the ranks a wait gives up on) first reads its key
    (:meth:`confirm`). Before, the first look checked every rank's key one by one (``N - 1`` requests per waiting rank)
    and each later one every rank still missing: with half the group waiting for the other half, about ``N² / 4``
    requests a second at the store's server.

    Without a log (a store without ``append``: a Python ``Store`` of the user's) a look checks the keys one by one as
    before: the first every rank's, each later one those found before in one request and the ranks still missing
    one by one; where a confirmed key is gone, every rank is looked at again, as in a first look."""

    def __init__(self, keys: dict[int, str], check: Callable[[list[str]], bool], log: ArrivalLog | None = None,
                 done: Callable[[], bool] | None = None) -> None:
        #: rank -> its key; ``check(keys)``: whether every key of ``keys`` is set (one store request); ``done()``:
        #: whether the wait's own keys are set (one request), asked only where the keys contradict the log
        self.keys, self._check, self._log, self._done = keys, check, log, done
        #: the ranks whose key the looks found (confirmed by key, at the last look or by :meth:`confirm`)
        self._arrived: set[int] = set()
        #: per rank: its entries in the log that the keys contradicted (not trusted again)
        self._stale: Counter[int] = Counter()
        self._announced = self._appended = False
        #: every rank a look found in the log, keyed or not (None: no look read the log yet), and when the last look
        #: that found a log read it (``time.monotonic()``), for :meth:`Arrivals.logged`
        self._logged: set[int] | None = None
        self._read_at = 0.0

    def missing(self) -> list[int]:
        """The ranks not seen arrived, in the order of :attr:`keys`: with a log, the ranks it does not name and no
        look found (a hint: a rank that arrived since its last look may be among them); else those whose key is not
        set now."""
        entries = self._entries()
        believed = set(self._arrived)
        if entries is not None:
            believed |= {r for r, n in entries.items() if n > self._stale[r]}
        one_by_one = entries is None
        if believed and not self._check([self.keys[r] for r in self.keys if r in believed]):
            if self._done is not None and self._done():  # (completed since the log was read: its ranks, having
                self._arrived = set(self.keys)  # read the result, deleted their keys; the wait ends at its poll)
                return []
            believed, one_by_one = set(), True  # (a key believed set is not: every rank is looked at, key by key)
        if one_by_one:
            believed |= {r for r in self.keys if r not in believed and self._check([self.keys[r]])}
            if entries is not None:  # the log's entries that the keys contradict are not trusted again (a rank that
                # arrives again appends again: its entries then outnumber those)
                self._stale = Counter({r: n for r, n in entries.items() if r not in believed})
        self._arrived = believed
        return [r for r in self.keys if r not in believed]

    def confirm(self, ranks: list[int]) -> list[int]:
        """Of ``ranks``, those whose key is not set now (a request each; a rank without a key stays): what a
        decision about them (giving up on them, naming them in an error) reads, never the log alone."""
        found = {r for r in ranks if r in self.keys and self._check([self.keys[r]])}
        self._arrived |= found
        return [r for r in ranks if r not in found]

    def logged(self, rank: int, since: float = 0.0) -> bool | None:
        """Whether some look of this wait found ``rank`` in the log (a rank without a key too: group rank 0, which
        gathers an exchange, appends at its first look as every waiting rank does); None where no look read one at
        ``since`` (``time.monotonic()``) or later (no log, a store without ``append``, a wait too short for a look,
        or one whose looks all came before a rank that arrived with it could have logged itself: a rank appends
        at its first look, a slice into its wait, so a look made sooner than that finds no rank that came at the
        same time)."""
        return None if self._logged is None or self._read_at < since else rank in self._logged

    def close(self, left: bool = False) -> None:
        """The wait is over: delete the log where this rank appended to it, unless it ``left`` a wait the others may
        still be at (see :class:`ArrivalLog`)."""
        log = self._log
        if self._appended and log is not None and log.tidy and not left:
            try:
                log.store.delete_key(log.key)
            except Exception:  # the store is gone: nothing to tidy
                pass

    def _entries(self) -> Counter[int] | None:
        """The log's entries by rank of :attr:`keys` (after this rank appended its own, at its first look), or
        None where there is no log to read: none given, or a store without ``append``. A log deleted since this
        rank appended (a rank whose wait ended tidied it: every rank has arrived, or the exchange was undone; a
        round's, also a unit that left it with an error) names nobody: the look keeps what the looks before found,
        and checks no key one by one (the wait ends at its next poll; before, such a look, between rank 0's delete
        and its result, checked every rank still missing one by one)."""
        log = self._log
        if log is None:
            return None
        try:
            if not self._announced:
                self._announced = True
                log.store.append(log.key, f"{log.me},")
                self._appended = True
            value = peek(log.store, log.key)
        except Exception:  # no append (a Python store), or the store is gone (its checks say so): keys one by one
            self._log = None
            return None
        if value is None:
            return Counter()
        ids = [int(t) for t in value.decode("ascii", errors="replace").split(",") if t.isdigit() and len(t) < 10]
        self._logged, self._read_at = (self._logged or set()).union(ids), time.monotonic()
        return Counter(r for r in ids if r in self.keys)


class SeenFrom:
    """The look-up of a rank other than 0 waiting at an exchange for its result: its peers' messages (``peers``),
    then rank 0, which has no message: rank 0 stays missing until its result is written."""

    def __init__(self, peers: Arrivals) -> None:
        self.peers = peers

    def missing(self) -> list[int]:
        """The ranks whose message this rank has not seen in the store, or rank 0 when it has seen every other
        rank's (then rank 0 never came to combine them)."""
        return self.peers.missing() or [0]

    def confirm(self, ranks: list[int]) -> list[int]:
        kept = set(self.peers.confirm([r for r in ranks if r != 0]))
        return [r for r in ranks if r == 0 or r in kept]

    def close(self, left: bool = False) -> None:
        self.peers.close(left)


def keyed(lookup: Lookup, late: list[int], named: Collection[int]) -> list[int]:
    """Of the ranks ``late`` (a look's list: a hint), those in ``named`` whose key is still not set, read key by key
    (:meth:`Lookup.confirm`): what a decision about them reads. No request where ``named`` is empty."""
    return lookup.confirm([r for r in late if r in named]) if named else []


def with_rank_0(lookup: Lookup, late: list[int], since: float) -> list[int]:
    """The ranks ``late`` that never arrived at a wait for an exchange's result, with group rank 0 first where it
    shows no sign of having waited there either: it writes no message, and logs its arrival at its first look, a
    slice into its wait, so only a look of the log made at ``since`` (two slices into this wait) or later can tell
    (:meth:`Arrivals.logged`); before, a wait shorter than that named a rank 0 that had come first."""
    if 0 in late or not isinstance(lookup, SeenFrom) or lookup.peers.logged(0, since) is not False:
        return late
    return [0, *late]
