"""A rank of a torch group whose call an interruption ended (Ctrl-C, ``sys.exit``, a cancelled task): what it leaves
for its peers, and the result of its last exchange that it reads at its next call.

- :meth:`LeavingChannel.leave`: the rank writes a "left" record as its part of the next exchange it has not
  written, so that its peers never wait for it there (:mod:`.passover` settles the record where they are past the
  turn it left).
- :meth:`~LeavingChannel.keep_unread` and :meth:`~LeavingChannel.read_unread`: an interruption inside the wait for
  the result of an exchange whose message the rank wrote leaves that result unread on this rank alone; its peers may
  have it (the exchange completes without this rank: it needs only its message). Where that exchange ends a tuning
  (every rank keeps the decision it agrees on), the rank reads the result at its next call on the group, before
  anything else, and keeps the decision as its peers did. Before, it tuned the key again at its next call of it,
  against its peers' next call: both raised ``MismatchError``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from ..errors import AutotuneError, BadInputError, GroupTimeoutError, RankFailedError
from . import codec, passover, store_silence
from .channel import STEP_QUOTE, Failed, FailureReport, Group, default_timeout
from .messages import Message, step_print
from .store_peek import peek
from .store_texts import left_message

log = logging.getLogger("triton_dist_tune")

#: the channels of this process that hold a result to read at their rank's next call
#: (:meth:`LeavingChannel.keep_unread`): while one does, a decided key's call on that channel's group
#: (:func:`unread_on`) leaves its hot path for the slow one, which reads it (``tune.py``; a decided call on another
#: group stays on the hot path: the slow one costs about 50 to 100 us a call, against under 1 us, measured by the
#: closing review R87, and would last for good where no call on that channel's group comes)
UNREAD: weakref.WeakSet[LeavingChannel] = weakref.WeakSet()


def unread_on(identities: tuple | None) -> bool:
    """Whether a channel in :data:`UNREAD` is one of the groups ``identities`` names (None: the job's default
    group, whose decisions a call without ``autotune_pg`` serves). A loop over the few such channels: called only
    while there is one."""
    return any(channel.identity in identities if identities is not None else channel.title == "default"
               for channel in list(UNREAD))


class LeftRecord(NamedTuple):
    """This rank's "left" record, to settle at its next exchange: its key, what it wrote there, and the exchange it
    lies at."""

    key: str
    payload: bytes
    seq: int
    #: already come back to (:meth:`LeavingChannel.come_back`, at a step made once): only its deletion is left
    came: bool = False


class LeavingChannel(Group):
    """The part of a torch group's channel (:class:`.store.StoreGroup`) that a rank's interruption runs: this
    module's docstring. It keeps the state of it; the channel gives it its exchange count, keys and reads."""

    #: (the channel's) the exchanges begun; the last whose part of this rank's is written; its step; their lock
    _seq: int
    _sent: int
    _what: str
    _lock: threading.Lock
    _prefix: str | None

    def __init__(self) -> None:
        super().__init__()
        self._left: BaseException | None = None  #: the interruption this rank left the group's exchanges by
        self._told: FailureReport | None = None  #: this rank's last report on a board of the group
        self._back: LeftRecord | None = None  #: this rank's "left" record, to settle at its next exchange
        #: the last exchange begun, where this rank wrote its message (group rank 0: the result) and waits for the
        #: result, or read it (sequence number, step, timeout: an interruption after the write, in the wait or after
        #: it, leaves it to :meth:`keep_unread`); and the one kept to read at the next call, with what to do with it
        self._awaited: tuple[int, str, float] | None = None
        self._to_read: tuple[tuple[int, str, float], Callable[[Any], None]] | None = None
        self._promised_at: int | None = None  #: the exchanges begun at this rank's promise of its next one
        #: the steps (their :func:`.messages.step_print`) at which this rank's peers raised while it was away (they
        #: counted it out there, or the exchange its "left" record lay at ended with another rank's error: a
        #: made-once step, :meth:`raise_if_counted_out`), found as its next exchange came back (:meth:`come_back`),
        #: each with the error to raise there; kept until the rank reaches that step, through later leaves (before:
        #: a leave dropped them, and a rank interrupted again before that step made it against its peers' next one)
        self._out_at: dict[str, str] = {}
        #: the exchange where this rank came back in time, through a step not made once, to find group rank 0's own
        #: record of the turn both left unsettled: its peers past that turn settle it at their step there, which this
        #: rank cannot know; read again at its next step made once (:meth:`raise_if_counted_out`)
        self._rank_0_left: int | None = None

    def promise_next_exchange(self, promised: bool = True) -> None:
        """:meth:`.channel.Group.promise_next_exchange`."""
        with self._lock:
            self._promised_at = self._seq if promised else None

    def _promised(self) -> bool:
        return self._promised_at is not None and self._promised_at == self._seq

    @property
    def store(self) -> Any:
        raise NotImplementedError

    def _key(self, seq: int, rank: int | str) -> str:
        raise NotImplementedError

    def _receive(self, seq: int, what: str, timeout: float, started: float, again: bool = False) -> Any:
        raise NotImplementedError

    def leave(self, interruption: BaseException) -> None:
        """This rank leaves its call by ``interruption`` (:meth:`.channel.Group.turn`): it writes a
        :class:`~.channel.Failed` as its part of the next exchange it has not written, naming the last exchange it
        began in the turn (``held``), and counts it done. A peer still in the turn (it waits there, or comes to it)
        raises ``RankFailedError`` at once and counts it done too: the ranks stay in step (so does one that goes on
        to that exchange on this rank's promise, :meth:`promise_next_exchange`: the record names that exchange as
        begun; before, nothing was sent, and such a peer waited ``T`` there). A peer past the turn
        (this rank's part of its last exchange was written) meets it at a later turn's first exchange and waits a
        short grace for this rank's next exchange: where it comes, that exchange is void on every rank and made again
        at the next number (:class:`~.channel.PassedOver`), else the peer raises (:mod:`.passover`). Best effort."""
        if self._prefix is None or self._left is interruption:  # (no exchange yet; told already: nested turns)
            return
        with self._lock:
            held = self._seq
            seq = self._seq = self._sent = held + (self._sent == held)
            gathering = self.rank == 0 and seq == held  # (rank 0 left the exchange it gathers: its result unwritten)
            if self._promised_at == held:  # its peers go on to that exchange on its word: it is in the turn there
                held = seq
        self._left, told, self._told = interruption, self._told, None
        text = left_message(self.rank, self.global_ranks[self.rank], self.title, self._what, interruption,
                            told.describe() if told is not None and told.interrupted else None)
        try:
            with store_silence.answering(self.store, store_silence.tuner_timeout()):
                if gathering:  # a peer's record there is settled: that exchange ends with this rank's, not void
                    back = passover.count_out(self.store, [self._key(seq, r) for r in range(1, self.size)],
                                              self._what)
                    if back is not None:  # (that peer came back first: its record is the result)
                        self.store.set(self._key(seq, "all"), back)
                        with self._lock:
                            held = seq = self._seq = self._sent = seq + 1  # (where every rank makes the step again)
                key = self._key(seq, "all" if self.rank == 0 else self.rank)
                record = passover.record(text, held, self._what if gathering else "")
                self.store.set(key, record)
            self._back = LeftRecord(key, record, seq)
        except Exception as exc:  # the store is gone: the peers' waits say so
            log.debug("triton_dist_tune: could not tell the group that this rank left: %s", exc)

    def keep_unread(self, keep: Callable[[Any], None], begun: int) -> bool:
        """:meth:`.channel.Group.keep_unread`: kept where this rank wrote its message of the last exchange begun, and
        that one began after ``begun`` exchanges."""
        awaited = self._awaited
        if awaited is None or awaited[0] != self._seq or self._seq <= begun:  # (the awaited is reset as one begins)
            return False
        self._to_read = (awaited, keep)
        UNREAD.add(self)
        return True

    def _result_of(self, seq: int, what: str, timeout: float, started: float) -> bytes:
        """The result group rank 0 wrote for exchange ``seq`` (at step ``what``), waited for as any result is (it
        stays in the store until this rank writes its next message: rank 0 deletes it two exchanges on)."""
        raise NotImplementedError

    def come_back(self, back: LeftRecord, what: str, timeout: float | None = None, made_once: bool = False) -> None:
        """This rank's next exchange after it left, before it writes anything there: its "left" record ``back`` is
        settled ``back`` where no peer settled it yet (:func:`.passover.come_back`), and the rank keeps the step at
        which its peers raised while it was away, if they did, to raise there too when it reaches it (a step made
        once, a contextual agreement at call N: :meth:`raise_if_counted_out`; a plain ``autotune`` tuning is another
        step, which pairs with the peers' own next one):

        - its peers counted it out (the record found ``out``: its ``at``). Before, it kept nothing: its agreement at
          call N met its peers' at call N + ``sync_every``, and each agreement raised ``ExchangeError``, for good;
        - it came back in time (a rank other than group rank 0, whose record rank 0 reads), but the exchange its
          record lies at ended with an error on every peer all the same: another rank's record there counted out, an
          error (:func:`.messages.combine_payloads`), or rank 0's own record, written as it left its gather there.
          The rank reads that exchange's result first, waiting for it as for any result (``timeout``: that wait's
          deadline; None: the default). Before, it made its step again at the next number while its peers raised
          at this one: 3 gloo ranks, two records at one agreement, one back within the grace and one counted out
          (``test_passover.py``, two ranks left at one exchange);
        - where that result is rank 0's own record of a turn it left after that turn's last exchange (rank 0 was
          interrupted after the same turn), unsettled: at a step made once (``made_once``: ``what`` is then the step
          its peers past that turn make there too), the rank settles it as such a peer does
          (:func:`.passover.settle`: a grace for rank 0's next call; ``out`` at ``what``), and keeps the step of an
          ``out``; at
          another step it leaves it to those peers, which settle it at their own step, and reads it again at its
          next step made once (:meth:`raise_if_counted_out`). Before: it read nothing of it, and where rank 0's
          peers counted rank 0 out at an agreement, this rank's agreement met their next one, ``ExchangeError``
          (with 2 ranks, it waited until rank 0 came back, then the same); settled at a plain step's text (closing
          review R87), rank 0 too then missed its peers' step.

        A record of group rank 0 is that exchange's result itself, which each peer settles: nothing more to read."""
        found = passover.come_back(self.store, back.key, back.payload)
        record = passover.counted_out(found) if found is not None else None
        verdict = None
        if record is not None and record.at:
            verdict = (step_print(record.at), f"triton_dist_tune: {record.message} (its peers counted this rank out "
                                              f"at '{record.at[:STEP_QUOTE]}' after their grace, and raised there: so "
                                              "does this rank)")
        elif found is not None and self.rank != 0 and passover.settled_as(found) == passover.BACK:
            deadline = default_timeout() if timeout is None else timeout
            result = self._result_of(back.seq, "the result of the exchange this rank left", deadline, time.monotonic())
            self._read_left_exchange(back.seq, result, what, deadline, made_once)
        self._keep(verdict)

    def _read_left_exchange(self, seq: int, result: bytes | None, what: str, deadline: float,
                            made_once: bool) -> None:
        """Keep what exchange ``seq``'s ``result`` (None: gone) says of the step this rank's peers raised at
        (:func:`_ended_without`), once group rank 0's own unsettled record of a turn it left after that turn's last
        exchange, where it is one, is settled: at a step made once by this rank, at ``what``; at another step it is
        left to the peers past that turn (read again: :meth:`look_at_rank_0_left`)."""
        rank_0 = passover.unsettled(result) if result is not None else None
        if rank_0 is not None and rank_0.held < seq:
            if not made_once:
                with self._lock:
                    self._rank_0_left = seq
                return
            result = passover.settle(self, self._key(seq, "all"), result, 0,
                                     time.monotonic() + passover.grace(deadline), what)
        with self._lock:
            self._rank_0_left = None
        if result is not None:
            self._keep(_ended_without(result, seq))

    def look_at_rank_0_left(self, what: str, timeout: float | None = None, made_once: bool = False) -> None:
        """Before this rank writes anything at its exchange at step ``what``: where it left group rank 0's own record
        unsettled to its peers as it came back (:attr:`_rank_0_left`), read it again, and keep the step of an
        ``out`` (settled ``back``: nothing). Its peers past that turn settle it before they write their message of
        the exchange after it, so it is settled once this rank has read any result since (and still there: rank 0
        deletes it two exchanges on, which needs this rank's message). At a step made once (``made_once``) a record
        still unsettled is settled at ``what``, as :meth:`come_back` does. Best effort."""
        with self._lock:
            pending = self._rank_0_left
        if pending is None:
            return
        try:
            found = peek(self.store, self._key(pending, "all"))
        except Exception as exc:
            log.debug("triton_dist_tune: could not read group rank 0's record at exchange %d: %s", pending, exc)
            found = None
        self._read_left_exchange(pending, found, what, default_timeout() if timeout is None else timeout, made_once)

    def _keep(self, verdict: tuple[str, str] | None) -> None:
        if verdict is not None:
            with self._lock:
                self._out_at[verdict[0]] = verdict[1]

    def raise_if_counted_out(self, what: str, timeout: float | None = None) -> None:
        """:meth:`.channel.Group.raise_if_counted_out`: read as this rank comes back from its "left" record
        (:meth:`come_back`: the one compare-and-set that settles it ``back`` where no peer settled it yet, so no peer
        can count it out between this read and that), or kept where an exchange of another step came back to it
        first. Before, the rank's step paired with its peers' next one, at another call number: each raised
        ``ExchangeError`` (ranks at different steps), one step apart for good."""
        with self._lock:
            back = self._back
        if back is not None and not back.came:
            self.come_back(back, what, timeout, made_once=True)
            with self._lock:  # (the exchange after this needs it no more: :meth:`.store.StoreGroup.combine`)
                if self._back is back:
                    self._back = back = back._replace(came=True)
        self.look_at_rank_0_left(what, timeout, made_once=True)
        with self._lock:
            message = self._out_at.pop(step_print(what), None)
            if message is None:
                return
            if self._back is back:
                self._back = None
        # group rank 0's record is that exchange's result, which every peer reads: one peer settled it out, but a
        # slower one may not have read it yet (before, deleted here, that peer waited T for it, and every rank T at
        # the next agreement); rank 0's own exchange two on deletes it, once every peer wrote a message after it. A
        # record of another rank is read by group rank 0 alone, which settled it: every rank is past it
        if back is not None and self.rank != 0:
            try:
                self.store.delete_key(back.key)
            except Exception as exc:
                log.debug("triton_dist_tune: could not delete %s: %s", back.key, exc)
        raise RankFailedError(message)

    def has_unread(self) -> bool:
        return self._to_read is not None

    def read_unread(self) -> None:
        """:meth:`.channel.Group.read_unread`. The result is still in the store: group rank 0 deletes it at the
        exchange two on, once it has read this rank's message there, and this runs before this rank writes any. An
        interruption of this read leaves the result to the next call."""
        with self._lock:
            to_read, self._to_read = self._to_read, None
            UNREAD.discard(self)
        if to_read is None:
            return
        (seq, what, timeout), keep = to_read
        try:
            value = self._receive(seq, what, timeout, time.monotonic(), again=True)
        except GroupTimeoutError as exc:
            if not isinstance(exc, RankFailedError):
                raise  # as that exchange's wait would have: the group is gone
            _ended_there(self, seq, exc)  # another rank left that exchange: every peer raised this there
            return
        except (AutotuneError, BadInputError) as exc:  # some rank's error ended that exchange, on every rank
            _ended_there(self, seq, exc)
            return
        except BaseException:  # interrupted again (Ctrl-C in the wait): still to read, at the next call
            with self._lock:
                self._to_read = to_read
                UNREAD.add(self)
            raise
        keep(value)


