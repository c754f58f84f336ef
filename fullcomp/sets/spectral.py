"""Sets of symmetric positive semidefinite matrices with bounded trace: the spectraplex and the spectrahedron."""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import scipy.linalg as sla
import scipy.sparse.linalg as spla

from fullcomp.errors import DomainError
from fullcomp.sets.balls import project_simplex
from fullcomp.sets.base import Set, check_dense, check_radius
from fullcomp.sets.combinatorial import square_shape

#: Up to this order the smallest eigenpair comes from a dense eigensolve restricted to it (LAPACK's
#: selected-eigenvalue driver); above, from Lanczos (ARPACK), warm-started from the previous eigenvector.
DENSE_ORDER = 256


class Spectraplex(Set):
    """{X in S^n : X PSD, trace X = trace} (``equality=False``: trace X <= trace, the spectrahedron).

    The LMO is trace * v v^T for a unit eigenvector v of the smallest eigenvalue of the direction's symmetric
    part (only that part pairs with a symmetric X); with ``equality=False`` it is 0 when that eigenvalue is
    >= 0. The projection symmetrizes and projects the eigenvalues onto the simplex (or onto
    {lambda >= 0, sum <= trace}).
    """

    def __init__(self, n, trace: float = 1.0, equality: bool = True):
        self.shape = square_shape(n, "n")
        self.n = self.shape[0]
        self.trace = check_radius(trace, "trace")
        if not isinstance(equality, (bool, np.bool_)):
            raise DomainError(f"equality must be True (trace X = r) or False (trace X <= r), got {equality!r}")
        self.equality = bool(equality)
        self._start: np.ndarray | None = None  # the last Lanczos eigenvector, to warm-start the next LMO

    @property
    def diameter(self) -> float:
        # Two orthogonal rank-one points r u u^T, r w w^T are r sqrt(2) apart, the most two PSD matrices of
        # trace <= r can be (||X - Y||_F^2 <= ||X||_F^2 + ||Y||_F^2 <= 2 r^2); for n = 1, the trace alone.
        if self.n > 1:
            return self.trace * math.sqrt(2.0)
        return 0.0 if self.equality else self.trace

    def default_point(self) -> np.ndarray:
        """The projection of the origin, without an eigendecomposition: (trace / n) I, or 0 for trace <= r."""
        check_dense(self, "its default start (a dense point)")
        if not self.equality:
            return np.zeros(self.shape)
        return np.eye(self.n) * (self.trace / self.n)

    def smallest_eigenpair(self, s: np.ndarray) -> tuple[float, np.ndarray]:
        """The smallest eigenvalue of a symmetric matrix and a unit eigenvector."""
        if self.n <= DENSE_ORDER:
            values, vectors = sla.eigh(s, subset_by_index=[0, 0])
            return float(values[0]), vectors[:, 0]
        start = self._start if self._start is not None else np.ones(self.n) / math.sqrt(self.n)
        values, vectors = spla.eigsh(s, k=1, which="SA", v0=start)
        self._start = vectors[:, 0]
        return float(values[0]), vectors[:, 0]

    def lmo(self, d: np.ndarray) -> np.ndarray:
        value, v = self.smallest_eigenpair(0.5 * (d + d.T))
        if not self.equality and value >= 0:
            return np.zeros_like(d)
        return self.trace * np.outer(v, v)

    def project(self, p: np.ndarray) -> np.ndarray:
        values, vectors = np.linalg.eigh(0.5 * (p + p.T))
        if self.equality:
            shrunk = project_simplex(values, self.trace)
        else:
            shrunk = np.maximum(values, 0.0)
            if shrunk.sum() > self.trace:
                shrunk = project_simplex(values, self.trace)
        out = (vectors * shrunk) @ vectors.T
        return 0.5 * (out + out.T)

    def contains(self, point, tol: float = 1e-9) -> bool:
        p = np.asarray(point, dtype=float)  # a tensor comes as numpy (adapt_contains)
        if p.shape != self.shape:
            return False
        slack = tol * max(1.0, self.diameter)
        if np.abs(p - p.T).max() > slack:
            return False
        gap = float(np.trace(p)) - self.trace
        trace_ok = abs(gap) <= slack if self.equality else gap <= slack
        return bool(trace_ok and np.linalg.eigvalsh(0.5 * (p + p.T))[0] >= -slack)

    @property
    def contains_origin(self) -> bool:
        return not self.equality or self.trace == 0

    def cvxpy_constraints(self, var):
        trace = cp.trace(var) == self.trace if self.equality else cp.trace(var) <= self.trace
        return [var == var.T, 0.5 * (var + var.T) >> 0, trace]

    def __repr__(self) -> str:
        sense = "=" if self.equality else "<="
        return f"{type(self).__name__}(n={self.n}, trace {sense} {self.trace})"


class UnitSpectrahedron(Spectraplex):
    """{X in S^n : X PSD, trace X <= trace}: the spectraplex with the origin and everything between
    (FrankWolfe.jl's ``UnitSpectrahedronLMO``); the LMO returns 0 for a direction whose symmetric part is PSD."""

    def __init__(self, n, trace: float = 1.0):
        super().__init__(n, trace, equality=False)


__all__ = ["Spectraplex", "UnitSpectrahedron"]
