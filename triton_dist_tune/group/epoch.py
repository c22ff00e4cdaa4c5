"""The name of this attempt of the job, the same in every process of it and new in each restart, agreed through the
job's key-value store by :func:`~triton_dist_tune.group.dist.init_distributed` (:func:`agree`).

Under ``torchrun --max-restarts`` the store outlives a failed attempt, so the keys of each attempt need a prefix of
its own. torchrun's ``TORCHELASTIC_RESTART_COUNT`` cannot serve on more than one node: each node's agent counts its
own restarts, and an agent that restarts its workers because another node rejoined (a membership change) does not
count it. After node 0's worker failed, node 0's new workers read 1 and node 1's read 0: prefixed by that count, the
ranks of one attempt waited on different keys until their deadline (two agents on one host, ``nnodes=2``:
``tests/test_init_distributed.py``).

:func:`agree`: every process draws a name; global rank 0's is the attempt's. Each other rank appends its own draw to
a log of hellos (``hellos`` counts the entries, ``hello/<n>`` holds the n-th) and waits for a reply under a key named
by that draw (``reply/<draw>``), which no earlier attempt can have written; rank 0 answers every hello it reads (a
stale one, from an earlier attempt, gets an answer nobody reads) until every rank has confirmed under a key named by
rank 0's draw (``done/<name>/<rank>``). Every key of it is either named by a draw of this attempt or only answered,
so an earlier attempt's keys can neither end it early nor stall it (:class:`Naming`). Rank 0 then tells every rank
whether all took part (``joined/<name>``), so that a rank that never starts ends each rank that did within the
bound, naming it (before, those that had their reply went on to wait in torch's ``init_process_group``).

A job that starts torch.distributed itself does not agree a name at its start. Under torchrun on several nodes
(:func:`named_by_each_group`), each group of the tuner then names the attempt among its own ranks, the same way, at
its first exchange (``group/store.py``): before, the ranks of a group on two nodes took their nodes' restart
counts for the name after a restart, and the first exchange waited its deadline (``GroupTimeoutError``).

:func:`current`: the agreed name once :func:`agree` ran in this process (through ``init_distributed``), else the
launcher's restart count (a job that started torch.distributed itself: right on one node).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from .. import settings
from ..errors import AutotuneError, GroupTimeoutError, describe_error
from .store_wait import ArrivalLog, Arrivals, Known, Lookup, StoreWaitTimeout, quiet_store_wait

_agreed: str | None = None
#: what every message of a wait for the ranks to join ends with (``init_distributed``'s bound)
LONGER = f"(set {settings.PREFIX}INIT_TIMEOUT to wait longer)"
#: the longest rank 0 waits, some rank missing, for the others to read its word before it ends (s)
READ_S = 5.0
#: the likely causes of a rank that never joined
NEVER = "they never did (not started, ended, or given another MASTER_ADDR or MASTER_PORT)"


@dataclass(frozen=True)
class Halt:
    """Rank 0's reason to end the naming before every rank took part (a rank claimed by two processes:
    :mod:`~triton_dist_tune.group.claims`): ``why``, in words, and ``readers``, the ranks that will read its word."""

    why: str
    readers: int


class Gate(Protocol):
    """What :func:`agree` asks of a start's checks of its ranks (:class:`~triton_dist_tune.group.claims.Claims`)."""

    def opened(self, name: str) -> None:
        """Rank 0, before it answers any hello: ``name`` is this start's."""

    def arrive(self) -> None:
        """A rank other than 0, before its hello (may raise to end this process's start)."""

    def claim(self, name: str) -> None:
        """A rank other than 0, given the name, before it confirms it (may raise)."""

    def halt(self) -> Halt | None:
        """Rank 0, at each look of its wait: a reason to end the start, or None."""


class _Halted(Exception):
    def __init__(self, halt: Halt) -> None:
        super().__init__(halt.why)
        self.halt = halt


