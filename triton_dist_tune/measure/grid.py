"""The parameter grid of a config space: each config as a point, and its neighbours.

A config is a mapping of parameter names to values (``BLOCK_M``, ``num_warps``, ...). The grid sorts each
parameter's values (numbers by value, anything else by its stable description) and places every config at the
point of its value positions. Good configs cluster on such a grid (a tile one step larger or smaller, one warp
count more, one stage less), which the search (:mod:`~triton_dist_tune.measure.search`) exploits.

**Neighbours** of a config (Kernel Tuner's "adjacent" neighbourhood, plus Helion's block-size pairs), in three
rings (:meth:`Grid.rings`), nearest first:

1. along each parameter, the nearest config below and above it that differs in that parameter alone (a gap left by
   pruning is skipped: the next surviving value counts as adjacent); where pruning left nothing further along that
   line, the configs one value further that differ in one other parameter by one step (the move repaired: a larger
   tile with one stage fewer, where the larger tile alone does not fit);
2. for each pair of block-size parameters (a name containing ``BLOCK``, case-insensitive), the configs one step
   away in both at once (up-up, up-down, down-up, down-down), where such a config exists;
3. every other config along each parameter, nearest first (Kernel Tuner's "Hamming" neighbourhood: a landscape
   that is not monotone along one parameter, such as a 16-row tile beating 64 while 32 loses to both, is crossed).

Replayed over the exhaustive device-time screenings of an 840-config GEMM space at four shapes on an H100
(``simulate``, 2% noise added), the adjacent moves alone ended 4-25% off the best in some seeds (a larger tile one
stage fewer, two moves away across the pruning edge; a non-monotone tile size). With the repaired moves and the
whole lines, the best still missed the finalists in 12 and 4 of 100 seeds at M = 256 and 2048 while one leader's
whole neighbourhood filled a stage; with every leader's first ring first (the search's order), a fifth of the space
and 10 finalists, in none (``docs/search.md``).

A parameter every kept config sets to one value (a ``triton.Config``'s ``num_ctas``, a tile size pruning left one
of) is no axis: the grid, and the search's model on it, are those of the same space written without it.

Parameters are read through :func:`flatten` (a nested mapping is its entries, named by their path such as
``cfg.BLOCK_M``; a ``triton.Config`` value is its keyword arguments, warps and stages) and :func:`split_numbered` (a
string such as ``"128x256x64-g8-w8-s3"`` is its numbers).

Everything here is a pure function of the configs and the kept indices, so every rank builds the same grid.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

from ..space import describe


def _order(value: Any) -> tuple[int, float, str]:
    """Sort key of a parameter value: numbers by value (before anything else), others by description."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, describe(value))


