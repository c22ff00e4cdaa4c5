"""How much slower a settled leader's calls average than its median says: its samples holding a slower level too
(:func:`slower_level`), or a slower output placement (:func:`placement_level`); see "Two levels" and "Placements"
in :mod:`~triton_dist_tune.measure.race`, which ranks such a leader by what its calls average."""

from __future__ import annotations

from collections.abc import Sequence

from ..stats import INDIFFERENCE, median


def slower_level(ratios: Sequence[float]) -> float:
    """How much slower a settled leader's calls average than its median says (see "Two levels" in
    :mod:`~triton_dist_tune.measure.race`), from its ``ratios`` to the other leaders of each round: their mean with
    the largest left out (one spike is noise; a level is several samples) over their median, where that is more than
    :data:`~triton_dist_tune.stats.INDIFFERENCE` above 1; else 1."""
    if len(ratios) < 3:
        return 1.0
    rest = sorted(ratios)[:-1]
    return _raised(sum(rest) / len(rest), median(ratios))


def placement_level(placed: Sequence[tuple[int, float]]) -> float:
    """How much slower a settled leader's calls average over its output placements than its median says (see
    "Placements" in :mod:`~triton_dist_tune.measure.race`), from its (placement, ratio to the other leaders)
    samples: the mean over its placements of each one's least ratio (a one-off spike is noise), over their median
    (least against least: a least sample reads under a median one by the noise alone, which would hide a slow
    placement), where at least two placements were timed and that is more than
    :data:`~triton_dist_tune.stats.INDIFFERENCE` above 1; else 1."""
    least: dict[int, float] = {}
    for placement, ratio in placed:
        least[placement] = min(ratio, least.get(placement, ratio))
    if len(least) < 2:
        return 1.0
    return _raised(sum(least.values()) / len(least), median(list(least.values())))


def _raised(mean: float, centre: float) -> float:
    """``mean`` over ``centre`` where that is more than :data:`~triton_dist_tune.stats.INDIFFERENCE` above 1, else 1."""
    factor = mean / centre if centre > 0 else 1.0
    return factor if factor > 1 + INDIFFERENCE else 1.0
