"""Tuning searches: which points of a settings grid a protocol's tuning tries."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from fullcomp.errors import OptionError

#: A search visits points of a grid {setting: [values]} and calls ``score(point)`` on each (lower is better;
#: a protocol's score records what it ran, so the final choice may use more than the score).
Search = Callable[[dict[str, list], Callable[[dict[str, Any]], float]], None]


def grid_search(grid: dict[str, list], score: Callable[[dict[str, Any]], float]) -> None:
    """Every point of the product, the first setting varying slowest (the grid's order breaks ties)."""
    for values in itertools.product(*grid.values()):
        score(dict(zip(grid, values)))


def coordinate_search(grid: dict[str, list], score: Callable[[dict[str, Any]], float], sweeps: int = 2) -> None:
    """Start at every axis's middle value and, ``sweeps`` times, scan one axis at a time over all its values
    with the others at the best point so far (each axis in full, not the product).  Revisits call
    ``score`` again: a score that caches makes them free."""
    best = {k: v[len(v) // 2] for k, v in grid.items()}
    for _ in range(sweeps):
        for axis, values in grid.items():
            points = [{**best, axis: v} for v in values]
            scores = [score(p) for p in points]
            best = points[int(np.argmin(scores))]


def resolve_search(search: str | Search, sweeps: int = 2) -> Search:
    """``"grid"``, ``"coordinate"`` (with ``sweeps``) or any callable ``search(grid, score)``."""
    if callable(search):
        return search
    if search == "grid":
        return grid_search
    if search == "coordinate":
        return functools.partial(coordinate_search, sweeps=sweeps)
    raise OptionError(
        f"search must be 'grid' (the full product), 'coordinate' (axis by axis) or a callable "
        f"search(grid, score), got {search!r}"
    )


def grid_edges(grid: dict[str, list], point: dict[str, Any]) -> list[str]:
    """The settings of ``point`` at an end of their grid axis (of more than one value): a choice there
    suggests extending the grid."""
    return [k for k, v in point.items() if k in grid and len(grid[k]) > 1 and v in (grid[k][0], grid[k][-1])]
