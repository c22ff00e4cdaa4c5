"""What a rank of a torch group's channel (:mod:`.store`) says when it gives up on a silent peer, or leaves the
group's exchanges by an interruption; and the causes a wait for ranks that never arrived names, those of the tuner
whose call waited (:func:`said_as`; an mpi4py channel's wait names them too)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from .. import settings
from . import exits, store_silence
from .note import Note, Waiter
from .unresolved import NOTES

log = logging.getLogger("triton_dist_tune")

#: which tuner's call a thread's exchanges belong to: ``autotune``'s (and a campaign's) or ``contextual_autotune``'s
Tuner = Literal["autotune", "contextual"]
#: why a rank never arrived at an exchange, by the tuner whose call waited for it
LATE_CAUSES: dict[Tuner, str] = {
    "autotune": ("they crashed, hung, or called the tuned function with another autotune_pg, autotune_replicas or "
                 "key, or with autotune=False (which tunes nothing and says nothing to the group)."),
    "contextual": ("they crashed, hung, or did not make this call of the contextual_autotune function: they called it "
                   "fewer times than this rank (or never), or on another group (its is_dist= another group, or "
                   "False, on those ranks)."),
}
#: per thread: the tuner whose call its exchanges are in now (:func:`said_as`; "autotune" outside any)
_said = threading.local()


@contextmanager
def said_as(tuner: Tuner) -> Iterator[None]:
    """Within: a wait of this thread for ranks that never arrived names the causes of ``tuner``'s calls
    (:func:`late_causes`). A call of one tuner inside another's run marks itself in turn; the mark is restored as it
    ends. Nothing else changes: what the wait does, and when it raises, are the same for both tuners."""
    outer = getattr(_said, "tuner", "autotune")
    _said.tuner = tuner
    try:
        yield
    finally:
        _said.tuner = outer


def waited_opening(group: Any, what: str, seconds: str) -> str:
    """The opening every message of a wait of ``group``'s channel that ends in an error shares: who waited, how long,
    where."""
    return (f"triton_dist_tune: rank {group.rank} of group '{group.title}' (global ranks {group.global_ranks}) "
            f"waited {seconds} s at '{what}'")


def lost_store_message(group: Any, what: str, waited: float, exc: BaseException) -> str:
    """The error of a rank of ``group``'s channel whose store request at ``what`` failed: the store's host ended."""
    return (f"triton_dist_tune: rank {group.rank} of group '{group.title}' (global ranks {group.global_ranks}) "
            f"lost the key-value store after {waited:.1f} s at '{what}' ({type(exc).__name__}): the process "
            f"hosting it ({settings.store_host()}) {store_silence.lost_reason()}")


def late_causes() -> str:
    """Why ranks never arrived at this thread's exchange, as the tuner whose call it is in knows them."""
    return LATE_CAUSES[getattr(_said, "tuner", "autotune")]


def silent_message(waited: str, silent: Sequence[int], globals_: Sequence[int], window: float, quiet: float) -> str:
    """The error of a wait (``waited``: its opening, who waited how long where) that gives up on the group ranks
    ``silent`` (global ranks ``globals_``), whose beat stood still ``quiet`` s."""
    return (f"{waited}; group rank(s) {list(silent)} (global {list(globals_)}) showed no sign of life for "
            f"{silence(window, quiet)}")


def unresolved_message(waited: str, said: Mapping[int, str]) -> str:
    """The error of a wait (``waited``: its opening) stopped by the notes of late ranks (global rank -> what it
    raised) that will not come (:mod:`.unresolved`)."""
    ranks = "; ".join(f"global rank {g} raised {text}" for g, text in said.items())
    return f"{waited} for ranks that will not come: {ranks}"


def ended_message_of(waited: str, ended: Mapping[int, Note]) -> str:
    """The error of a wait (``waited``: its opening) for late ranks whose notes say that their process ended."""
    return f"{waited} for " + "; ".join(note.why_ended(g) for g, note in ended.items())


def silence(window: float, quiet: float) -> str:
    """How long a silent rank's beat stood still, and what that tells: ``quiet`` (as this rank saw it) is at least
    ``window``, said as the window, or less where this rank read the rank stopped after its collective with it broke
    (:meth:`~triton_dist_tune.group.store_board.StoreBoard.silent`)."""
    if quiet >= window:
        return f"{window:g} s: their process ended, was killed or is frozen."
    return (f"{quiet:.1f} s: their process ended or was killed (this rank's collective with them broke, and their "
            "beat stands still).")


