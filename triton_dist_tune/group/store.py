"""The channel of a torch.distributed group: exchanges through the job's key-value store."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .. import settings
from ..errors import AutotuneError, BadInputError, GroupTimeoutError, RankFailedError
from . import codec, departed, epoch, exits, names, passover, store_silence
from .channel import (
    Board,
    ExchangeError,
    Failed,
    PassedOver,
    RankEnded,
    default_timeout,
    ended_message,
    not_a_member,
)
from .leaving import LeavingChannel
from .messages import Message, combine_payloads, pack, unpack
from .note import NOTE_CHARS, Note, Waiter
from .store_board import StoreBoard
from .store_parts import arrivals, tidy, write_part
from .store_texts import (
    ended_message_of,
    gone_message,
    late_message,
    lost_store_message,
    silent_message,
    unresolved_message,
    waited_opening,
    withdrawn_notes,
)
from .store_wait import Lookup, Pace, SeenFrom, keyed, quiet_store_wait, with_rank_0
from .unresolved import NOTES
from .waiting import report_waiting, wait_in_slices

log = logging.getLogger("triton_dist_tune")

#: the longest store wait of a waiting rank: between two it reads the failure board and the late ranks' beats (while
#: a board is open) and their notes (:mod:`.unresolved`), and Python runs its signal handlers (Ctrl-C, a launcher's
#: SIGTERM), which cannot run while the store's C++ wait blocks
BOARD_SLICE_S = 1.0

#: group identity -> how many channels this process made for it (a group destroyed and created again gets a new one)
_incarnations: dict[tuple, int] = {}


def namespace(name: str, global_ranks: Sequence[int], attempt: object, incarnation: int = 1) -> str:
    """The store key prefix of a group: its name, a fingerprint of its global ranks, the restart attempt and the
    group's incarnation in this process (a group destroyed and created again talks under a new prefix).

    Two groups share a prefix only if they have the same name *and* the same ranks in the same attempt, so groups
    that two ranks created in different orders (and so named alike) never read each other's keys.
    """
    return f"tdt/{attempt}/{name}/{names.fingerprint(global_ranks)}/{incarnation}/"


class StoreGroup(LeavingChannel):
    """A torch.distributed process group, talked to through the job's key-value store.

    One exchange (sequence number ``s``) is a gather to group rank 0 and a broadcast of one combined result:

    - rank ``r > 0`` sets ``s/r`` to its message, waits for ``s/all``, reads it and deletes ``s/r``;
    - rank 0 waits for every ``s/r``, reads them in one request, sets ``s/all`` to ``fn`` of the list and deletes
      ``s-1/all`` (every rank has read it: each has arrived at ``s``).

    Every message is plain data (:mod:`.codec`: JSON, never pickle): the store has no authentication, and what
    an outsider writes under these keys is refused, never run. Every rank makes four store requests per exchange
    whatever the group size, and the server moves each message once in (and back to its writer: a key is written
    with a compare-and-set expecting it absent, whose reply is the value, so that a key another process wrote first
    is found; :meth:`_write_new`) and the result once out to each rank: linear in the group size when the result
    does not grow with it."""

    def __init__(self, pg: Any, option: str = "autotune_pg") -> None:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        super().__init__()
        self.rank = dist.get_rank(pg)
        if self.rank < 0:
            raise BadInputError(not_a_member(option))
        self.size = dist.get_world_size(pg)
        self.global_ranks = list(dist.get_process_group_ranks(pg))
        self.member_ranks = tuple(self.global_ranks)
        self.name = c10d._get_process_group_name(pg) or "default"
        self.identity = ("torch", self.name, tuple(self.global_ranks))
        world = c10d._get_process_group_name(dist.group.WORLD) if dist.group.WORLD is not None else None
        self.title = "default" if self.name == world else f"ranks {self.global_ranks}"
        # a group destroyed and created again (same name and ranks, maybe the same store) talks under a new prefix:
        # every member creates the channels of a group in the same order, so the count agrees
        incarnation = self._incarnation = _incarnations[self.identity] = _incarnations.get(self.identity, 0) + 1
        #: the group's namespace in the store; None until its first exchange names the attempt (:meth:`_named`)
        self._prefix: str | None = None
        if not epoch.named_by_each_group():  # agreed by init_distributed, else the launcher's restart count
            self._prefix = namespace(self.name, self.global_ranks, epoch.current(), incarnation)
        #: the exchanges begun; the last whose part of this rank's is written (its message; rank 0: the result), and
        #: its step
        self._seq, self._sent, self._what = 0, 0, ""
        #: the exchange whose key holds this rank's own notice of a key written by another process (0: none)
        self._notice = 0
        self._lock = threading.Lock()
        self._board: StoreBoard | None = None
        #: whether an exchange of this channel has completed (before: its ranks may know the group by other names)
        self._met = False

    @property
    def store(self) -> Any:
        """The job's key-value store, fetched on each use and never kept: it must not outlive the process group
        (a store kept here would keep rank 0's store server thread alive until the interpreter's exit)."""
        return _job_store()

    def key(self, name: str) -> str:
        """A key of this group's namespace in the store, for a protocol beside the exchanges (``name`` must not
        start with a digit: those are the exchanges')."""
        return f"{self._named()}{name}"

    def _key(self, seq: int, rank: int | str) -> str:
        return f"{self._prefix}{seq}/{rank}"

    def _named(self, timeout: float | None = None) -> str:
        """The group's namespace; where each group names the attempt (:func:`.epoch.named_by_each_group`), the first
        call names it among the group's ranks (:class:`.epoch.Naming`), waiting as an exchange does."""
        if self._prefix is not None:
            return self._prefix
        naming = epoch.Naming(self.store, namespace(self.name, self.global_ranks, "-", self._incarnation) + "name/",
                              self.rank, self.size)
        what, started, timeout = "name this attempt in the group", time.monotonic(), timeout or default_timeout()
        with store_silence.answering(self.store, store_silence.tuner_timeout()):
            name = self._request(lambda: epoch.name_among(
                naming, lambda keys, lookup, poll: self._wait(keys, what, timeout, lookup, poll)), what, started)
        self._prefix = namespace(self.name, self.global_ranks, name, self._incarnation)
        return self._prefix

    def combine(self, obj: Any, what: str, fn: Callable[[list[Any]], Any], timeout: float | None = None) -> Any:
        timeout = default_timeout() if timeout is None else timeout
        with store_silence.answering(self.store, store_silence.tuner_timeout()):  # (a frozen host: no beat tells)
            self._named(timeout)
            self.read_unread()
            with self._lock:
                back, self._back = self._back, None
            if back is not None and not back.came:  # this rank left its last call: its peers past that turn
                self.come_back(back, what, timeout)  # need not raise
            self.look_at_rank_0_left(what, timeout)
            while True:  # (an exchange void on every rank is made again at the next number: :meth:`leave`)
                with self._lock:
                    self._seq += 1
                    seq, self._what, self._awaited = self._seq, what, None
                try:
                    result = (self._gather_and_send(seq, obj, fn, what, timeout) if self.rank == 0 else
                              self._send_and_receive(seq, obj, what, timeout))
                except PassedOver as exc:
                    log.debug("triton_dist_tune: exchange %d of group '%s' is void: %s", seq, self.title, exc)
                    continue
                # every rank is past the exchange this rank's "left" record lies at: deleted (group rank 0's is that
                # exchange's result, deleted by its gather two on, once every peer wrote a message after it: a peer
                # back in time through another step reads it until then, :meth:`look_at_rank_0_left`)
                if back is not None and self.rank != 0:
                    tidy(self, back.key)
                self._met = True
                return result

    def _gather_and_send(self, seq: int, obj: Any, fn: Callable[[list[Any]], Any], what: str,
                         timeout: float) -> Any:
        keys = [self._key(seq, r) for r in range(1, self.size)]
        started = time.monotonic()
        with _undone_on_a_note(self, seq, None):
            self._wait(keys, what, timeout, arrivals(self, seq, range(1, self.size)))
        payloads = self._request(lambda: self.store.multi_get(keys), what, started)
        until = time.monotonic() + passover.grace(timeout)  # (one grace for all the records the exchange reads)
        payloads = [passover.settle(self, keys[r - 1], bytes(payloads[r - 1]), r, until) for r in range(1, self.size)]
        payload = combine_payloads(fn, [pack(obj, 0, what), *payloads], what)
        write_part(self, seq, "all", lambda: payload, what, started, timeout)
        # the result two exchanges back: every rank has read it, as it wrote its message of the last exchange after
        # reading it. Not the last one: a message an outsider pre-wrote for a rank lets rank 0 through an exchange
        # that rank has not reached, and that rank must still find the last result to reach the forged key and
        # tell everyone (at the exchange after, which rank 0 cannot pass without it)
        if seq > 2:
            tidy(self, self._key(seq - 2, "all"))
        return unpack(payload, what, 0, self.turn_began())

    def _send_and_receive(self, seq: int, obj: Any, what: str, timeout: float) -> Any:
        started = time.monotonic()
        write_part(self, seq, self.rank, lambda: pack(obj, self.rank, what), what, started, timeout)
        return self._receive(seq, what, timeout, started)

    def _receive(self, seq: int, what: str, timeout: float, started: float, again: bool = False) -> Any:
        """The result of exchange ``seq``, this rank's message written (``again``: read at a later call, after an
        interruption ended the wait: a "left" record of rank 0 there is raised as such, never settled)."""
        mine = self._key(seq, self.rank)
        with _undone_on_a_note(self, seq, mine):
            payload = self._result_of(seq, what, timeout, started)
        if not again:
            payload = passover.settle(self, self._key(seq, "all"), payload, 0,
                                      time.monotonic() + passover.grace(timeout))
        tidy(self, mine)  # rank 0 has read it: it wrote the result
        return unpack(payload, what, self.rank, None if again else self.turn_began())

    def _result_of(self, seq: int, what: str, timeout: float, started: float) -> bytes:
        combined = self._key(seq, "all")
        self._wait([combined], what, timeout, SeenFrom(arrivals(
            self, seq, [r for r in range(1, self.size) if r != self.rank], [combined])))
        return bytes(self._request(lambda: self.store.get(combined), what, started))

    def exchanges(self) -> int:
        return self._seq

    def _request(self, request: Callable[[], Any], what: str, started: float) -> Any:
        """One store request of an exchange: a transport error (the store's host ended: rank 0 of a job started
        without torchrun, after a peer's end) is the tuner's :class:`~triton_dist_tune.errors.GroupTimeoutError`
        saying so, never a raw ``DistNetworkError``; the tuner's own errors pass through."""
        try:
            return request()
        except (AutotuneError, BadInputError):
            raise
        except Exception as exc:
            raise GroupTimeoutError(lost_store_message(self, what, time.monotonic() - started, exc)) from exc

    def _write_new(self, seq: int, slot: int | str, payload: bytes, what: str) -> None:
        """Write ``payload`` under the key of ``slot`` (this rank's, or ``all``) at exchange ``seq``, which no one
        may have written before: a compare-and-set that expects it absent. A key found written already was written
        by another process (the store has no authentication), and the ranks that read it may have taken it for
        this rank's: this rank raises :class:`ExchangeError` saying so, after writing the same error as its message
        of the next exchange, so that every other rank raises it at its next exchange (which reads that key)."""
        key = self._key(seq, slot)
        if seq == self._notice:  # this rank left an error here itself (below): it writes over it
            self.store.set(key, payload)
            return
        found = bytes(self.store.compare_set(key, b"", payload))
        if found == bytes(payload):
            return
        message = (f"triton_dist_tune: group rank {self.rank} of group '{self.title}' found the key of its message at "
                   f"'{what}' ({key}) already written when it came to write it: a process other than the tuner wrote "
                   "under the tuner's keys of the key-value store (it has no authentication), and a rank may have "
                   "read that value as this rank's. The tuning stops on every rank (at their next exchange): "
                   "nothing read from the store is trusted past this point")
        try:
            self._notice = seq + 1
            self.store.set(self._key(seq + 1, slot), codec.encode(Message("", Failed(message))))
        finally:
            raise ExchangeError(message)

    def at_exchange(self, name: str) -> str:
        """A key prefix of this group's namespace for a protocol beside the exchanges (a failure board, a progress
        watch), scoped to the exchange sequence number now: the same on every rank that asks at the same point of
        the sequence, whatever else each rank did before (``name`` must not start with a digit)."""
        prefix = self._named()
        with self._lock:
            return f"{prefix}{name}/{self._seq}/"

    def board(self, window: float | None = None) -> Board:
        """A failure board under this group's prefix, scoped to the exchange sequence number now (the same on
        every rank: each calls this at the same point of the sequence), beating while it is open when ``window``
        is given (:class:`StoreBoard`)."""
        scope, started = self.at_exchange("board"), time.monotonic()  # (its first requests come before any beat)
        with store_silence.answering(self.store, store_silence.tuner_timeout()), self._lock:
            board = self._board = self._request(lambda: StoreBoard(self, scope, window, self._board),
                                                "open a failure board", started)
        return board

    def board_closed(self, board: StoreBoard) -> None:
        """``board`` has closed: the group's board is the one it ran inside again."""
        with self._lock:
            if self._board is board:
                self._board = board.outer
            self._told = board.posted

    def _wait(self, keys: list[str], what: str, timeout: float, lookup: Lookup,
              poll: Callable[[], None] | None = None) -> None:
        """Wait until every key of ``keys`` is set, reading the signs of the ranks ``lookup`` names missing between
        slices (a hint: a decision about a rank reads its key first, :func:`.store_wait.keyed`; their ends from 2 s
        on, :mod:`.departed`; at the channel's first exchange, whether they wait at another group of the same
        ranks, :mod:`.names`); ``poll``: called before each look (the keys are then polled, not blocked on)."""
        started = time.monotonic()
        board, every = self._board, settings.current().progress_s
        reported = [0.0]
        where = Waiter(self.name, tuple(self.global_ranks), self.global_ranks[self.rank], time.time())
        rank_0_by = started + 2 * min(every, BOARD_SLICE_S)  # (a look of the log from then on can tell: with_rank_0)
        departures = departed.Departures(lookup, self.global_ranks, self.rank)  # (from 2 s on: ranks known gone)
        named = names.Names(self.name, self.global_ranks, self.rank, not self._met, keys,  # (ranks waiting elsewhere)
                            self._all_arrived)

        def opening() -> str:
            return waited_opening(self, what, f"{time.monotonic() - started:.1f}")

        def between_slices(waited: float) -> None:
            late = lookup.missing()  # one look per slice (:class:`.store_wait.Arrivals`): each read below reads it
            if board is not None:  # ranks that ended to leave a collective never arrive: stop waiting for them
                reports = board.read()
                message = ended_message(reports, keyed(lookup, late, {r.rank for r in reports if r.ended}))
                if message is not None:
                    raise RankEnded(message + exits.gone_besides(reports, late, self.global_ranks))
                silent = keyed(lookup, late, board.silent(late))
                if silent:  # their processes ended, were killed or froze: they never arrive either
                    quiet, globals_ = board.quiet_s(silent), [self.global_ranks[r] for r in silent]
                    exits.given_up(globals_, f"its beat stood still for {quiet:.1f} s at '{what}'")  # (for the host)
                    raise GroupTimeoutError(silent_message(opening(), silent, globals_, board.window or 0.0, quiet))
            notes, ended = _keyed_notes(lookup, late, self.global_ranks,
                                        *NOTES.look(self.store, [self.global_ranks[r] for r in late], where))
            if notes:  # a late rank passed a wrong group option: it will not come, nor will this one now
                said = {rank: f"{note.kind}: {note.text[:NOTE_CHARS]}" for rank, note in notes.items()}
                message = unresolved_message(opening(), said)
                NOTES.pass_on(notes, message, where)  # the ranks waiting for this one learn it in turn
                raise BadInputError(message)
            # a late rank's process ended: it never comes (unless the keys came before it left: the next slice returns)
            if ended and not self._all_arrived(keys):
                raise GroupTimeoutError(ended_message_of(opening(), ended))
            gone = departures.look(late, waited)  # a late rank counted out, or its process here ended: never comes
            if gone and not self._all_arrived(keys):
                raise GroupTimeoutError(gone_message(opening(), gone, late, self.global_ranks, timeout))
            elsewhere = named.look(late, waited)  # a late rank waits at another group of these ranks: never comes
            elsewhere = {r: elsewhere[r] for r in lookup.confirm(list(elsewhere))} if elsewhere else {}
            if elsewhere and not self._all_arrived(keys):
                named.leave()
                raise BadInputError(names.named_otherwise_message(opening(), self.name, self.global_ranks, elsewhere))
            if waited < 0.999 * timeout and waited - reported[0] >= 0.999 * every:  # (at the deadline: its error)
                reported[0] = waited
                report_waiting(self.rank, self.title, what, with_rank_0(lookup, late, rank_0_by), self.global_ranks,
                               waited, timeout)

        slices, pace = itertools.count(), Pace(started)

        def wait(seconds: float) -> None:  # the first slice blocks, the others poll (no store warnings), their
            # looks paced by the whole wait (less and less often), not each slice
            quiet_store_wait(self.store, keys, seconds, block=next(slices) == 0 and poll is None, poll=poll,
                             pace=pace)

        left = True  # (the wait ends with this rank leaving it while others may still wait there)
        try:
            wait_in_slices(wait, timeout, between_slices, every=min(every, BOARD_SLICE_S))
            left = False
        except RankEnded as exc:
            raise RankFailedError(str(exc)) from None
        except (BadInputError, GroupTimeoutError) as exc:  # (a BadInputError undoes the exchange on every rank:
            left = not isinstance(exc, BadInputError)  # :func:`_undone_on_a_note`)
            raise
        except Exception as exc:  # the store raises DistStoreError (or RuntimeError on older torch) on timeout
            waited = time.monotonic() - started
            if waited < 0.9 * timeout or store_silence.was_cut():  # not a timeout: the store itself went away
                message = lost_store_message(self, what, waited, exc)
            else:
                late = with_rank_0(lookup, lookup.confirm(lookup.missing()), rank_0_by)
                message = late_message(waited_opening(self, what, f"{timeout:g}"), late, self.global_ranks,
                                       None if self.title == "default" or self._seq > 1 else self.name) \
                    + withdrawn_notes(self.store, self.global_ranks, late, where)
            raise GroupTimeoutError(message) from exc
        finally:
            named.close()
            lookup.close(left)

    def _all_arrived(self, keys: list[str]) -> bool:
        """Whether every key of ``keys`` is in the store (one request; False where the store cannot say)."""
        try:
            return self.store.check(keys)
        except Exception:
            return False


