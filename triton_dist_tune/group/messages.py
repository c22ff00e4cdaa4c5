"""What travels in one exchange of a channel that sends bytes (a torch group's key-value store, an mpi4py
communicator): each rank's message, tagged with the step of the protocol it belongs to, and the result group rank 0
combines from them and sends back (or the :class:`~.channel.Failed` it sends instead)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import codec
from .channel import STEP_QUOTE, ExchangeError, Failed, run_on_root, unwrap


@codec.record
@dataclass(frozen=True)
class Message:
    """What travels in one exchange: the value, and a fingerprint of the step of the protocol it belongs to (the
    exchange's ``what``: :func:`step_print`), so that ranks at different steps (a setting that changes the number
    of steps differs between them, a rank that left a loop early) get a clear error naming the steps instead of
    pairing unrelated values. A fingerprint, not the text, keeps every message a few bytes longer only."""

    step: str
    value: Any


def step_print(what: str) -> str:
    """The fingerprint of a step's text that its messages carry (12 hex digits)."""
    return hashlib.blake2b(what.encode(), digest_size=6).hexdigest()


def pack(obj: Any, rank: int, step: str = "") -> bytes:
    """This rank's message at ``step`` (the exchange's ``what``) as plain data; a value that is not plain data
    becomes a refusal that rank 0 passes on to every rank (so nobody waits for a message that never comes)."""
    try:
        return codec.encode(Message(step_print(step), obj))
    except codec.NotPlainData as exc:
        refusal = Failed(f"group rank {rank} cannot send its message: {exc}", refused=True)
        return codec.encode(Message(step_print(step), refusal))


def steps_differ(ranks: Sequence[int], step: str, reader: int) -> str:
    """The error of ranks found at different steps of the protocol (each rank's error names its own step too)."""
    return (f"group rank(s) {list(ranks)} are at another step of the protocol than group rank {reader}, which is at "
            f"'{step[:STEP_QUOTE]}': the ranks run different steps (a setting that changes the steps, e.g. "
            "TRITON_DIST_AUTOTUNE_UNDECIDED or n_warmup, differs between them, or they called the tuned function in "
            "another order)")


def combine_payloads(fn: Callable[[list[Any]], Any], payloads: Sequence[bytes], step: str = "",
                     reader: int = 0) -> bytes:
    """Group rank 0 (``reader``): decode every rank's message (by group rank), check that each belongs to
    ``step``, run ``fn`` on them and encode the result, or a :class:`Failed` when a message is refused, belongs
    to another step, ``fn`` raised or its result is not plain data. A rank's "left" record settled ``back`` (its
    next call came: the exchange is void for the peers past its turn, :mod:`.passover`) is the result only where no
    other message is a :class:`Failed`: one that is (another rank's record settled ``out``, an error) ends the
    exchange on every rank, the rank that came back included (it reads that result before it writes anything:
    :meth:`.leaving.LeavingChannel.come_back`). Before, the first in rank order was the result: with one rank back
    and another counted out at one exchange, the peers made it again while the rank counted out raised there."""
    mine = step_print(step)
    values, elsewhere, back = [], [], None
    for rank, payload in enumerate(payloads):
        try:
            message = codec.decode(payload)
            if not isinstance(message, Message):
                raise codec.BadMessage("not a message of the tuner (no step)")
        except codec.BadMessage as exc:
            return codec.encode(Message(mine, Failed(
                f"the message read for group rank {rank} is refused: {exc}; a process other than the tuner wrote "
                "under the tuner's keys of the key-value store")))
        if isinstance(message.value, Failed) and message.value.left and message.value.settled == "back":
            back = back or message.value
            continue
        if isinstance(message.value, Failed):
            return codec.encode(Message(mine, message.value))
        if message.step != mine:
            elsewhere.append(rank)
        values.append(message.value)
    if back is not None:
        return codec.encode(Message(mine, back))
    if elsewhere:
        return codec.encode(Message(mine, Failed(steps_differ(elsewhere, step, reader))))
    result = run_on_root(fn, values)
    try:
        return codec.encode(Message(mine, result))
    except codec.NotPlainData as exc:
        return codec.encode(Message(mine, Failed(f"the combined result cannot be sent: {exc}", refused=True)))


def unpack(payload: bytes, what: str, rank: int, began: int | None = None) -> Any:
    """The result of an exchange, as rank 0 combined it; raises what rank 0 sent instead of a result (``began``: as
    :func:`~.channel.unwrap` reads a record of a rank that left), or :class:`ExchangeError` when the result belongs
    to another step than ``what``."""
    try:
        message = codec.decode(payload)
        if not isinstance(message, Message):
            raise codec.BadMessage("not a result of the tuner (no step)")
    except codec.BadMessage as exc:
        raise ExchangeError(f"triton_dist_tune: group rank {rank} refused the result it read at '{what}': {exc}; a "
                            "process other than the tuner wrote under the tuner's keys of the key-value store") \
            from None
    if message.step != step_print(what) and not isinstance(message.value, Failed):
        raise ExchangeError(f"triton_dist_tune: group rank {rank} is at '{what[:STEP_QUOTE]}' and read a result of "
                            "another step of the protocol: the ranks run different steps (a setting that changes the "
                            "steps, e.g. TRITON_DIST_AUTOTUNE_UNDECIDED or n_warmup, differs between them)")
    return unwrap(message.value, what, began)
