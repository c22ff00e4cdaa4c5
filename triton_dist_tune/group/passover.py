"""A rank's "left" record met by its peers past the turn it left: settled once between the rank's next call and them.

A rank interrupted inside a turn on a torch group (:meth:`.channel.Group.turn`) writes a "left" record as its part
of the next exchange it has not written (:meth:`.leaving.LeavingChannel.leave`) and counts that exchange done. Where the
interruption came after its part of the turn's last exchange (a log handler or Ctrl-C at the decision's line, a
contextual call's summary, the wait for that exchange's result), no peer waits in that turn any more: the record
lies at the first exchange of the peers' next turn on the group, and the record alone cannot tell them what follows:

- the rank's caller catches the interruption and calls again (a REPL, a serving loop): its next exchange comes at
  the next number, and the peers' tuning should go on with it;
- its process ends (the likelier case): the peers' tuning should raise ``RankFailedError`` naming the interruption
  at once, never wait for the exchange's deadline.

So the record's key is settled once, by compare-and-sets on it, and every rank that reads it acts on what it holds:

- the rank itself, at its next exchange on the group and before it writes anything there, sets it ``back``
  (:func:`come_back`);
- a peer that reads it unsettled and is past the turn (its outermost turn began at or after the record's ``held``:
  :meth:`.channel.Group.turn_began`) waits up to :func:`grace` for it to change, and sets it ``out`` then, or at
  once where the rank's process is known ended (gone from ``/proc`` on this host, or counted out:
  :func:`.exits.counted_out`); a peer still in the turn sets it ``out`` at once (:func:`settle`).

``back``: each peer past the turn passes over the exchange (:class:`.channel.PassedOver`: void on every rank, made
again at the next number, where the rank's next call is). ``out``: each raises ``RankFailedError`` with the record's
text, as before. Where records of several ranks lie at one exchange, one ``out`` (or any error there) ends it on
every rank, and a rank whose record was set ``back`` reads that result as it comes back and raises at that step too
(:func:`.messages.combine_payloads`, :meth:`.leaving.LeavingChannel.come_back`). Either way every rank has counted
that exchange, so the ranks stay at the same sequence numbers: a rank that calls again after the grace finds
``out``, and its exchange is the one the peers' own next call makes (a caller that calls again pairs with its peers'
call again), but for a step made once at a point every rank reaches alike (a contextual agreement at call N:
:meth:`.channel.Group.raise_if_counted_out`), which the record names (``at``): there the rank raises as its peers
did, and their next steps pair. A record of a group rank other than 0 is read by group rank 0 alone (its gather),
which sends what it settled as the exchange's result; a record of group rank 0 is the exchange's result, settled by
each peer that reads it (the compare-and-set makes them agree).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from . import codec, exits
from .channel import Failed
from .messages import Message, step_print
from .note import process_gone, this_process
from .store_peek import peek

log = logging.getLogger("triton_dist_tune")

#: how long a peer past the turn waits for the next call of a rank whose "left" record it read (s). It covers the
#: time from the interruption to that call's first exchange where the caller catches it and calls again at once: the
#: tuner's unwinding (journal, board, logs), the caller's handler, the next call's work before its first exchange
#: (its key, the cache lookup whose agreement is that exchange): under a second on an idle host, some seconds on a
#: loaded one. It is also how late a peer raises where the rank's end cannot be read (a process on another host that
#: did not count out): a few seconds against a deadline of minutes (default 300 s)
GRACE_S = 5.0
#: how often a peer in the grace reads the record's key and looks for the rank's end (s)
LOOK_S = 0.1
BACK, OUT = "back", "out"


def grace(timeout: float) -> float:
    """The grace of a peer whose exchange's deadline is ``timeout``: :data:`GRACE_S`, and at most a quarter of the
    deadline, so that the other peers, which wait for group rank 0's result meanwhile, never reach theirs."""
    return min(GRACE_S, timeout / 4)


def record(text: str, held: int, step: str = "") -> bytes:
    """A rank's "left" record, unsettled: ``text`` says why, ``held`` is the last exchange it began in its turn;
    ``step``: the step of the exchange it lies at, where the rank knows it (group rank 0 leaving its gather of it:
    a rank back from its own record there reads the step it ended, :meth:`.leaving.LeavingChannel.come_back`)."""
    process = this_process()
    return codec.encode(Message(step_print(step) if step else "", Failed(
        text, left=True, held=held, process=tuple(process) if process is not None else None)))


def unsettled(payload: bytes) -> Failed | None:
    """The "left" record in ``payload`` where it is not settled yet, else None (a message is decoded only where it
    may be one: every exchange's messages pass here)."""
    if b'"left":true' not in payload:
        return None
    left = _left_record(payload)
    return left if left is not None and not left.settled and left.held >= 0 else None


def come_back(store: Any, key: str, payload: bytes) -> bytes | None:
    """This rank, which left its call writing ``payload`` under ``key``, makes its next exchange on the group: the
    record is settled ``back`` unless a peer settled it first; returns the record as it is now (None: not read).
    Best effort (a store gone: the exchange says so)."""
    if unsettled(payload) is None:
        return None
    try:
        found = bytes(store.compare_set(key, payload, _settled(payload, BACK)))
        log.debug("triton_dist_tune: this rank's 'left' record %s is %s", key, settled_as(found) or "gone")
        return found
    except Exception as exc:
        log.debug("triton_dist_tune: could not settle this rank's 'left' record %s: %s", key, exc)
        return None


