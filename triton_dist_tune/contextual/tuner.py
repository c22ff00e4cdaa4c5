"""The state behind one function decorated with :func:`~triton_dist_tune.contextual.contextual_autotune`, across
its calls: which group it tunes with, the calls counted per group, and the agreement every ``sync_every`` calls
that decides whether a call tunes (each call itself is a :class:`~triton_dist_tune.contextual.session.Session`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..disk import logs
from ..group.channel import Group, SingleGroup
from ..group.resolve import resolve_group
from . import intercept
from .hot import HotCall
from .options import ContextualOptions
from .session import Session
from .tracks import TrackId, group_choice

_ALONE = SingleGroup()
_dist: Any = None


def _world() -> Any:
    """The default torch.distributed group object, or None (torch imported once)."""
    global _dist
    if _dist is None:
        import torch.distributed as dist

        _dist = dist
    return _dist.group.WORLD if _dist.is_available() else None


class ContextualTuner:
    """The state behind one function decorated with :func:`~triton_dist_tune.contextual.contextual_autotune`."""

    def __init__(self, fn: Callable[..., Any], options: ContextualOptions) -> None:
        self.fn, self.options = fn, options
        #: (track id, key text) -> the group's decision and its table of measurements
        self.decisions: dict[TrackId, dict[str, Any]] = {}
        #: runs of the function in the last call
        self.last_runs = 0
        #: calls in which the group agreed to tune (pending keys), for inspection
        self.agreed_calls: list[int] = []
        #: group identity -> {(autotuner id, key): (track id, local default index)}: keys met in hot calls that the
        #: group has not decided, run with a local default until the group's next agreement
        self.pending: dict[tuple, dict[tuple[int, tuple], tuple[Any, int]]] = {}
        #: group identity -> the undecided keys this rank met in hot calls since the group's last agreement, with
        #: (how many calls met it, the last of them): settled (:mod:`~.newkeys`) in the 1st, 2nd, 4th ... of those
        #: calls only, and offered at the next agreement
        self.met_since: dict[tuple, dict[TrackId, tuple[int, int | None]]] = {}
        #: group identity -> the first call after the tuning window opened by the last agreement that found pending
        #: keys: calls before it tune on every rank (a key met off the agreement points is met in one of them)
        self.window_end: dict[tuple, int] = {}
        #: group identity -> the keys every rank offered at that agreement (the window ends once all are decided)
        self.offered: dict[tuple, list[TrackId]] = {}
        #: group identity -> the group ranks on this rank's node (found once, when compiling ahead first splits)
        self.nodes: dict[tuple, list[int]] = {}
        self._called: set[tuple] = set()
        self._group: tuple[Any, Group] | None = None
        self._calls: dict[tuple, int] = {}

    def group(self) -> Group:
        """The group this function tunes with: alone, the default group, or the given one (resolved again only
        when the default group object changes)."""
        is_dist = self.options.is_dist
        if is_dist is False or is_dist is None:
            return _ALONE
        source = _world() if is_dist is True else is_dist
        cached = self._group
        if cached is not None and cached[0] is source:
            return cached[1]
        group = resolve_group(None if is_dist is True else is_dist)
        group = _ALONE if group.size == 1 else group
        self._group = (source, group)
        return group

    def __call__(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        group = self.group()
        outer = intercept.active_handler()
        if isinstance(outer, (Session, HotCall)) and outer.group is group:
            return self.fn(*args, **kwargs)  # nested in a call of the same group: that call handles our launches
        gid = group.identity
        calls = self._calls[gid] = self._calls.get(gid, 0) + 1
        tuning = gid not in self._called or (group.size > 1 and (
            self._in_window(group, calls)  # the tuning window of the last agreement: every rank alike
            or (calls % self.options.sync_every == 0 and self._agree(group, calls))))
        if not tuning:
            return HotCall(self, group, calls).call(args, kwargs)
        session = Session(self, group, tuning, calls)
        try:
            out = session.call(args, kwargs)
        finally:
            self.last_runs = session.runs
        self._called.add(gid)
        return out

    def _agree(self, group: Group, calls: int) -> bool:
        """Every ``sync_every`` calls, one exchange: does any rank hold pending keys (met in hot calls since the
        last agreement and still undecided)? Then this call and the next ``sync_every - 1`` tune, on every rank
        alike: a pending key is tuned in whichever of them meets it (a key met only off the agreement points
        included). A pending key stays pending until the group decides it; one not met again since the last
        agreement is dropped from the offer (met again, it is pending again)."""
        gid = group.identity
        met = self.met_since.pop(gid, {})
        pending = self.pending.get(gid, {})
        for slot, (tid, _) in list(pending.items()):  # decided, or not met since the last agreement: not pending
            if group_choice(group, tid) is not None or tid not in met:
                del pending[slot]
        mine = sorted({tid for tid, _ in pending.values()})
        everyone = group.allgather([list(tid) for tid in mine], f"{self.options.label} agreement at call {calls}",
                                   timeout=self.options.timeout)
        if not any(everyone):
            return False
        self.agreed_calls.append(calls)
        self.window_end[gid] = calls + self.options.sync_every
        self.offered[gid] = sorted({(str(k), str(t)) for offer in everyone for k, t in offer})
        logs.rank_log().info("%s call %d: the group tunes pending key(s) until they are decided, at most in calls %d "
                             "to %d: %s", self.options.label, calls, calls, calls + self.options.sync_every - 1,
                             "; ".join(f"rank {r}: {', '.join(f'{k} {t}' for k, t in p)}"
                                       for r, p in enumerate(everyone) if p))
        return True

    def _in_window(self, group: Group, calls: int) -> bool:
        """Whether this call is in the tuning window of the last agreement: before its end, with a key offered
        then still undecided (the same answer on every rank: the offer and the decisions are the group's)."""
        gid = group.identity
        if calls >= self.window_end.get(gid, 0):
            return False
        return any(group_choice(group, tid) is None for tid in self.offered.get(gid, []))
