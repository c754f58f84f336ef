"""Polytopes with combinatorial LMOs: capped simplices, the Birkhoff polytope, the permutahedron."""

from __future__ import annotations

import math
from typing import Any

import cvxpy as cp
import numpy as np
import scipy.linalg as sla
from scipy.optimize import brentq, isotonic_regression, linear_sum_assignment

from fullcomp import solvers
from fullcomp.errors import DomainError
from fullcomp.sets.base import Set, as_shape, check_radius

#: Newton iterations of the Birkhoff projection's dual, plus 5 per row: a few on random matrices; up to
#: about one per row on a matrix of entries ~1e6 (each iteration joins two components of the support).
BIRKHOFF_NEWTON = 50


def check_count(k: Any, name: str, low: int, high: int, example: str) -> int:
    """An integer k with low <= k <= high, or a DomainError naming ``name`` and an example."""
    integral = isinstance(k, (int, np.integer)) or (isinstance(k, float) and k.is_integer())
    if isinstance(k, bool) or not integral:
        raise DomainError(f"{name} must be an integer in [{low}, {high}], got {k!r}; pass e.g. {example}")
    k = int(k)
    if not low <= k <= high:
        raise DomainError(f"{name} must be an integer in [{low}, {high}], got {k}; pass e.g. {example}")
    return k


def capped_sum(v: np.ndarray, tau: np.ndarray | float, cap: float) -> np.ndarray:
    """sum_i clip(v_i - tau, 0, cap) for each tau, from v sorted ascending (with its prefix sums): the
    sum of (v_i - t)_+ over v_i > t is a suffix sum, and clipping at cap subtracts the same at t + cap."""
    sums = np.concatenate([[0.0], np.cumsum(v)])

    def above(t):
        idx = np.searchsorted(v, t, side="right")
        return (sums[-1] - sums[idx]) - t * (v.size - idx)

    tau = np.asarray(tau, dtype=np.float64)
    return above(tau) - above(tau + cap)


def project_capped(v: np.ndarray, total: float, cap: float, equality: bool = True) -> np.ndarray:
    """Projection of a vector onto {0 <= x <= cap, sum x = total} (``sum x <= total`` when not ``equality``).

    The projection is clip(v - tau, 0, cap) for the tau that meets the sum. That sum is piecewise linear and
    nonincreasing in tau with breakpoints at v_i and v_i - cap, so tau is found exactly: bracket it between
    two consecutive breakpoints (all evaluated at once by prefix sums) and interpolate.
    """
    v = np.asarray(v, dtype=np.float64).ravel()
    if not equality:
        inside = np.clip(v, 0.0, cap)
        if inside.sum() <= total:
            return inside
    if total <= 0:
        return np.zeros_like(v)
    if total >= cap * v.size:
        return np.full_like(v, cap)
    ordered = np.sort(v)
    breaks = np.unique(np.concatenate([ordered - cap, ordered]))
    sums = capped_sum(ordered, breaks, cap)  # nonincreasing, from size * cap down to 0
    j = int(np.searchsorted(-sums, -total, side="right")) - 1  # last breakpoint with sum >= total
    j = min(max(j, 0), breaks.size - 2)
    drop = sums[j] - sums[j + 1]
    tau = breaks[j] if drop <= 0 else breaks[j] + (sums[j] - total) * (breaks[j + 1] - breaks[j]) / drop
    return np.clip(v - tau, 0.0, cap)


