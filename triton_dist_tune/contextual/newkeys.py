"""Whether a call that was not going to tune tunes the undecided keys its ranks met: decided by the ranks that met
one, with no communication in a call where no rank met one.

A call that does not tune (a *hot* call on a group) runs each launch of a (kernel, key) the group has not decided
with the first config its pruning keeps. At the end of such a run, a rank that met undecided keys *settles* each
of them in the job's key-value store, under a name made of the group, the function, the call number (the same on
every rank: every rank calls the function the same number of times) and the key:

1. ``add(count, 1)``: the rank whose addition makes the count the group's size knows that every rank met the key
   in this call, and writes the decision ``now`` with ``compare_set(decision, "", "now")``;
2. any other rank waits for the decision at most ``TRITON_DIST_AUTOTUNE_NEW_KEY_GRACE`` seconds, then writes
   ``later`` with ``compare_set(decision, "", "later")`` (a no-op when a decision is there);
3. every rank reads the decision that ``compare_set`` returns: the first writer's, the same on every rank.

``now`` is written only once every rank has added, so every rank of the group met the key and reads ``now``:
they all continue the call as a tuning call (the next step is the usual exchange, matched on every rank). A rank
that reads ``later`` for every key it met returns at once; so does every rank that met none (it makes no request
at all), and no rank reads ``now`` then (it would mean that every rank met that key). A key left ``later`` runs
with the first kept config and stays *pending* on the ranks that met it until the group decides it: a rank settles
it again (waiting the grace) only in the 2nd, 4th, 8th ... hot call that meets it after the group's last agreement
(other calls meeting it neither settle it nor wait), and offers it at the next agreement (every ``sync_every``
calls). An agreement
that finds pending keys makes that call and the next ``sync_every - 1`` tuning calls on every rank, until every
key offered is decided, so a key met only in calls that are not agreement points is tuned in one of them.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import settings

if TYPE_CHECKING:
    from ..group.channel import Group
    from .tracks import TrackId

log = logging.getLogger("triton_dist_tune")


def can_settle(group: Group) -> bool:
    """Whether ``group`` has a key-value store to settle new keys in (torch groups; not mpi4py, not alone)."""
    return group.size > 1 and callable(getattr(group, "key", None)) and hasattr(group, "store")


def settle(group: Group, label: str, call: int, log: logging.Logger, met: list[TrackId]) -> bool:
    """Settle the undecided keys this rank met in this run of call number ``call`` of the function ``label``
    names (see the module docstring): True when the group tunes them now (then it does on every rank). Logged in
    ``log``."""
    store, started, what = group.store, time.monotonic(), f"{label} call {call}: settling new keys"

    def ask(request: Callable[[], Any]) -> Any:  # a lost store is the tuner's GroupTimeoutError, as at an exchange
        channel = getattr(group, "_request", None)
        return channel(request, what, started) if channel is not None else request()

    names = {tid: group.key(f"newkey/{_digest(label, call, tid)}") for tid in met}
    group.promise_next_exchange()  # this rank's count may complete a key's: its peers then go on to tune
    try:
        for name in names.values():
            if ask(lambda name=name: store.add(name + "/n", 1)) >= group.size:
                ask(lambda name=name: store.compare_set(name + "/d", "", "now"))
        deadline = time.monotonic() + settings.current().new_key_grace
        waiting, pause = [names[tid] + "/d" for tid in met], 0.001
        while waiting and time.monotonic() < deadline:
            waiting = [key for key in waiting if not ask(lambda key=key: store.check([key]))]
            if waiting:
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(2 * pause, 0.02)
        now = [tid for tid, name in names.items()
               if ask(lambda name=name: store.compare_set(name + "/d", "", "later")) == b"now"]
    except BaseException as exc:
        if not isinstance(exc, Exception):  # an interruption: where "later" wins every key, no peer goes on
            _later_or_promised(group, list(names.values()))
        raise
    group.promise_next_exchange(bool(now))  # (kept until the tuning's first exchange, the journals', begins)
    log.info("%s call %d: undecided key(s) met here: %s; %s", label, call, "; ".join(f"{k} {t}" for k, t in met),
             f"every rank met {len(now)}: tuned in this call" if now else "tuned later")
    return bool(now)


def _later_or_promised(group: Group, names: list[str]) -> None:
    """An interruption of this rank inside :func:`settle`: it writes ``later`` for each key (a no-op where a
    decision is there) and withdraws its promise where no key is ``now``, so its peers return from the call too and
    it tells them nothing; where one is ``now`` they go on to tune, and its promise stands: its "left" record lies
    at their next exchange, and they raise ``RankFailedError`` there at once (before, it sent nothing, having begun
    no exchange, and they waited ``T + T/10`` at the journal exchange: ``test_newkey_interrupted.py``). Best
    effort: a request that fails leaves the promise standing."""
    try:
        found = [bytes(group.store.compare_set(name + "/d", "", "later")) for name in names]  # type: ignore
    except Exception as exc:
        log.debug("triton_dist_tune: could not settle the new keys after an interruption: %s", exc)
        return
    if b"now" not in found:
        group.promise_next_exchange(False)


def _digest(label: str, call: int, tid: TrackId) -> str:
    return hashlib.sha256(f"{label}\n{call}\n{tid[0]}\n{tid[1]}".encode()).hexdigest()[:24]
