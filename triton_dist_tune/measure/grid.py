"""The parameter grid of a config space: each config as a point, and its neighbours.

A config is a mapping of parameter names to values (``BLOCK_M``, ``num_warps``, ...). The grid sorts each
parameter's values (numbers by value, anything else by its stable description) and places every config at the
point of its value positions. Good configs cluster on such a grid (a tile one step larger or smaller, one warp
count more, one stage less), which the search (:mod:`~triton_dist_tune.measure.search`) exploits.

**Neighbours** of a config (Kernel Tuner's "adjacent" neighbourhood, plus Helion's block-size pairs):

- along each parameter, the nearest config below and above it that differs in that parameter alone (a gap left by
  pruning is skipped: the next surviving value counts as adjacent);
- for each pair of block-size parameters (a name containing ``BLOCK``, case-insensitive), the configs one step
  away in both at once (up-up, up-down, down-up, down-down), where such a config exists.

Everything here is a pure function of the configs and the kept indices, so every rank builds the same grid.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

from ..space import describe


def _order(value: Any) -> tuple[int, float, str]:
    """Sort key of a parameter value: numbers by value (before anything else), others by description."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, describe(value))


class Grid:
    """The kept configs of a space as points of a grid (see the module docstring)."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], kept: Sequence[int]) -> None:
        self.kept = sorted(kept)
        self.names = sorted({name for i in self.kept for name in configs[i]})
        missing = object()
        axes: dict[str, list[Any]] = {}
        for name in self.names:
            values: dict[str, Any] = {}
            for i in self.kept:
                value = configs[i].get(name, missing)
                if value is not missing:
                    values.setdefault(describe(value), value)
            axes[name] = sorted(values.values(), key=_order)
        #: each parameter's distinct values, in order
        self.axes = axes
        positions = {name: {describe(v): k for k, v in enumerate(values)} for name, values in axes.items()}
        #: each kept config's point: the position of its value along each parameter (-1: it does not set it)
        self.point: dict[int, tuple[int, ...]] = {}
        for i in self.kept:
            self.point[i] = tuple(positions[name][describe(configs[i][name])] if name in configs[i] else -1
                                  for name in self.names)
        #: point -> the lowest kept index there
        self.at: dict[tuple[int, ...], int] = {}
        for i in self.kept:
            self.at.setdefault(self.point[i], i)
        # along each parameter: the configs that differ in it alone, sorted by their position on it
        self._lines: list[dict[tuple[int, ...], list[tuple[int, int]]]] = []
        for axis in range(len(self.names)):
            lines: dict[tuple[int, ...], list[tuple[int, int]]] = {}
            for point, index in self.at.items():
                rest = point[:axis] + point[axis + 1:]
                lines.setdefault(rest, []).append((point[axis], index))
            for line in lines.values():
                line.sort()
            self._lines.append(lines)
        self.block_axes = [k for k, name in enumerate(self.names) if "block" in name.lower()]

    def neighbours(self, index: int) -> list[int]:
        """The kept configs adjacent to ``index`` (see the module docstring), each once, in a fixed order: along each
        parameter (in name order, below then above), then the block-size pairs."""
        point = self.point[index]
        found: list[int] = []
        for axis in range(len(self.names)):
            line = self._lines[axis][point[:axis] + point[axis + 1:]]
            where = bisect.bisect_left(line, (point[axis], -1))
            if where > 0:
                found.append(line[where - 1][1])
            after = where + 1 if where < len(line) and line[where][0] == point[axis] else where
            if after < len(line):
                found.append(line[after][1])
        for a, b in combinations(self.block_axes, 2):
            for step_a in (-1, 1):
                for step_b in (-1, 1):
                    moved = list(point)
                    moved[a] += step_a
                    moved[b] += step_b
                    if min(moved[a], moved[b]) < 0:  # off the grid, or a config that does not set it
                        continue
                    other = self.at.get(tuple(moved))
                    if other is not None:
                        found.append(other)
        unique: list[int] = []
        for other in found:
            if other != index and other not in unique:
                unique.append(other)
        return unique

    def coverage(self, index: int) -> set[tuple[int, int]]:
        """The (parameter, value position) pairs config ``index`` sets."""
        return {(axis, position) for axis, position in enumerate(self.point[index]) if position >= 0}