def vertex_pair_distance2(n: int, cap: float, x: tuple[int, float], y: tuple[int, float]) -> float:
    """The largest squared distance between a vertex with x = (m, r) (m entries at cap, one at r when r > 0,
    the rest 0) and one with y's pattern, over all placements in n coordinates.

    Only the coordinates of the two partial entries r need a case split; the rest pair cap with cap (distance
    0) or cap with 0 (cap^2), and the caps overlap only as much as the coordinates force.
    """
    values_x = {"C": cap, "R": x[1], "Z": 0.0}
    values_y = {"C": cap, "R": y[1], "Z": 0.0}
    px, py = int(x[1] > 0), int(y[1] > 0)
    count_x = {"C": x[0], "R": px, "Z": n - x[0] - px}
    count_y = {"C": y[0], "R": py, "Z": n - y[0] - py}
    best = -math.inf
    for tx in ("C", "R", "Z") if px else (None,):  # the type of y at x's partial entry
        for ty in ("C", "R", "Z") if py else (None,):  # the type of x at y's partial entry
            if (tx == "R") != (ty == "R"):
                continue  # both partial entries on one coordinate, or neither
            cx, cy, dist = dict(count_x), dict(count_y), 0.0
            if tx == "R":
                cx["R"] -= 1
                cy["R"] -= 1
                dist += (x[1] - y[1]) ** 2
            else:
                if tx is not None:
                    cx["R"] -= 1
                    cy[tx] -= 1
                    dist += (x[1] - values_y[tx]) ** 2
                if ty is not None:
                    cy["R"] -= 1
                    cx[ty] -= 1
                    dist += (values_x[ty] - y[1]) ** 2
            if min(*cx.values(), *cy.values()) < 0:
                continue
            rest = cx["C"] + cx["Z"]
            overlap = max(0, cx["C"] + cy["C"] - rest)
            best = max(best, dist + cap**2 * (cx["C"] + cy["C"] - 2 * overlap))
    return best


class CappedSimplex(Set):
    """{x : 0 <= x <= cap, sum x = total} entrywise for any shape; ``equality=False`` gives sum x <= total.

    The CVaR weight set at level alpha over n losses is ``CappedSimplex(n, 1.0, cap=1 / (alpha * n))``; with
    cap = 1 and an integer total k it is the hypersimplex (:class:`Hypersimplex`). The LMO fills the
    smallest entries of the direction up to cap (only the negative ones with ``equality=False``); the
    projection is exact (:func:`project_capped`).
    """

    polytope = True

    def __init__(self, shape, total: float, cap: float = 1.0, equality: bool = True):
        self.shape = as_shape(shape)
        self.cap = check_radius(cap, "cap")
        self.total = check_radius(total, "total")
        if not isinstance(equality, (bool, np.bool_)):
            raise DomainError(f"equality must be True (sum x = total) or False (sum x <= total), got {equality!r}")
        self.equality = bool(equality)
        if self.cap == 0 and self.total > 0 and self.equality:
            raise DomainError(f"CappedSimplex with cap=0 is empty for total={self.total}; pass cap > 0")
        if self.equality and self.total > self.cap * self.size * (1 + 1e-12):
            raise DomainError(
                f"CappedSimplex is empty: total={self.total} exceeds cap * size = {self.cap * self.size}; "
                f"pass total <= {self.cap * self.size} or a larger cap"
            )
        # With sum <= total above cap * size, the set is the box [0, cap]^shape.
        self._filled = min(self.total, self.cap * self.size)
        self._full, self._partial = self._split(self._filled)

    def _split(self, total: float) -> tuple[int, float]:
        """(m, r): a vertex of sum ``total`` has m entries at cap and one at r in [0, cap)."""
        if self.cap == 0:
            return 0, 0.0
        m = min(int(math.floor(total / self.cap)), self.size)
        r = min(max(total - m * self.cap, 0.0), self.cap)
        if r >= self.cap and m < self.size:  # total / cap rounded down one too far
            m, r = m + 1, 0.0
        return m, (r if m < self.size else 0.0)

    @property
    def diameter(self) -> float:
        m, r = self._full, self._partial
        if self.equality:
            return math.sqrt(max(vertex_pair_distance2(self.size, self.cap, (m, r), (m, r)), 0.0))
        # Vertices of the "<=" set: j <= m entries at cap (all at bounds), or the full pattern (m, r). The
        # distance between two patterns grows with their counts until the caps must overlap (counts summing
        # to about size), so the farthest pair lies among a few candidate counts.
        counts = {0, m, max(m - 1, 0)} | {min(max(self.size - m + s, 0), m) for s in range(-3, 4)}
        patterns = [(j, 0.0) for j in sorted(counts)] + ([(m, r)] if r > 0 else [])
        best = max(vertex_pair_distance2(self.size, self.cap, a, b) for a in patterns for b in patterns)
        return math.sqrt(max(best, 0.0))

    def lmo(self, d: np.ndarray) -> np.ndarray:
        flat = d.ravel()
        order = np.argsort(flat, kind="stable")
        # The cheapest entries first; without the equality, only entries that lower <d, x> (d < 0) are worth
        # filling, and the zero vector is the answer for a direction with no negative entry.
        usable = order.size if self.equality else int(np.searchsorted(flat[order], 0.0, side="left"))
        m, r = self._full, self._partial
        out = np.zeros_like(flat)
        out[order[: min(m, usable)]] = self.cap
        if m < usable and r > 0:
            out[order[m]] = r
        return out.reshape(self.shape)

    def project(self, p: np.ndarray) -> np.ndarray:
        return project_capped(p.ravel(), self._filled, self.cap, self.equality).reshape(self.shape)

    def contains(self, point, tol: float = 1e-9) -> bool:
        p = np.asarray(point, dtype=float)  # a tensor comes as numpy (adapt_contains)
        if p.shape != self.shape:
            return False
        slack = tol * max(1.0, self.diameter)
        gap = p.sum() - self.total
        sum_ok = abs(gap) <= slack if self.equality else gap <= slack
        return bool(sum_ok and p.min() >= -slack and p.max() <= self.cap + slack)

    @property
    def contains_origin(self) -> bool:
        return not self.equality or self.total == 0

    def cvxpy_constraints(self, var):
        total = cp.sum(var) == self.total if self.equality else cp.sum(var) <= self.total
        return [var >= 0, var <= self.cap, total]

    def __repr__(self) -> str:
        sense = "=" if self.equality else "<="
        return f"CappedSimplex(shape={self.shape}, sum {sense} {self.total}, cap={self.cap})"