@contextlib.contextmanager
def result_kept_if_interrupted(group: Group, keep: Callable[[Any], None] | None,
                               kept: Callable[[], None] | None = None) -> Iterator[None]:
    """An interruption (a ``BaseException`` that is not an ``Exception``) inside, after this rank wrote its message
    of an exchange of ``group`` begun inside (in the wait for the result, or once it read it, before its caller took
    it): the group keeps that result for ``keep`` to read at this rank's next call (:meth:`Group.keep_unread`), and
    ``kept`` (the caller's mark of it) is called; raised on. Nothing where ``keep`` is None."""
    begun = group.exchanges()
    try:
        yield
    except BaseException as exc:
        if keep is not None and not isinstance(exc, Exception) and group.keep_unread(keep, begun) and kept is not None:
            kept()
        raise


def _ended_without(payload: bytes, seq: int) -> tuple[str, str] | None:
    """What a rank that came back in time keeps from the result ``payload`` of exchange ``seq``, where its "left"
    record lay (:meth:`LeavingChannel.come_back`): that step (its print) and the error to raise there, where the
    result is an error every peer raised there (a record settled ``out``, another rank's error, group rank 0's own
    record written as it left its gather of that exchange: every peer there was in rank 0's turn); None where the
    exchange is void (a record set ``back``, rank 0's own included)."""
    try:
        message = codec.decode(payload)
    except codec.BadMessage:
        return None
    value = message.value if isinstance(message, Message) else None
    if not isinstance(value, Failed):
        return None
    if value.left and value.held < seq and value.settled != passover.OUT:
        return None
    step = step_print(value.at) if value.left and value.settled == passover.OUT and value.at else message.step
    return step, (f"triton_dist_tune: {value.message} (this rank came back in time, but its peers raised that at the "
                  "exchange its interruption left: so does this rank)")


def _ended_there(group: LeavingChannel, seq: int, exc: Exception) -> None:
    """The result of exchange ``seq``, read again at this rank's next call, is an error every rank raised there (a
    rank's error, or another rank that left it and was counted out: :class:`RankFailedError`). This rank's call
    ended there too, on its interruption: nothing is applied, and its next call is its peers' next call. Before, a
    :class:`RankFailedError` there was raised again, in this rank's next call alone (the peers' went on)."""
    log.info("triton_dist_tune: the result of exchange %d of group '%s', which an interruption ended this rank's "
             "wait for, read at its next call: every rank raised there (%s); nothing to apply", seq, group.title,
             exc)
