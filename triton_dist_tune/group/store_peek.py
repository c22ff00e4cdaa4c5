"""A read of one key of the job's key-value store that never waits (:func:`peek`).

``store.get`` of a key that is not there blocks until the key is set or the store's timeout runs out, and torch's
store client serves one request at a time: every other thread of the process that uses the client (the beat, the
watchdog, the main thread's exchange) waits behind it. A key another process may delete (a failure report when the
group's rank 0 closes the board, a unit's note that it is stuck when it comes back, a withdrawn note) is therefore
never read by ``check`` then ``get``: deleted between the two, the ``get`` held the rank for the store's whole
timeout (seen once as a rank 26 s inside one compare-and-set, behind its watchdog's board read).
"""

from __future__ import annotations

from typing import Any

#: the expected value of :func:`peek`'s compare-and-set: never a value the tuner writes (its values are text),
#: and not empty (an empty expected value makes the store create the key)
ABSENT = b"\x00triton_dist_tune: absent\x00"


def peek(store: Any, key: str) -> bytes | None:
    """The value of ``key`` in ``store``, or None when it is not there, in one request that does not wait.

    It is a compare-and-set expecting :data:`ABSENT`: the store answers with the key's value when the key is there
    (and leaves it unchanged), and with :data:`ABSENT` when it is not (creating nothing); the same in torch's
    ``TCPStore`` (both backends), ``FileStore``, ``HashStore`` and ``PrefixStore``. A store without compare-and-set
    (a Python ``Store`` that does not implement it) is read by ``check`` then ``get``."""
    try:
        value = store.compare_set(key, ABSENT, ABSENT)
    except (NotImplementedError, AttributeError, RuntimeError) as exc:
        if not unsupported(exc):
            raise  # the store is gone, or refused: the caller's error
        return store.get(key) if store.check([key]) else None
    value = bytes(value)
    return None if value == ABSENT else value


def unsupported(exc: Exception) -> bool:
    """Whether ``exc``, raised by a store's method, says that the store does not implement it (a Python ``Store``
    that does not override it: torch raises a RuntimeError saying ``Not implemented``), not that the store is
    gone or refused."""
    return isinstance(exc, (NotImplementedError, AttributeError)) or (
        isinstance(exc, RuntimeError) and "not implemented" in str(exc).lower())
