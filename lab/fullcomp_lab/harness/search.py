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


def search_points(
    grids: dict[str, dict[str, list]],
    method: str,
    search: str | Search,
    measure: Callable[[dict[str, Any]], dict[str, Any]],
    point_key: str,
    score_key: str,
) -> list[dict[str, Any]]:
    """The entries ``measure(point)`` of the points of ``grids[method]`` that ``search``
    (:func:`resolve_search`) visits, in visiting order: an entry holds its point under ``point_key`` (a revisit
    reuses it) and its score under ``score_key`` (the higher the better)."""
    if method not in grids:
        raise OptionError(f"no grid for {method}; give grids[{method!r}] = {{setting: [values]}}")
    tried: list[dict[str, Any]] = []

    def score(point: dict[str, Any]) -> float:
        for entry in tried:  # a search may revisit a point
            if entry[point_key] == point:
                return -entry[score_key]
        entry = measure(point)
        tried.append(entry)
        return -entry[score_key]

    resolve_search(search)(grids[method], score)
    return tried


def grid_edges(grid: dict[str, list], point: dict[str, Any]) -> list[str]:
    """The settings of ``point`` at an end of their grid axis (of more than one value): a choice there
    suggests extending the grid."""
    return [k for k, v in point.items() if k in grid and len(grid[k]) > 1 and v in (grid[k][0], grid[k][-1])]