class Hypersimplex(CappedSimplex):
    """{x in [0, 1]^shape : sum x = k} (``equality=False``: sum x <= k), the convex hull of the 0/1 vectors
    with k ones (at most k); its LMO puts ones on the k smallest entries of the direction."""

    def __init__(self, shape, k: int, equality: bool = True):
        shape = as_shape(shape)
        size = int(np.prod(shape))
        k = check_count(k, "k", 0, size, f"k={max(1, size // 2)}")
        super().__init__(shape, float(k), cap=1.0, equality=equality)
        self.k = k

    def __repr__(self) -> str:
        return f"Hypersimplex(shape={self.shape}, k={self.k}, equality={self.equality})"


def square_shape(n: Any, name: str) -> tuple[int, int]:
    """(n, n) from an int n or a square shape."""
    shape = as_shape(n, name)
    if len(shape) == 1:
        shape = (shape[0], shape[0])
    if len(shape) != 2 or shape[0] != shape[1]:
        raise DomainError(f"{name} must be an int n or a square shape (n, n), got {n!r}")
    return shape


class Birkhoff(Set):
    """The Birkhoff polytope of n x n doubly stochastic matrices {X >= 0 : X 1 = 1, X^T 1 = 1}.

    Its vertices are the permutation matrices (Birkhoff-von Neumann), so the LMO is an assignment problem
    (scipy's Hungarian-type :func:`~scipy.optimize.linear_sum_assignment`, O(n^3)). The projection solves the
    dual of the least-squares program in the 2 n row and column multipliers by a semismooth Newton method.
    """

    polytope = True

    def __init__(self, n):
        self.shape = square_shape(n, "n")
        self.n = self.shape[0]

    @property
    def diameter(self) -> float:
        # Two permutation matrices with disjoint supports (a cyclic shift): ||P - Q||_F^2 = 2 n.
        return math.sqrt(2.0 * self.n) if self.n > 1 else 0.0

    def lmo(self, d: np.ndarray) -> np.ndarray:
        rows, cols = linear_sum_assignment(d)
        out = np.zeros_like(d)
        out[rows, cols] = 1.0
        return out

    def project(self, p: np.ndarray) -> np.ndarray:
        return project_birkhoff(p)

    def contains(self, point, tol: float = 1e-9) -> bool:
        p = np.asarray(point, dtype=float)  # a tensor comes as numpy (adapt_contains)
        if p.shape != self.shape:
            return False
        slack = tol * max(1.0, self.diameter)
        return bool(
            p.min() >= -slack and np.abs(p.sum(axis=1) - 1).max() <= slack and np.abs(p.sum(axis=0) - 1).max() <= slack
        )

    contains_origin = False  # rows sum to 1

    def cvxpy_constraints(self, var):
        return [var >= 0, cp.sum(var, axis=1) == 1, cp.sum(var, axis=0) == 1]

    def __repr__(self) -> str:
        return f"Birkhoff(n={self.n})"


