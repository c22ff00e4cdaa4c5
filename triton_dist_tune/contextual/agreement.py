"""The agreement of a ``contextual_autotune`` function's ranks every ``sync_every`` calls: whether any rank holds
pending keys, and so whether this call and the next ``sync_every - 1`` tune on every rank alike."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..disk import logs
from ..group.calls import calling
from ..group.leaving import result_kept_if_interrupted
from .tracks import group_choice

if TYPE_CHECKING:
    from ..group.channel import Group
    from .state import TunerState


def agree(tuner: TunerState, group: Group, calls: int) -> bool:
    """Every ``sync_every`` calls, one exchange: does any rank hold pending keys (met in hot calls since the
    last agreement and still undecided)? Then this call and the next ``sync_every - 1`` tune, on every rank
    alike: a pending key is tuned in whichever of them meets it (a key met only off the agreement points
    included). A pending key stays pending until the group decides it; one not met again since the last
    agreement is dropped from the offer (met again, it is pending again)."""
    gid = group.identity
    tuner.agreement_made(gid)
    with tuner.meeting:  # hot calls of other threads meet keys meanwhile (launches.pending_launch)
        met = tuner.met_since.pop(gid, {})
        pending = tuner.pending.get(gid, {})
        for slot, (tid, _) in list(pending.items()):  # decided, or not met since the last agreement: not pending
            if group_choice(group, tid) is not None or tid not in met:
                del pending[slot]
        mine = sorted({tid for tid, _ in pending.values()})
    step = f"{tuner.options.label} agreement at call {calls}"
    with calling(tuner.options.name):
        group.raise_if_counted_out(step, tuner.options.timeout)  # made once: where its peers raised here without it
        with result_kept_if_interrupted(  # (its message written: the peers applied it; read at the next call)
                group, lambda late: _agreed(tuner, group, calls, late, " (read at this rank's next call)"),
                lambda: tuner.left_unread(group)):
            everyone = group.allgather([list(tid) for tid in mine], step, timeout=tuner.options.timeout)
    return _agreed(tuner, group, calls, everyone)


def _agreed(tuner: TunerState, group: Group, calls: int, everyone: list[Any], late: str = "") -> bool:
    """What the agreement at call ``calls`` gave (``everyone``: each rank's offer): whether this call and the
    next ``sync_every - 1`` tune. An interruption in the wait for it (the rank's message written, so its peers
    had it) leaves it to this rank's next call (``late``): applied there as its peers applied it, so that the
    rank tunes in the window's calls with them (before: its next calls ran hot, and its peers, tuning, waited
    ``T + T/10`` at the journal exchange, then raised ``ExchangeError``, its calls out of step with theirs)."""
    gid = group.identity
    if not any(everyone):
        return False
    tuner.agreed_calls.append(calls)
    tuner.window_end[gid] = calls + tuner.options.sync_every
    tuner.offered[gid] = sorted({(str(k), str(t)) for offer in everyone for k, t in offer})
    logs.rank_log().info("%s call %d%s: the group tunes pending key(s) until they are decided, at most in calls %d "
                         "to %d: %s", tuner.options.label, calls, late, calls, calls + tuner.options.sync_every - 1,
                         "; ".join(f"rank {r}: {', '.join(f'{k} {t}' for k, t in p)}"
                                   for r, p in enumerate(everyone) if p))
    return True
