"""A Frank-Wolfe iterate y_k, dense or atomic: the one place that knows which.

Dense: y is the whole flat point.  Atomic (a problem declaring ``reads=``): y holds the point's values at
the entries the map reads followed by those at ``track``, and the point itself is the convex combination of
the start and the GLMO's atoms (an :class:`~fullcomp.sets.atoms.AtomicForm`), rebuilt densely on demand.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fullcomp.autodiff import LazyPoint
from fullcomp.sets.atoms import AtomicForm, Entries, combine

#: Above this many entries the atomic iterate is not rebuilt densely.
MAX_DENSE = 50_000_000


class DenseIterate:
    """y_k is the flat point; a step moves it toward the GLMO's point."""

    layout = "dense"
    #: The entries y holds (all of them on the dense path).
    kept = None

    def __init__(self, problem: Any, run: Any):
        self.problem, self.dtype, self.device = problem, run.dtype, run.device

    def tensor(self, a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(a, dtype=self.dtype, device=self.device)

    def start(self) -> torch.Tensor:
        return self.tensor(self.problem.x0.reshape(-1))

    def glmo_arguments(self, state: Any) -> dict:
        """What the GLMO needs besides the model: the tracker's revision (its pool's images are V's)."""
        return {"revision": state.revision}

    def toward(self, res: Any) -> torch.Tensor:
        """The GLMO's point in y's layout."""
        x = res.x.dense() if isinstance(res.x, LazyPoint) else res.x
        return self.tensor(x.reshape(-1))

    def move(self, y: torch.Tensor, atoms: AtomicForm, res: Any, gamma: float, k: int) -> tuple[Any, AtomicForm]:
        """y + gamma (x - y), and the atomic form (kept as it is); a point held as products (a LazyPoint) is
        never written."""
        if isinstance(res.x, LazyPoint) and res.x.dtype == y.dtype and res.x.device == y.device:
            return res.x.lerp(y, gamma), atoms
        return torch.lerp(y, self.toward(res), gamma), atoms

    def dense(self, y: torch.Tensor, atoms: AtomicForm, start: float) -> torch.Tensor | None:
        return y.reshape(self.problem.domain.shape)

    def view(self, y: torch.Tensor) -> torch.Tensor:
        """What a callback sees."""
        return y.reshape(self.problem.domain.shape)


class AtomicIterate(DenseIterate):
    """y_k at the entries read and tracked; the point is y_0's weight on the start plus the atoms' weights."""

    layout = "kept"

    def __init__(self, problem: Any, run: Any):
        super().__init__(problem, run)
        reads, kept = problem.reads, problem.kept_entries
        self.entries, self.kept, self.start_atom = reads, kept, problem.start_atom()
        self.track = Entries(kept.flat[len(reads) :], problem.domain.shape) if len(kept) > len(reads) else None
        if problem.sharded:
            reads.check_blocks()
        self._spare: list[torch.Tensor] = []  # y of the state before last, which no state holds now

    def start(self) -> torch.Tensor:
        return self.tensor(self.problem.x0_at(self.kept))

    def glmo_arguments(self, state: Any) -> dict:
        """The GLMO prices atoms on the entries read, from the start atom, and gives x at ``track`` too; the
        tracker's revision lets it carry its atoms' images over a sparse tracker step."""
        return {"entries": self.entries, "start": self.start_atom, "revision": state.revision, "track": self.track}

    def toward(self, res: Any) -> torch.Tensor:
        return self.tensor(res.x)

    def move(self, y: torch.Tensor, atoms: AtomicForm, res: Any, gamma: float, k: int) -> tuple[Any, AtomicForm]:
        # Into y_{k-1}'s array: no state holds it now, and a fresh one would page-fault its way in at scale
        # (y_0 may share the caller's x0, so it is not lent).
        y_next = torch.lerp(y, self.toward(res), gamma, out=self._spare.pop() if self._spare else None)
        if k:
            self._spare.append(y)
        return y_next, atoms.blend(res.atoms, res.weights, gamma)

    def dense(self, y: torch.Tensor, atoms: AtomicForm, start: float) -> torch.Tensor | None:
        if self.problem.domain.size > MAX_DENSE:
            return None
        pairs = atoms.pairs()
        parts, weights = zip(*pairs) if pairs else ((), ())
        return self.tensor(combine([self.start_atom, *parts], [start, *weights], self.problem.domain.shape))

    def view(self, y: torch.Tensor) -> torch.Tensor:
        return y


def iterate(problem: Any, run: Any) -> DenseIterate:
    """The iterate a problem's Frank-Wolfe method keeps: atomic when the map reads only some entries."""
    return DenseIterate(problem, run) if problem.reads is None else AtomicIterate(problem, run)


__all__ = ["DenseIterate", "AtomicIterate", "iterate", "MAX_DENSE"]