def row_thresholds(m: np.ndarray) -> np.ndarray:
    """For each row r of m, the theta_r with sum_j (m_rj - theta_r)_+ = 1 (the simplex projection's threshold)."""
    ordered = -np.sort(-m, axis=1)
    candidates = (np.cumsum(ordered, axis=1) - 1.0) / np.arange(1, m.shape[1] + 1)
    last = m.shape[1] - 1 - np.argmax((ordered > candidates)[:, ::-1], axis=1)
    return candidates[np.arange(m.shape[0]), last]


def birkhoff_residual(x: np.ndarray) -> float:
    """The largest deviation of a row or column sum from 1."""
    return max(float(np.abs(x.sum(axis=1) - 1.0).max()), float(np.abs(x.sum(axis=0) - 1.0).max()))


def project_birkhoff(v: np.ndarray) -> np.ndarray:
    """Projection of a square matrix onto the doubly stochastic matrices.

    X = (v - a 1^T - 1 b^T)_+ for the multipliers (a, b) minimizing the convex, piecewise quadratic dual
    G(a, b) = 1/2 ||(v - a 1^T - 1 b^T)_+||^2 + sum a + sum b, whose gradient is (1 - row sums, 1 - column
    sums) of X. Each iteration takes a Newton step on G's generalized Hessian (a Laplacian-like matrix of X's
    support) with an exact line search: along a direction G is a convex piecewise quadratic, so the step is
    the root of its monotone derivative. The Hessian is singular along each connected component of the
    support (shifting a up and b down there), where G is linear until an entry joins the support; the exact
    line search walks that far in one step, where a backtracking search from a unit step crawls. A row or
    column with no support is first set by its exact one-dimensional minimization. The iteration ends once
    the support settles (G is then a quadratic, solved in one step); a program solve backs it up.
    """
    n = v.shape[0]
    a, b = row_thresholds(v), np.zeros(n)

    def point(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.maximum(v - a[:, None] - b[None, :], 0.0)

    x = point(a, b)
    # Entries of v - a - b carry rounding ~eps |v|, each sum n of them.
    stop = n * max(1e-13, 4 * np.finfo(float).eps * float(np.abs(v).max()))
    for _ in range(BIRKHOFF_NEWTON + 5 * n):
        empty = ~(x > 0).any(axis=0)
        if empty.any():
            b[empty] = row_thresholds((v - a[:, None]).T[empty])
            x = point(a, b)
        empty = ~(x > 0).any(axis=1)
        if empty.any():
            a[empty] = row_thresholds((v - b[None, :])[empty])
            x = point(a, b)
        grad = np.concatenate([1.0 - x.sum(axis=1), 1.0 - x.sum(axis=0)])
        if np.abs(grad).max() <= stop:
            return x
        support = (x > 0).astype(np.float64)
        hessian = np.block([[np.diag(support.sum(axis=1)), support], [support.T, np.diag(support.sum(axis=0))]])
        hessian[np.diag_indices(2 * n)] += 1e-8  # keeps the null directions' steps finite
        step = sla.solve(hessian, -grad, assume_a="pos")
        residual = v - a[:, None] - b[None, :]
        change = step[:n, None] + step[None, n:]
        total = float(step.sum())

        def slope(t: float, residual=residual, change=change, total=total) -> float:
            return total - float(np.sum(change * np.maximum(residual - t * change, 0.0)))

        if slope(0.0) >= 0:
            break  # no descent left at this precision
        high = 1.0
        while slope(high) < 0 and high < 1e30:
            high *= 4.0
        t = brentq(slope, 0.0, high, xtol=1e-16 * high, rtol=4 * np.finfo(float).eps)
        a, b = a + t * step[:n], b + t * step[n:]
        x = point(a, b)
    if birkhoff_residual(x) <= 1e3 * stop:
        return x
    return project_birkhoff_program(v)


def project_birkhoff_program(v: np.ndarray) -> np.ndarray:
    """The projection by a CVXPY solve, where the Newton iteration stalls (never seen in tests)."""
    var = cp.Variable(v.shape)
    problem = cp.Problem(cp.Minimize(cp.sum_squares(var - v)), Birkhoff(v.shape[0]).cvxpy_constraints(var))
    solvers.solve(problem, "Birkhoff projection")
    return np.maximum(np.asarray(var.value, dtype=np.float64), 0.0)


class Permutahedron(Set):
    """The convex hull of all permutations of the entries of ``w`` (any shape, permuted as a flat vector).

    Equivalently the vectors majorized by w: sum x = sum w and every sum of j entries of x is at most the
    sum of the j largest entries of w. The LMO pairs the largest entries of w with the smallest of the
    direction (rearrangement inequality): one sort. The projection is an isotonic regression (Blondel et al.,
    "Fast differentiable sorting and ranking", 2020, Prop. 3).
    """

    polytope = True

    def __init__(self, w):
        try:
            w = np.array(w, dtype=np.float64)
        except (TypeError, ValueError):
            raise DomainError(f"w must be an array of numbers, got {w!r}; pass e.g. w=np.arange(5.0)") from None
        if w.ndim == 0:
            raise DomainError(f"w must be an array (the vector whose permutations span the set), got {w!r}")
        if not np.all(np.isfinite(w)):
            raise DomainError("w must be finite: a Frank-Wolfe domain has to be compact")
        self.shape = as_shape(w.shape, "w.shape")
        self.w = w
        self._descending = np.sort(w.ravel())[::-1]

    @property
    def diameter(self) -> float:
        # ||x - y||^2 = 2 ||w||^2 - 2 <x, y>, smallest for oppositely sorted permutations.
        return float(np.linalg.norm(self._descending - self._descending[::-1]))

    def lmo(self, d: np.ndarray) -> np.ndarray:
        out = np.empty(self.size)
        out[np.argsort(d.ravel(), kind="stable")] = self._descending
        return out.reshape(self.shape)

    def project(self, p: np.ndarray) -> np.ndarray:
        z = p.ravel()
        order = np.argsort(-z, kind="stable")
        shift = isotonic_regression(z[order] - self._descending, increasing=False).x
        out = np.empty_like(z)
        out[order] = z[order] - shift
        return out.reshape(self.shape)

    def contains(self, point, tol: float = 1e-9) -> bool:
        p = np.asarray(point, dtype=float)  # a tensor comes as numpy (adapt_contains)
        if p.shape != self.shape:
            return False
        slack = tol * max(1.0, self.diameter)
        partial = np.cumsum(np.sort(p.ravel())[::-1]) - np.cumsum(self._descending)
        return bool(partial[:-1].max(initial=-np.inf) <= slack and abs(partial[-1]) <= slack)

    def cvxpy_constraints(self, var):
        flat = cp.vec(var, order="C")
        top = np.cumsum(self._descending)
        cons = [cp.sum(flat) == top[-1]]
        cons += [cp.sum_largest(flat, j) <= top[j - 1] for j in range(1, self.size)]
        return cons

    def __repr__(self) -> str:
        return f"Permutahedron(w={self.w.tolist() if self.size <= 8 else self.shape})"


__all__ = ["CappedSimplex", "Hypersimplex", "Birkhoff", "Permutahedron", "project_capped"]
