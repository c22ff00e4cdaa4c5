"""The state behind one function decorated with :func:`~triton_dist_tune.contextual.contextual_autotune`, across
its calls: which group it tunes with, the calls counted per group, and the agreement every ``sync_every`` calls
that decides whether a call tunes (each call itself is a :class:`~triton_dist_tune.contextual.session.Session`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .. import settings
from ..capture import capturing, tuning_in_capture
from ..disk import logs
from ..errors import BadInputError
from ..group.calls import calling
from ..group.channel import Group
from ..group.resolve import alone, resolve_group
from ..group.store_texts import said_as
from ..group.threads import holds_a_turn
from . import intercept
from .agreement import agree
from .hot import TUNE_AHEAD, HotCall
from .options import ContextualOptions
from .session import Session
from .state import TunerState
from .tracks import group_choice

log = logging.getLogger("triton_dist_tune")

_ALONE = alone()  # autotune's too: tunings alone take turns on its lock
_active = intercept._ACTIVE.get
_dist: Any = None
_warned = False


def _world() -> Any:
    """The default torch.distributed group object, or None (torch imported once)."""
    global _dist
    if _dist is None:
        import torch.distributed as dist

        _dist = dist if dist.is_available() else False
    return _dist.group.WORLD if _dist else None


def _warn_not_initialized(options: ContextualOptions) -> None:
    """Once per process: the job has several ranks (a launcher's WORLD_SIZE) but torch.distributed is not
    initialized, so a contextual tuning with the default group runs alone on each rank."""
    global _warned
    world = settings.current().world_size
    if _warned or world is None or world <= 1:
        return
    _warned = True
    log.warning("triton_dist_tune: %s WORLD_SIZE is %d but torch.distributed is not initialized: each rank tunes "
                "alone and the ranks may choose differently; call triton_dist_tune.init_distributed() (or "
                "init_process_group) before the first call, or pass is_dist= a process group or an mpi4py "
                "communicator", options.label, world)


class ContextualTuner(TunerState):
    """The state behind one function decorated with :func:`~triton_dist_tune.contextual.contextual_autotune`
    (:class:`~.state.TunerState`), and its calls: the group it tunes with, the calls counted per group, the
    agreement every ``sync_every`` calls."""

    def __init__(self, fn: Callable[..., Any], options: ContextualOptions) -> None:
        super().__init__(fn, options)
        self._called: set[tuple] = set()
        #: group identities where an interruption left the result of an exchange of this function's call unread on
        #: this rank (:meth:`left_unread`): the next call reads it first, even one that would run hot
        self._unread: set[tuple] = set()
        self._group: tuple[Any, Group] | None = None
        self._default = options.is_dist is None or options.is_dist is True
        #: group identities whose agreement (every ``sync_every`` calls) fell in a CUDA-graph capture: made at the
        #: next call outside one (every rank captures the same calls, so every rank makes it at the same call)
        self._due: set[tuple] = set()
        self._calls: dict[tuple, int] = {}
        #: held while a call takes its number and decides whether it tunes: threads calling at once each get one of
        #: their own (a number taken twice would move this rank's agreements, which fall on call numbers, off its
        #: peers'), and decide in the order of their numbers (see ``_after_earlier``)
        self._counting = threading.Lock()
        #: on :attr:`_counting`: a call waiting for earlier ones (``_after_earlier``) wakes when one decides or ends
        #: (a plain lock for the hot path, which enters no Python function to take it)
        self._changed = threading.Condition(self._counting)
        #: group identity -> {call number: its agreement is still to be made} of the calls tuning or agreeing now
        self._tuning: dict[tuple, dict[int, bool]] = {}
        #: group identity -> the numbers of the calls waiting for earlier ones to decide whether they tune
        self._waiting: dict[tuple, set[int]] = {}
        #: group identity -> the numbers of the calls begun and not ended, hot ones included: a hot call may meet a
        #: key no rank has decided at any launch of its run, and settle it at its end, so a call that may tune (or a
        #: settling call) waits for every earlier one to end, not only for those that met such a key already (which
        #: depends on each rank's timing: see ``_decidable``)
        self._open: dict[tuple, set[int]] = {}
        #: how many calls sleep on :attr:`_changed` now (``_after_earlier``, ``settle_turn``): a call that ends wakes
        #: them (it may be the earlier call they wait for), and takes the lock to do so only while one sleeps
        self._sleeping = 0

    def group(self) -> Group:
        """The group this function tunes with: alone (``is_dist=False``), the given one, or the default group
        (``is_dist=True``, and by default): the default torch.distributed group when it is initialized, else this
        process alone (with a warning naming ``is_dist`` once when a launcher says the job has several ranks).
        Resolved again only when the default group object changes."""
        is_dist = self.options.is_dist
        if is_dist is False:
            return _ALONE
        default = is_dist is None or is_dist is True
        source = _world() if default else is_dist
        cached = self._group
        if cached is not None and cached[0] is source:
            return cached[1]
        if source is None:  # torch.distributed not initialized: alone
            _warn_not_initialized(self.options)
            return _ALONE
        try:
            # a wrong group's note is about this function's calls; an mpi4py channel's setup that runs out names
            # a contextual function's causes
            with calling(self.options.name), said_as("contextual"):
                group = resolve_group(None if default else is_dist)
        except BadInputError as exc:  # named as this decorator's option, not autotune's call keyword
            raise BadInputError(str(exc).replace("autotune_pg", "is_dist")) from exc
        self._group = (source, group)
        return group

    def __call__(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        cached = self._group
        if self.options.is_dist is False:
            group = _ALONE
        elif cached is not None and cached[0] is (_dist.group.WORLD if self._default else self.options.is_dist):
            group = cached[1]  # the common case, without a call to group()
        else:
            group = self.group()
        outer = _active()
        if outer is not None and isinstance(outer, (Session, HotCall)) and outer.group is group:
            return self.fn(*args, **kwargs)  # nested in a call of the same group: that call handles our launches
        gid = group.identity
        with self._counting:
            calls = self._calls[gid] = self._calls.get(gid, 0) + 1
            opened = self._open.get(gid)
            if opened is None:
                opened = self._open[gid] = set()
            if self._tuning.get(gid) or self._waiting.get(gid) or (opened and self._may_tune(group, calls)):
                self._after_earlier(group, calls)  # an earlier call tunes, or may settle a key: it may decide ours
            first = gid not in self._called  # (inline: the hot path enters no Python function here; _first_due)
            due = group.size > 1 and (calls % self.options.sync_every == 0 or gid in self._due)
            window = group.size > 1 and self._in_window(group, calls)  # the last agreement's tuning calls
            late = gid in self._unread  # a result this rank's interrupted call left unread: read first, in the turn
            tunes = (first or due or window or late) and not capturing()
            if tunes:
                self._tuning.setdefault(gid, {})[calls] = due
            opened.add(calls)  # (last, under the lock: a later call sees it; nothing between here and try raises)
        try:
            if late and not tunes:  # in a CUDA-graph capture: a read of the store only, nothing launched
                with group.turn(), said_as("contextual"):
                    first, window = self._read_late(group, calls)
            if (first or due or window) and not tunes:  # in a CUDA-graph capture: no tuning, no store, no exchange
                if first:
                    raise tuning_in_capture(self.options.name, "this is its first call, which tunes every kernel "
                                            "key it meets", TUNE_AHEAD)
                if due:
                    self._due.add(gid)  # the group's agreement waits for the next call outside a capture
            elif tunes:
                # the agreement and the tuning call are exchanges: threads of this process take turns on the group
                # (as autotune tunings do), so that their exchanges never interleave (see Group.turn); alone too, so
                # that two threads never tune one key at once (the later one's session, finding it decided by the
                # other, would stall and end it unmeasured, replacing the choice)
                try:  # (a wait that runs out names a contextual function's causes: said_as)
                    with group.turn(), said_as("contextual"):
                        try:
                            if late or group.has_unread():
                                first, window = self._read_late(group, calls)
                            tune = first or window or (due and agree(self, group, calls))
                        finally:
                            self._ended(gid, calls, agreement_only=True)
                        if tune:
                            return self._tune(group, calls, args, kwargs)
                finally:
                    self._ended(gid, calls)
            return HotCall(self, group, calls).call(args, kwargs)
        finally:
            opened.discard(calls)
            if self._sleeping:  # a later call may wait for this one to end (it counted itself before its look)
                with self._counting:
                    self._changed.notify_all()

    def _read_late(self, group: Group, calls: int) -> tuple[bool, bool]:
        """(In the group's turn.) A run's exchange this rank's interrupted call left unread: applied first, as on its
        peers (:func:`~.exchange.applied_late`); returns whether call ``calls`` is still the group's first and in
        a tuning window. Read by whichever call of this function comes next (before: only by one that would tune:
        after a call that was not the group's first, the next ones ran hot with the keys of that exchange
        undecided here, each with a local default, where the peers ran the group's choice, until the next
        agreement, ``sync_every`` calls on)."""
        if group.has_unread():
            group.read_unread()  # (an interruption of the read leaves it, and this function's mark, to the next call)
        self._unread.discard(group.identity)
        return group.identity not in self._called, self._in_window(group, calls)

    def left_unread(self, group: Group) -> None:
        """:meth:`~.state.TunerState.left_unread`: this function's next call on ``group`` reads it first."""
        self._unread.add(group.identity)

    def _may_tune(self, group: Group, calls: int) -> bool:
        """(``self._counting`` held.) Whether call ``calls`` may tune, by what every rank knows alike: the group's
        first call, an agreement, or a call before the end of the last agreement's tuning window (whether it
        tunes then depends on whether the keys offered are decided yet: ``_in_window``)."""
        first, due = self._first_due(group, calls)
        return first or due or calls < self.window_end.get(group.identity, 0)

    def _first_due(self, group: Group, calls: int) -> tuple[bool, bool]:
        """Whether call number ``calls`` is the group's first (no call tuned to its end yet) and whether the
        group's agreement falls on it (every ``sync_every`` calls, or the first call outside a capture after one
        that fell in a capture)."""
        gid = group.identity
        return gid not in self._called, group.size > 1 and (calls % self.options.sync_every == 0 or gid in self._due)

    def _after_earlier(self, group: Group, calls: int) -> None:
        """(``self._counting`` held.) Wait until call ``calls`` can decide whether it tunes from what every rank
        knows at that call: every earlier call has decided, and none still tuning or agreeing can change the
        answer (the group's first call, an agreement not yet made, a tuning in the window, which may decide the
        keys it waits for); a call that would tune waits for every earlier tuning call to end, so that the
        process's tuning calls take their turns in the order of their numbers, the same on every rank. Not a
        thread inside a tuning (holding a group's turn: the call it would wait for may wait for that turn), and
        at most the timeout; then the call decides from what it knows (logged)."""
        gid = group.identity
        if holds_a_turn():
            return
        waiting = self._waiting.setdefault(gid, set())
        waiting.add(calls)
        timeout = self.options.timeout or settings.current().timeout
        self._sleeping += 1
        try:
            if not self._changed.wait_for(lambda: self._decidable(group, calls), timeout):
                logs.rank_log().warning("%s call %d: waited %g s for earlier calls on other threads to end their "
                                        "tuning (calls %s); deciding whether it tunes without them", self.options.label,
                                        calls, timeout, sorted(self._tuning.get(gid, {})))
        finally:
            self._sleeping -= 1
            waiting.discard(calls)
            self._changed.notify_all()  # a later call may wait for this one to decide

    def _decidable(self, group: Group, calls: int) -> bool:
        """(``self._counting`` held.) Whether call ``calls`` can decide now (see ``_after_earlier``)."""
        gid = group.identity
        if any(n < calls for n in self._waiting[gid]):
            return False
        # (``_open``'s sets shrink without the lock, as calls end: read through a copy, taken in one step)
        if self._may_tune(group, calls) and any(n < calls for n in tuple(self._open.get(gid, ()))):
            # an earlier call not ended, hot ones included: a hot call's run may still meet a key no rank has
            # decided and settle it, which can decide the window's keys or be offered at an agreement. Before, only
            # calls that had met such a key were waited for: a hot call that met its key on one rank before a later
            # call decided and on the other after let that call decide by timing
            # (test_threads.py: test_an_agreement_beside_a_hot_call_that_meets_its_new_key_late_...)
            return False
        # (every call tuning or agreeing is open: a call that may tune has none before it now) an agreement not made
        # yet may open a tuning window this call falls in
        sync = self.options.sync_every
        return not any(agreeing and n < calls < n + sync for n, agreeing in self._tuning.get(gid, {}).items())

    def _ended(self, gid: tuple, calls: int, agreement_only: bool = False) -> None:
        """Call ``calls`` made its agreement (``agreement_only``: its tuning, if any, goes on) or ended."""
        with self._counting:
            tuning = self._tuning.get(gid, {})
            if agreement_only and calls in tuning:
                tuning[calls] = False
            else:
                tuning.pop(calls, None)
            self._changed.notify_all()

    def settling(self, gid: tuple, calls: int) -> None:
        """Hot call ``calls`` met a key this rank has not decided: it settles it (and may tune it) when its run ends,
        which can change the answer of later calls (a tuning window's key decided): in flight as a tuning call is,
        until :meth:`_ended`, so that later calls that would tune wait for it (``_after_earlier``)."""
        with self._counting:
            self._tuning.setdefault(gid, {})[calls] = False

    def settle_turn(self, group: Group, calls: int) -> None:
        """Before settling hot call ``calls`` takes the group's turn: wait until every earlier call has ended (hot ones
        too: one may still meet a new key of its own and settle it), so that settlements and tunings take their turns
        in the order of their numbers, the same on every rank (not a thread inside a tuning; at most the timeout,
        then logged)."""
        if holds_a_turn():
            return
        gid = group.identity
        timeout = self.options.timeout or settings.current().timeout
        with self._counting:  # (every earlier call not ended: its run may meet a new key of its own, see _decidable)
            self._sleeping += 1
            try:
                settled = self._changed.wait_for(lambda: not any(n < calls for n in (*self._open.get(gid, ()),
                                                                                      *self._waiting.get(gid, ()))),
                                                 timeout)
            finally:
                self._sleeping -= 1
            if not settled:
                logs.rank_log().warning("%s call %d: waited %g s for earlier calls on other threads to end (calls "
                                        "%s); settling its new keys without them", self.options.label, calls, timeout,
                                        sorted(n for n in tuple(self._open.get(gid, ())) if n < calls))

    def settled(self, gid: tuple, calls: int) -> None:
        """Settling hot call ``calls`` ended (see :meth:`settling`)."""
        self._ended(gid, calls)

    def _tune(self, group: Group, calls: int, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A tuning call (a :class:`~.session.Session` on every rank of the group)."""
        # a malformed variable, maybe on this rank only: read as its default, and raised on every rank by the journal
        # exchange, which carries it (gather_journals), never on this rank alone while the others wait for it
        with settings.overlooking(), calling(self.options.name):
            session = Session(self, group, True, calls)
            try:
                out = session.call(args, kwargs)
            finally:
                self.last_runs = session.runs
        return out

    def tuned(self, group: Group) -> None:
        """A tuning call on ``group`` ended on every rank (:meth:`~.state.TunerState.tuned`): the next calls run hot,
        but for agreements and their tuning windows (before, the call counted only once it returned: a rank
        interrupted at its summary's line made the group's first call again, alone, and waited ``T``)."""
        self._called.add(group.identity)

    def agreement_made(self, gid: tuple) -> None:
        """:meth:`~.state.TunerState.agreement_made`."""
        self._due.discard(gid)

    def _in_window(self, group: Group, calls: int) -> bool:
        """Whether this call is in the tuning window of the last agreement: before its end, with a key offered
        then still undecided (the same answer on every rank: the offer and the decisions are the group's)."""
        gid = group.identity
        if calls >= self.window_end.get(gid, 0):
            return False
        return any(group_choice(group, tid) is None for tid in self.offered.get(gid, []))