class Naming:
    """One naming of an attempt among ``size`` ranks through ``store``, under keys starting with ``base``: rank 0's
    draw is the name (see the module docstring).

    A rank other than 0 appends its draw to the hello log (:meth:`ask`), waits for the key that returns, and reads
    the name (:meth:`take`). Rank 0 replies to the log's new entries (:meth:`answer`) until every key of
    :meth:`confirmations` is set. Each hello is one entry of a log (a counter and one key per entry), so rank 0
    reads each hello once: every look costs two requests (the counter and the confirmations) whatever the number
    of ranks, and the whole naming ``O(size)`` requests (before, rank 0 asked each unconfirmed rank's key at every
    look: ``O(size)`` requests per look). A rank that confirms also appends its rank to a log of the confirmations
    (:class:`~triton_dist_tune.group.store_wait.ArrivalLog`), so that rank 0's look-up of the ranks that have not
    confirmed, once a second while a group names its attempt (:meth:`unconfirmed`), costs a few requests whatever
    the number of ranks (before: one per rank)."""

    def __init__(self, store: Any, base: str, rank: int, size: int) -> None:
        self.store, self.base, self.rank, self.size = store, base, rank, size
        self.draw = os.urandom(8).hex()
        #: rank 0: the entries of the hello log read so far, and those counted but not written when last looked at
        self._read = 0
        self._unwritten: list[int] = []
        #: rank 0: its look-up of the ranks that have not confirmed (made at the first look)
        self._confirmed: Arrivals | None = None
        #: a rank other than 0: called with the name before it confirms it (:meth:`Gate.claim`; may raise)
        self.before_confirm: Callable[[str], None] | None = None

    def ask(self) -> str:
        """A rank other than 0: write its draw into the hello log; returns the key of the reply to wait for."""
        entry = int(self.store.add(f"{self.base}hellos", 1))
        self.store.set(f"{self.base}hello/{entry}", self.draw)
        return f"{self.base}reply/{self.draw}"

    def take(self) -> str:
        """A rank other than 0, its reply set: the name, confirmed to rank 0."""
        name = self.store.get(f"{self.base}reply/{self.draw}").decode()
        if not _is_draw(name):
            raise AutotuneError(f"the attempt's name read from the key-value store is not one the tuner writes "
                                f"({name[:40]!r}): a process other than the tuner wrote under its keys")
        if self.before_confirm is not None:
            self.before_confirm(name)
        self.store.set(f"{self.base}done/{name}/{self.rank}", "1")
        try:  # (after its key: the key is the truth, the log a hint)
            self.store.append(self._log_key(name), f"{self.rank},")
        except Exception:  # a store without append: rank 0 looks at each rank's key
            pass
        return name

    def _log_key(self, name: str) -> str:
        return f"{self.base}done/{name}/log"

    def confirmations(self) -> list[str]:
        """Rank 0: the keys every other rank sets once it has the name."""
        return [f"{self.base}done/{self.draw}/{r}" for r in range(1, self.size)]

    def lookup(self) -> Lookup:
        """Rank 0: the look-up of the ranks that have not confirmed the name (:class:`Arrivals`, through the log of
        the confirmations: a few requests a look whatever the number of ranks)."""
        if self._confirmed is None:
            keys = {r: f"{self.base}done/{self.draw}/{r}" for r in range(1, self.size)}
            self._confirmed = Arrivals(keys, self.store.check, ArrivalLog(self.store, self._log_key(self.draw), 0,
                                                                          tidy=False))
        return self._confirmed

    def unconfirmed(self) -> list[int]:
        """Rank 0: the ranks not seen confirming the name (a look of :meth:`lookup`: the log a hint, and a rank that
        confirmed but has not appended to it yet among them; its ``confirm`` reads their keys)."""
        return self.lookup().missing()

    def answer(self) -> None:
        """Rank 0: reply the name to every hello written since the last look. An earlier attempt's hellos (the log
        outlives it) are answered too, for nobody: each reply is keyed by a draw of its own. An entry counted but
        not written yet (its rank between the two requests, or ended there in an earlier attempt) is looked at again
        at each look, and holds up none after it."""
        count = int(self.store.add(f"{self.base}hellos", 0))
        entries, self._unwritten = [*self._unwritten, *range(self._read + 1, count + 1)], []
        self._read = max(self._read, count)
        for entry in entries:
            key = f"{self.base}hello/{entry}"
            if not self.store.check([key]):
                self._unwritten.append(entry)
                continue
            draw = self.store.get(key).decode()
            if _is_draw(draw):  # what an outsider wrote is no key of ours to set
                self.store.set(f"{self.base}reply/{draw}", self.draw)


def _is_draw(text: str) -> bool:
    return len(text) == 16 and all(c in "0123456789abcdef" for c in text)