def settle(group: Any, key: str, payload: bytes, rank: int, until: float, at: str | None = None) -> bytes:
    """``payload``, read under ``key`` by a rank of ``group`` (a :class:`.store.StoreGroup`): where it is an
    unsettled "left" record (of group rank ``rank``), the record settled (see the module's docstring), else
    ``payload`` itself. Past the turn, this waits until ``until`` at most (``time.monotonic``: the end of the
    exchange's one :func:`grace`, shared by every record it reads, so that several ranks left cost one grace).
    ``at``: the step a record settled ``out`` names (None: the exchange's this rank is at)."""
    left = unsettled(payload)
    if left is None:
        return payload
    store, global_rank = group.store, group.global_ranks[rank]
    out = _settled(payload, OUT, group._what if at is None else at)
    past = group.turn_began() >= left.held
    deadline = until if past else 0.0
    if past:
        log.debug("triton_dist_tune: group rank %d's 'left' record %s: waiting up to %.1f s for its next call", rank,
                  key, max(0.0, deadline - time.monotonic()))
    try:
        while past and not _ended(store, left, global_rank):
            now = time.monotonic()
            if now >= deadline:
                break
            time.sleep(min(LOOK_S, deadline - now))
            found = peek(store, key)
            if found is not None and found != payload:  # the rank came back, or another peer settled it
                return found if settled_as(found) == BACK else out
        found = bytes(store.compare_set(key, payload, out))
    except Exception as exc:  # the store is gone: nobody comes back through it
        log.debug("triton_dist_tune: could not settle the 'left' record %s: %s", key, exc)
        return out
    return found if past and settled_as(found) == BACK else out


def count_out(store: Any, keys: list[str], at: str) -> bytes | None:
    """Group rank 0 leaves an exchange whose result it has not written (:meth:`.leaving.LeavingChannel.leave`): each
    unsettled "left" record among its peers' parts ``keys`` settled ``out`` at step ``at`` (where it is a step made
    once, the rank that left it raises there when it comes back, as its peers did). The exchange is not void: rank
    0's own record is its result, and the peers that read it raise ``RankFailedError`` and count it. Before, such a
    record stayed unsettled (rank 0 was inside its grace for it), the rank that wrote it set it ``back`` at its next
    call and made that step again at the next number, where its peers made their next one: 3 gloo ranks, a
    ``contextual_autotune`` agreement at call N against their agreement at call N + ``sync_every`` (``ExchangeError``
    on every rank, then a wait of ``T``; found by ``chaos.py --faults interrupt``, seed 9696). Returns a record
    found settled ``back`` (its rank came back first, and makes that step again at the next number: the exchange is
    void for the peers past its turn, and nothing more is settled), else None: also where one is found ``back``
    only after this settled another ``out`` (its rank came back between this one's read and its compare-and-set):
    the ``out`` ends the exchange, as in a gather (:func:`.messages.combine_payloads`), and the rank that came back
    reads rank 0's record as that exchange's result (:meth:`.leaving.LeavingChannel.come_back`). Before, that
    ``back`` was the result: the exchange void for the peers, while the rank counted out raised there alone. Best
    effort."""
    found: dict[str, bytes] = {}
    for key in keys:
        try:
            payload = peek(store, key)
        except Exception as exc:
            log.debug("triton_dist_tune: could not read the part %s: %s", key, exc)
            return None
        if payload is not None and settled_as(payload) == BACK:
            return payload
        if payload is not None and unsettled(payload) is not None:
            found[key] = payload
    if found:
        log.debug("triton_dist_tune: group rank 0 leaves its gather at '%s': settling %d peer record(s) out",
                  at[:80], len(found))
    counted = False
    for key, payload in found.items():
        try:
            now = bytes(store.compare_set(key, payload, _settled(payload, OUT, at)))
        except Exception as exc:
            log.debug("triton_dist_tune: could not settle the 'left' record %s: %s", key, exc)
            return None
        if settled_as(now) == BACK and not counted:  # (its rank came back between the read and the compare-and-set)
            return now
        counted = counted or settled_as(now) == OUT
    return None


def settled_as(payload: bytes) -> str:
    """How the "left" record in ``payload`` was settled (``back``, ``out``; "" where it is not one, or unsettled)."""
    left = _left_record(payload)
    return left.settled if left is not None else ""


def counted_out(payload: bytes) -> Failed | None:
    """The "left" record in ``payload`` where a peer settled it ``out`` (its ``at`` names the step), else None."""
    left = _left_record(payload)
    return left if left is not None and left.settled == OUT else None


def _left_record(payload: bytes) -> Failed | None:
    """The "left" record in ``payload``, however settled; None where it holds none."""
    try:
        message = codec.decode(payload)
    except codec.BadMessage:
        return None
    value = message.value if isinstance(message, Message) else None
    return value if isinstance(value, Failed) and value.left else None


def _settled(payload: bytes, how: str, at: str = "") -> bytes:
    """The "left" record ``payload`` (its callers read it as one) settled ``how`` (at step ``at``), with the step its
    message names kept (group rank 0's record written as it left its gather names that exchange's step, which a rank
    back from its own record there reads: before, a settled record named none, and such a rank, reading rank 0's
    record once rank 0 had come back, went on where its peers had raised)."""
    message = codec.decode(payload)
    return codec.encode(Message(message.step, dataclasses.replace(message.value, settled=how, at=at)))


def _ended(store: Any, left: Failed, global_rank: int) -> bool:
    """Whether the process of the rank that left is known ended: gone on this host, or counted out of the job."""
    return process_gone(left.process) or exits.counted_out(store, global_rank)
