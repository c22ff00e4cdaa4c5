"""A track's measurements as tables: the rows of its decision (disk cache, ``tuner.decisions``, the log) and the
typed outcomes of the summary group rank 0 prints. Reads a :class:`~triton_dist_tune.contextual.schedule.Track`,
changes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..records import Outcome

if TYPE_CHECKING:
    from .schedule import Track


def outcomes(track: Track, own_rank: int | None = None) -> list[Outcome]:
    """The track's table as typed outcomes, one per config in the order tried (measured, failed or pruned); each
    measured one's ``own`` time is group rank ``own_rank``'s (the summary's rank column: before, a contextual
    summary showed ``-`` there in every row)."""
    result = []
    for i in track.order:
        if i in track.times:
            ranks = sorted(track.per_rank.get(i, {}))
            state, samples = raced(track, i)
            result.append(Outcome(i, track.descriptions[i], state, time=track.times[i],
                                  spread=track.spreads.get(i), per_rank=[track.per_rank[i][r] for r in ranks] or None,
                                  samples=samples, resumed=i in track.resumed,
                                  own=track.per_rank.get(i, {}).get(own_rank),
                                  per_rank_of=ranks if ranks and ranks != list(range(len(ranks))) else None))
        elif i in track.failed:
            result.append(Outcome(i, track.descriptions[i], "failed", error=track.failed[i]))
        else:
            result.append(Outcome(i, track.descriptions[i], "pruned"))
    return result


def raced(track: Track, index: int) -> tuple[str, int]:
    """A measured config's state in the race (``measured``: ran to the end, ``stopped``: left it as clearly slower)
    and its number of timed samples (0 for one resumed from a journal)."""
    race = track.race
    if race is None or index in track.resumed or index not in race.entrants:
        return "measured", 0
    entrant = race.entrants[index]
    return ("stopped" if entrant.state == "stopped" else "measured"), len(entrant.timed())


def table(track: Track) -> list[dict[str, Any]]:
    """One row per config in the order tried: index, config, state (measured, resumed, failed or skipped), group
    time, spread, per-rank medians and the ranks they are of, timed samples (``show``'s column), error."""
    rows = []
    for i in track.order:
        state = raced(track, i)[0] if i in track.times else "failed" if i in track.failed else "skipped"
        if i in track.resumed:
            state = "resumed"
        rows.append({"index": i, "config": track.descriptions[i], "state": state, "time": track.times.get(i),
                     "spread": track.spreads.get(i),
                     "per_rank": [track.per_rank[i][r] for r in sorted(track.per_rank[i])] if i in track.per_rank
                     else None, "per_rank_of": sorted(track.per_rank[i]) if i in track.per_rank else None,
                     "samples": raced(track, i)[1] if i in track.times else 0, "error": track.failed.get(i)})
    return rows