def name_among(naming: Naming, wait: Callable[[list[str], Lookup, Callable[[], None] | None], None]) -> str:
    """Run ``naming`` on this rank and return the attempt's name. ``wait(keys, lookup, poll)`` returns once every
    key of ``keys`` is set, calling ``poll`` (when given) between its looks, and raises on its deadline (``lookup``:
    the ranks it waits for, :class:`~triton_dist_tune.group.store_wait.Lookup`)."""
    if naming.size == 1:
        return naming.draw
    if naming.rank == 0:
        wait(naming.confirmations(), naming.lookup(), naming.answer)
        return naming.draw
    wait([naming.ask()], Known([0]), None)
    return naming.take()


def agree(store: Any, base: str, rank: int, size: int, timeout_s: float, where: str = "the key-value store",
          gate: Gate | None = None) -> str:
    """This attempt's name among ``size`` processes (global ranks) through ``store``, under keys starting with
    ``base``: rank 0's draw, returned on every rank (:class:`Naming`), once every rank took part; raises
    :class:`~triton_dist_tune.errors.GroupTimeoutError` naming ``where`` (the store, as a message names it) and the
    ranks missing when some rank does not take part within ``timeout_s``.

    A rank other than 0 has its reply as soon as rank 0 reads its hello, before every rank has: rank 0 then tells
    every rank under ``joined/<name>`` whether all took part (:func:`_say_joined`), and each waits for that word
    (:func:`_joined`). Before, a rank that joined while another never did went on into torch's
    ``init_process_group``, which waited its own timeout for the missing rank and raised torch's error.

    ``gate`` (:class:`Gate`): a start's checks of its ranks. Where its ``halt`` gives rank 0 a reason to end the
    start before every rank took part, rank 0 tells it to every rank that took part, answering their hellos until
    ``readers`` of them read it (at most :data:`READ_S`), and each raises an
    :class:`~triton_dist_tune.errors.AutotuneError` saying it."""
    global _agreed
    deadline = time.monotonic() + timeout_s
    missing: list[int] = []

    def wait(keys: list[str], lookup: Lookup, poll: Callable[[], None] | None) -> None:
        try:  # a rank other than 0: one blocking request; rank 0: a look at the hellos before each at the keys
            quiet_store_wait(store, keys, max(0.001, deadline - time.monotonic()), block=poll is None, poll=poll,
                             alone=True)
        except Exception as exc:  # the store's timeout (DistStoreError), or the polling's own
            missing[:] = lookup.confirm(lookup.missing())
            if isinstance(exc, _Halted):
                raise
            how = "" if isinstance(exc, StoreWaitTimeout) else f" ({describe_error(exc)})"
            raise GroupTimeoutError(f"init_distributed: rank {rank} waited {timeout_s:g} s for ranks {missing} of "
                                    f"the job's {size} to join at {where}; {NEVER}{how} {LONGER}") from exc

    naming = Naming(store, base, rank, size)
    if size > 1 and rank == 0:
        key = f"{base}joined/{naming.draw}"
        if gate is not None:
            gate.opened(naming.draw)
        try:
            name_among(naming, _halting(naming, wait, gate))
            _check(gate)  # (a report made after the last look: before the word that every rank took part)
        except _Halted as exc:
            _say_halted(store, key, exc.halt, missing, naming.answer)
            raise AutotuneError(f"init_distributed: rank 0: at {where}, {exc.halt.why}") from None
        except GroupTimeoutError:
            _say_joined(store, key, timeout_s, missing, size)
            raise
        _say_joined(store, key, timeout_s, [], size)
        _agreed = naming.draw
    else:
        if gate is not None and size > 1:
            gate.arrive()
            naming.before_confirm = gate.claim
        _agreed = name_among(naming, wait)
        if size > 1:  # rank 0's own wait began before it answered this rank: its word comes within timeout_s
            _joined(store, f"{base}joined/{_agreed}", rank, size, timeout_s + 5, where)
    return _agreed


def _halting(naming: Naming, wait: Callable[[list[str], Lookup, Callable[[], None] | None], None],
             gate: Gate | None) -> Callable[[list[str], Lookup, Callable[[], None] | None], None]:
    """Rank 0's ``wait``, asking ``gate`` for a reason to end the start after each answer to the hellos."""
    if gate is None:
        return wait

    def poll() -> None:
        naming.answer()
        _check(gate)

    return lambda keys, lookup, _poll: wait(keys, lookup, poll)