def late_message(waited: str, missing: Sequence[int], group_ranks: Sequence[int], torch_name: str | None = None) -> str:
    """The error of a wait (``waited``: its opening) that ran out with the group ranks ``missing`` not there (of a
    group of global ranks ``group_ranks``), and why such ranks never arrive, by the tuner whose call waited
    (:func:`late_causes`); those whose process is known ended (:func:`~.exits.counted_out_of`: it counted out, an
    exit, without coming) or gone (:func:`~.exits.gone_of`: killed on this host before they came, where no board
    beat could tell) are named so. ``torch_name``: torch's name of the group on this rank, where it is not the
    default group and the wait is at the group's first exchange (ranks that name a group otherwise never complete
    one): a number (torch's ``new_group`` counts its calls on each rank) adds that cause, which no rank can see
    (:func:`named_by_order`), unless every missing rank is known ended or gone."""
    globals_ = [group_ranks[rank] for rank in missing]
    out = exits.counted_out_of(missing, group_ranks)
    gone = {**out, **exits.gone_of([rank for rank in missing if rank not in out], group_ranks)}
    said = "; ".join(f"group rank {rank} (global {group_ranks[rank]}) {gone[rank]}" for rank in sorted(gone))
    return (f"{waited} for group ranks {list(missing)} (global {globals_}), which never arrived: {late_causes()}"
            + (f" Gone: {said}." if said else "") + ("" if gone and len(gone) == len(missing) else
                                                     named_by_order(torch_name)))


def gone_message(waited: str, gone: Mapping[int, str], missing: Sequence[int], group_ranks: Sequence[int],
                 timeout: float) -> str:
    """The error of a wait (``waited``: its opening) that ended before its deadline (``timeout`` s) because the group
    ranks ``gone`` (of those ``missing``; group rank -> how it ended: :mod:`.departed`) are known gone: such a rank
    never comes. The other missing ranks, merely late as far as this rank can tell, are named too."""
    globals_ = [group_ranks[rank] for rank in gone]
    said = "; ".join(f"group rank {rank} (global {group_ranks[rank]}) {why}" for rank, why in gone.items())
    others = [rank for rank in missing if rank not in gone]
    also = (f" Also missing, not known gone: group ranks {others} (global {[group_ranks[r] for r in others]})."
            if others else "")
    return (f"{waited} for group ranks {list(gone)} (global {globals_}), which will not come: Gone: {said}. This "
            f"rank stopped waiting as soon as it read that, not at its deadline ({timeout:g} s).{also}")


def named_by_order(torch_name: str | None) -> str:
    """Where torch named a group by the order of ``new_group`` calls (its name a number), one more cause of ranks
    that never arrive: the group's channel lives under its name, and a rank that created its groups in another order
    names this group otherwise, so its exchanges never meet this rank's (each side waits for the other). Torch
    checks nothing of the order where the groups' creations still pair up (the same ranks), or until a collective.
    Names that ``use_local_synchronization=True`` gives (a hash of the ranks) cannot differ that way: nothing."""
    if torch_name is None or not torch_name.isdigit():
        return ""
    return (f" Or they know this group by another name: torch named it '{torch_name}' here, by the order of this "
            "rank's new_group calls, and a rank that created its groups in another order names it otherwise; create "
            "the groups in the same order on every rank (or with use_local_synchronization=True).")


def left_message(rank: int, global_rank: int, title: str, last: str, interruption: BaseException,
                 told: str | None = None) -> str:
    """What the peers of group rank ``rank`` raise (:class:`~triton_dist_tune.errors.RankFailedError`) when it left
    the call it was in on group ``title`` by ``interruption`` (Ctrl-C's ``KeyboardInterrupt``, ``sys.exit``'s
    ``SystemExit``, a cancelled task's ``CancelledError``), its last exchange being ``last`` ("" for none);
    ``told``: what it posted on the tuning's failure board of that interruption (the config it was in), if any."""
    said = told or f"group rank {rank} was interrupted ({type(interruption).__name__})"
    after = f"after its exchange at '{last[:200]}'" if last else "before its first exchange"
    return (f"{said} {after}; group rank(s) [{rank}] left the tuning (global rank {global_rank} of group '{title}'): "
            "it comes to no later exchange of that call. No config is blamed (an interruption): the ranks are in "
            "step again, and a call again on every rank tunes the key")


def withdrawn_notes(store: Any, global_ranks: Sequence[int], late: Sequence[int], where: Waiter) -> str:
    """For a timeout's message: the notes of the late group ranks ``late`` (of a group of ``global_ranks``)
    withdrawn before this wait began, the rank going on to other groups
    (:meth:`~triton_dist_tune.group.unresolved.Notes.withdrawn_before`: no rule tells whether this wait was for the
    call such a note was about, so none stopped it), quoted as a likely cause; best effort (nothing on a store
    error)."""
    try:
        notes = NOTES.withdrawn_before(store, [global_ranks[r] for r in late], where)
    except Exception as exc:  # the store is gone: the timeout's message stands alone
        log.debug("triton_dist_tune: could not read the late ranks' withdrawn notes: %s", exc)
        return ""
    return "".join(note.why_withdrawn(g, where.since) for g, note in notes.items())
