"""Boxes and scaled simplices."""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from fullcomp.errors import DomainError
from fullcomp.sets.balls import project_simplex
from fullcomp.sets.base import Set, as_shape, check_radius


class Box(Set):
    """{x : lower <= x <= upper}, entrywise; bounds are scalars or arrays."""

    polytope = True

    def __init__(self, lower, upper, shape=None):
        lower, upper = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
        if shape is None:
            try:
                shape = np.broadcast_shapes(lower.shape, upper.shape)
            except ValueError:
                raise DomainError(f"Box bounds of shapes {lower.shape} and {upper.shape} do not broadcast") from None
            if shape == ():
                raise DomainError("Box with scalar bounds needs shape=..., e.g. Box(0, 1, shape=(5,))")
        self.shape = as_shape(shape)
        try:
            self.lower = np.broadcast_to(lower, self.shape).copy()
            self.upper = np.broadcast_to(upper, self.shape).copy()
        except ValueError:
            raise DomainError(
                f"Box bounds of shapes {lower.shape} and {upper.shape} do not fit shape {self.shape}"
            ) from None
        if not (np.all(np.isfinite(self.lower)) and np.all(np.isfinite(self.upper))):
            raise DomainError("Box bounds must be finite: a Frank-Wolfe domain has to be compact")
        if np.any(self.lower > self.upper):
            raise DomainError("Box is empty: some lower bound exceeds its upper bound")

    @property
    def diameter(self) -> float:
        return float(np.linalg.norm(self.upper - self.lower))

    def lmo(self, d: np.ndarray) -> np.ndarray:
        return np.where(d > 0, self.lower, self.upper)

    def project(self, p: np.ndarray) -> np.ndarray:
        return np.clip(p, self.lower, self.upper)

    def cvxpy_constraints(self, var):
        return [var >= self.lower, var <= self.upper]


class Simplex(Set):
    """{x >= 0 : sum x = total} (the probability simplex for total = 1)."""

    polytope = True

    def __init__(self, shape, total: float = 1.0):
        self.shape = as_shape(shape)
        self.total = check_radius(total, "total")

    @property
    def diameter(self) -> float:
        return self.total * np.sqrt(2.0) if self.size > 1 else 0.0

    def lmo(self, d: np.ndarray) -> np.ndarray:
        out = np.zeros_like(d)
        out.flat[np.argmin(d)] = self.total
        return out

    def project(self, p: np.ndarray) -> np.ndarray:
        return project_simplex(p.ravel(), self.total).reshape(self.shape)

    def cvxpy_constraints(self, var):
        return [var >= 0, cp.sum(var) == self.total]