def _check(gate: Gate | None) -> None:
    reason = gate.halt() if gate is not None else None
    if reason is not None:
        raise _Halted(reason)


def _say_halted(store: Any, key: str, halt: Halt, missing: list[int], answer: Callable[[], None]) -> None:
    """Rank 0, the start halted: tell every rank that takes part why (under ``key``, as :func:`_say_joined`), and
    answer the hellos until ``halt.readers`` ranks have read it (at most :data:`READ_S`): a rank still waiting for
    its reply reads it too, rather than losing the store when rank 0 ends."""
    try:
        store.set(key, json.dumps({"waited_s": 0, "missing": missing, "halted": halt.why}))
        _wait_read(store, key, halt.readers, answer)
    except Exception:  # best effort: rank 0 raises its own error next
        pass


def _say_joined(store: Any, key: str, waited_s: float, missing: list[int], size: int) -> None:
    """Rank 0: tell the ranks that took part which ranks did not (``missing``, none: every rank did) after
    ``waited_s``. Where some did not, rank 0 ends next, and the store with it: it first waits for the others of
    the job's ``size`` to have read the word (:func:`_wait_read`)."""
    try:
        store.set(key, json.dumps({"waited_s": waited_s, "missing": missing}))
        if missing:
            _wait_read(store, key, size - 1 - len(missing))
    except Exception:  # best effort where some rank is missing: rank 0 raises its own error next
        if not missing:
            raise


def _wait_read(store: Any, key: str, readers: int, poll: Callable[[], None] | None = None) -> None:
    """Rank 0, some rank missing: wait (at most :data:`READ_S`) until ``readers`` ranks have counted their read of
    the word under ``key`` (:func:`_joined`), so that rank 0's end, and its store's, cuts none of them off in the
    read (before, under load, a rank read the word after the store had ended: torch's C++ warnings, 16 lines, and
    "rank 0 did not say", not why: ``test_cli_campaign_errors.py``, 3 ranks, one never started)."""
    deadline = time.monotonic() + READ_S
    while store.add(f"{key}/read", 0) < readers and time.monotonic() < deadline:
        if poll is not None:
            poll()
        time.sleep(0.05)


def _joined(store: Any, key: str, rank: int, size: int, seconds: float, where: str) -> None:
    """A rank other than 0: wait up to ``seconds`` for rank 0's word (:func:`_say_joined`); a
    :class:`~triton_dist_tune.errors.GroupTimeoutError` where some rank did not take part, or no word came."""
    try:
        store.set_timeout(timedelta(seconds=seconds))
        word = json.loads(store.get(key))
        waited, missing = float(word["waited_s"]), [int(r) for r in word["missing"]]
    except Exception as exc:
        raise GroupTimeoutError(f"init_distributed: rank {rank} took part, but rank 0 did not say within {seconds:g} "
                                f"s whether every rank of the job's {size} did, at {where} (rank 0 ended, or the "
                                f"store was lost: {describe_error(exc)}) {LONGER}") from None
    if missing or word.get("halted"):
        try:  # rank 0 waits for this count before it ends (:func:`_wait_read`)
            store.add(f"{key}/read", 1)
        except Exception:
            pass
    if word.get("halted"):
        raise AutotuneError(f"init_distributed: rank {rank} took part, but rank 0 ended the job's start at "
                            f"{where}: {str(word['halted'])[:2000]}")
    if missing:
        raise GroupTimeoutError(f"init_distributed: rank {rank} took part, but rank 0 waited {waited:g} s for ranks "
                                f"{missing} of the job's {size} to join at {where}; {NEVER} {LONGER}")


def named_by_each_group() -> bool:
    """Whether each group of the tuner names the attempt itself (:class:`Naming` among its ranks, at its first
    exchange): the job started torch.distributed itself (no :func:`agree`) under torchrun on several nodes, where
    the restart count is each node's agent's own and an agent restarts its workers for a membership change
    without counting it."""
    return _agreed is None and (settings.launcher().agents or 1) > 1


def current() -> str:
    """This attempt's name: agreed by :func:`agree` in this process, else the launcher's restart count."""
    return _agreed if _agreed is not None else (settings.launcher().restart_count or "0")