@contextmanager
def _undone_on_a_note(group: StoreGroup, seq: int, mine: str | None) -> Iterator[None]:
    """Undo exchange ``seq`` when its wait raises :class:`BadInputError` because a late rank will not come (its
    note: :mod:`.unresolved`): that rank never entered it, so no rank can complete it; this rank takes back its
    message (``mine``) and its sequence number, and is in step with that rank when both call again."""
    try:
        yield
    except BadInputError:
        if mine is not None:
            try:
                group.store.delete_key(mine)
            except Exception as exc:  # the store is gone: nobody calls again
                log.debug("triton_dist_tune: could not take back %s (%s)", mine, exc)
        with group._lock:
            if group._seq == seq:
                group._seq = seq - 1
        raise


def _keyed_notes(lookup: Lookup, late: list[int], global_ranks: Sequence[int], notes: dict[int, Note],
                 ended: dict[int, Note]) -> tuple[dict[int, Note], dict[int, Note]]:
    """The notes a look found of the ranks ``late`` (by global rank: those that stop the wait, and those of ranks
    that ended), less those of ranks whose message is in the store after all (:func:`.store_wait.keyed`)."""
    noted = {r for r in late if global_ranks[r] in {**notes, **ended}}
    still = {global_ranks[r] for r in keyed(lookup, late, noted)}
    return ({g: n for g, n in notes.items() if g in still}, {g: n for g, n in ended.items() if g in still})


def _job_store() -> Any:
    """The default group's key-value store (raises :class:`BadInputError` once the process group is destroyed)."""
    from torch.distributed import distributed_c10d as c10d

    try:
        return c10d._get_default_store()
    except (RuntimeError, ValueError) as exc:
        raise BadInputError(f"triton_dist_tune: the process group is gone ({exc}): the tuner needs it to exchange "
                            "with the other ranks") from exc
