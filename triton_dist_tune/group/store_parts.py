"""The parts of a torch group's exchange that a rank writes, tidies and looks up (:class:`~.store.StoreGroup`):
its message or result written and counted written (:func:`write_part`), a key every rank has read deleted
(:func:`tidy`), and the look-up of which ranks have written their message (:func:`arrivals`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import AutotuneError, BadInputError
from .store_wait import ArrivalLog, Arrivals

log = logging.getLogger("triton_dist_tune")


def write_part(group: Any, seq: int, slot: int | str, payload_of: Callable[[], bytes], what: str,
               started: float, timeout: float) -> None:
    """Write this rank's part of exchange ``seq`` (its message; rank 0: the result) and count it written
    (:func:`_counted`). An interruption raised as the write returns (a signal that came during the
    store's request: Python runs its handler then) finds the part in the store, where a peer may have read it
    already: counted written too, as where the interruption comes right after. Before, the rank's "left" record
    (:meth:`~.leaving.LeavingChannel.leave`) went over it, unseen by a peer that had read it: the rank's call again
    began one exchange behind its peers', and each later call raised ``ExchangeError`` or ``MismatchError``."""
    payload: list[bytes] = []

    def write() -> None:
        payload.append(payload_of())
        group._write_new(seq, slot, payload[0], what)

    try:
        group._request(write, what, started)
    except BaseException as exc:
        if isinstance(exc, Exception) or not payload or not _holds(group, group._key(seq, slot), payload[0]):
            raise
        _counted(group, seq, what, timeout)
        raise
    _counted(group, seq, what, timeout)


def _counted(group: Any, seq: int, what: str, timeout: float) -> None:
    """This rank's part of exchange ``seq`` is written: an interruption from here on leaves the result to read at
    its next call (:meth:`~.leaving.LeavingChannel.keep_unread`). Group rank 0 too, whose result it wrote: before, an
    interruption after it wrote the result of the exchange that ends a tuning, before its caller kept the decision,
    left the key decided on its peers alone; its next call of it tuned it again against their next call."""
    group._sent, group._awaited = seq, (seq, what, timeout)


def _holds(group: Any, key: str, payload: bytes) -> bool:
    """Whether the store holds ``payload`` under ``key`` (False where it cannot be read)."""
    try:
        return bool(group.store.check([key])) and bytes(group.store.get(key)) == bytes(payload)
    except Exception:
        return False


def tidy(group: Any, key: str) -> None:
    """Delete a key every rank has read: the exchange is complete without it, so a store already gone (its
    host ended after the exchange) is no error here; the next exchange, if any, says so."""
    try:
        group.store.delete_key(key)
    except (AutotuneError, BadInputError):
        raise
    except Exception as exc:
        log.debug("triton_dist_tune: could not delete %s (%s): the store's host has ended", key, exc)


def arrivals(group: Any, seq: int, ranks: Iterable[int], result: list[str] | None = None) -> Arrivals:
    """The look-up of which of ``ranks`` wrote their message of exchange ``seq``, through its log of arrivals
    (:class:`.store_wait.ArrivalLog`: each rank whose wait outlasts its first slice appends itself at its first look;
    none where all come within a slice), and, for a rank other than 0, the ``result`` key: its peers delete their
    messages once they have read it (:class:`.store_wait.Arrivals`' ``done``)."""
    return Arrivals({r: group._key(seq, r) for r in ranks}, group._all_arrived, ArrivalLog(
        group.store, group._key(seq, "log"), group.rank), result and (lambda: group._all_arrived(result)))
