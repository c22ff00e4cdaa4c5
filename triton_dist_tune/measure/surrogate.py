"""A model of a config space's landscape, fitted to the times screened so far: which unscreened configs are likely to
beat the finalists (the search's last check before it ends; :mod:`~triton_dist_tune.measure.search`).

The model is additive on the parameter grid (:class:`~triton_dist_tune.measure.grid.Grid`): the log of a config's
time is a mean, plus one effect per parameter value, plus one effect per pair of values of every two parameters
(a 128-row tile is good with 64-column tiles and bad with 256). It is fitted by backfitting with shrinkage: each
effect in turn becomes the shrunk mean residual of the configs that share its value(s), for a fixed number of
sweeps in a fixed order. Pure Python over sorted inputs, so every rank fits the same numbers from the same times.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import combinations

from .grid import Grid

#: passes over every effect; shrinkage: an effect seen in n configs is their mean residual times n / (n + SHRINK)
SWEEPS, SHRINK = 10, 1.0


class AdditiveModel:
    """log(time) ~ mean + one effect per parameter value + one per pair of values (see the module docstring)."""

    def __init__(self, grid: Grid, pairs: bool = True) -> None:
        self.grid = grid
        axes = range(len(grid.names))
        #: one term per parameter, and (``pairs``) one per two parameters; without pairs the model has few effects
        #: and pools many configs into each: what denoising a screening needs (:mod:`~.search`)
        self.terms: list[tuple[int, ...]] = [(a,) for a in axes] + (list(combinations(axes, 2)) if pairs else [])
        self.mean = 0.0
        self.effects: list[dict[tuple[int, ...], float]] = [{} for _ in self.terms]

    @staticmethod
    def _cell(term: tuple[int, ...], point: tuple[int, ...]) -> tuple[int, ...]:
        return (point[term[0]],) if len(term) == 1 else (point[term[0]], point[term[1]])

    def fit(self, times: Mapping[int, float | None]) -> bool:
        """Fit to the screened ``times`` (None: failed, left out); False when nothing usable was screened."""
        points = [(self.grid.point[i], math.log(t)) for i, t in sorted(times.items())
                  if t is not None and t > 0 and i in self.grid.point]
        if not points:
            return False
        self.mean = math.fsum(y for _, y in points) / len(points)
        residual = [y - self.mean for _, y in points]
        # each term's cells numbered once: per point, its cell's number; per cell, its count (fixed for the fit)
        numbered: list[list[int]] = []
        cells: list[list[tuple[int, ...]]] = []
        for term in self.terms:
            number: dict[tuple[int, ...], int] = {}
            numbered.append([number.setdefault(self._cell(term, p), len(number)) for p, _ in points])
            cells.append(list(number))
        counts = [[0] * len(c) for c in cells]
        for k, column in enumerate(numbered):
            for c in column:
                counts[k][c] += 1
        effects = [[0.0] * len(c) for c in cells]
        for _ in range(SWEEPS):  # the same sums in the same order as a walk over the points
            for k, column in enumerate(numbered):
                old, sums = effects[k], [0.0] * len(cells[k])
                for j, c in enumerate(column):
                    sums[c] = sums[c] + residual[j] + old[c]
                new = [total / (n + SHRINK) for total, n in zip(sums, counts[k], strict=True)]
                for j, c in enumerate(column):
                    residual[j] += old[c] - new[c]
                effects[k] = new
        self.effects = [dict(zip(c, e, strict=True)) for c, e in zip(cells, effects, strict=True)]
        return True

    def predict(self, index: int) -> float:
        """The model's log(time) of kept config ``index``."""
        point = self.grid.point[index]
        return self.mean + sum(effect.get(self._cell(term, point), 0.0)
                               for term, effect in zip(self.terms, self.effects, strict=True))