_NUMBER = re.compile(r"(\d+)")


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config's parameters as the grid sees them, each named by its path: a nested mapping's entries
    (``cfg.BLOCK_M``), a ``triton.Config`` value's keyword arguments and launch options (``name.BLOCK_M``,
    ``name.num_warps``, ``name.maxnreg``, ... and its ``pre_hook`` and ``ir_override`` by their descriptions), at any
    depth; anything else stays as it is. Only the grid reads this copy: the tuned function receives the config as
    written. (Before, a ``triton.Config``'s ``maxnreg`` was not read: configs that differ in it alone were one point,
    only the first of them ever a neighbour.)"""
    flat: dict[str, Any] = {}
    for name, value in config.items():
        path = f"{prefix}{name}"
        kwargs = getattr(value, "kwargs", None)
        if isinstance(kwargs, dict) and hasattr(value, "num_warps"):
            every = value.all_kwargs() if callable(getattr(value, "all_kwargs", None)) else dict(kwargs)
            for key in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
                if getattr(value, key, None) is not None:
                    every.setdefault(key, getattr(value, key))
            flat.update(flatten(every, f"{path}."))
            for key in ("pre_hook", "ir_override"):
                if getattr(value, key, None) is not None:
                    flat[f"{path}.{key}"] = describe(getattr(value, key))
        elif isinstance(value, Mapping) and value and all(isinstance(key, str) for key in value):
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def split_numbered(configs: list[dict[str, Any]]) -> None:
    """Where every value of a parameter is a string of numbers in one shared pattern (``"128x256x64-g8-w8-s3"``),
    make each number an axis of its own (``gemm#0`` .. ``gemm#5``), in place; a number joined to the next or the
    previous by ``x`` is a block size (``gemm#0.BLOCK``)."""
    names = sorted({name for config in configs for name in config})
    for name in names:
        values = [config.get(name) for config in configs]
        if not all(isinstance(v, str) for v in values):
            continue
        parts = [_NUMBER.split(v) for v in values]
        skeleton = parts[0][0::2]
        if len(parts[0]) < 3 or any(p[0::2] != skeleton for p in parts):
            continue
        count = len(parts[0]) // 2
        labels = []
        for k in range(count):
            block = skeleton[k].endswith("x") or skeleton[k + 1].startswith("x")
            labels.append(f"{name}#{k}{'.BLOCK' if block else ''}")
        for config, part in zip(configs, parts, strict=True):
            del config[name]
            for k in range(count):
                config[labels[k]] = int(part[2 * k + 1])


class Grid:
    """The kept configs of a space as points of a grid (see the module docstring)."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], kept: Sequence[int]) -> None:
        self.kept = sorted(kept)
        flat = [flatten(configs[i]) for i in self.kept]
        split_numbered(flat)
        # each kept config's parameters as the grid reads them, described once
        texts = {i: {name: describe(value) for name, value in config.items()} for i, config in zip(self.kept, flat,
                                                                                                    strict=True)}
        names = sorted({name for config in flat for name in config})
        values: dict[str, dict[str, Any]] = {name: {} for name in names}  # description -> value
        for config, described in zip(flat, texts.values(), strict=True):
            for name, value in config.items():
                values[name].setdefault(described[name], value)
        # a parameter every kept config sets to one value tells no config from another (a triton.Config's num_ctas,
        # or a tile size pruning left one of): no axis, so that the grid and the model are those of the same space
        # written without it
        constant = {name for name in names if len(values[name]) == 1 and all(name in config for config in flat)}
        self.names = [name for name in names if name not in constant]
        values = {name: found for name, found in values.items() if name not in constant}
        #: each parameter's distinct values, in order
        self.axes = {name: sorted(found.values(), key=_order) for name, found in values.items()}
        positions = {name: {describe(v): k for k, v in enumerate(axis)} for name, axis in self.axes.items()}
        #: each kept config's point: the position of its value along each parameter (-1: it does not set it)
        self.point = {i: tuple(positions[name][texts[i][name]] if name in texts[i] else -1 for name in self.names)
                      for i in self.kept}
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
        #: each config's rings, once asked for (a search asks for the same configs' rings at every stage)
        self._rings: dict[int, tuple[tuple[int, ...], ...]] = {}

    def neighbours(self, index: int) -> list[int]:
        """The kept configs near ``index`` (see the module docstring), each once, in a fixed order: its
        :meth:`rings`, nearest first."""
        return [other for ring in self.rings(index) for other in ring]

    def rings(self, index: int) -> tuple[tuple[int, ...], ...]:
        """The kept configs near ``index`` in three rings, each config once, each ring in a fixed order: the moves
        along one parameter (in name order: below, above, the repaired moves); the block-size pairs; the rest of
        every line, nearest first."""
        found = self._rings.get(index)
        if found is None:
            found = self._rings[index] = self._find_rings(index)
        return found

    def _find_rings(self, index: int) -> tuple[tuple[int, ...], ...]:
        point = self.point[index]
        near: list[int] = []
        pairs: list[int] = []
        farther: list[tuple[int, int, int]] = []  # (distance, position, index) along some parameter
        for axis in range(len(self.names)):
            line = self._lines[axis][point[:axis] + point[axis + 1:]]
            where = bisect.bisect_left(line, (point[axis], -1))
            if where > 0:
                near.append(line[where - 1][1])
            after = where + 1 if where < len(line) and line[where][0] == point[axis] else where
            if after < len(line):
                near.append(line[after][1])
            for step, blocked in ((-1, where == 0), (1, after == len(line))):
                if blocked:  # pruning left nothing further along this line: step across its edge
                    near += self._repaired(point, axis, point[axis] + step)
            farther += sorted((abs(p - point[axis]), p, i) for p, i in line if p != point[axis])
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
                        pairs.append(other)
        seen = {index}
        rings: list[tuple[int, ...]] = []
        for ring in (near, pairs, [i for _, _, i in sorted(farther)]):
            rings.append(tuple(i for i in dict.fromkeys(ring) if i not in seen))
            seen.update(rings[-1])
        return tuple(rings)

    def _repaired(self, point: tuple[int, ...], axis: int, position: int) -> list[int]:
        """The kept configs at ``position`` along ``axis`` that differ from ``point`` in one other parameter, by one
        step (Kernel Tuner's repair of a move that pruning forbids: a larger tile with one stage fewer)."""
        if not 0 <= position < len(self.axes[self.names[axis]]):
            return []
        found = []
        for other in range(len(self.names)):
            if other == axis or point[other] < 0:
                continue
            for step in (-1, 1):
                moved = list(point)
                moved[axis], moved[other] = position, point[other] + step
                index = self.at.get(tuple(moved)) if moved[other] >= 0 else None
                if index is not None:
                    found.append(index)
        return found

    def coverage(self, index: int) -> set[tuple[int, int]]:
        """The (parameter, value position) pairs config ``index`` sets."""
        return {(axis, position) for axis, position in enumerate(self.point[index]) if position >= 0}
