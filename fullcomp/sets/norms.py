"""More norm balls: l_p for p in (1, inf], the K-norm ball and the K-sparse polytope."""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
from scipy.optimize import brentq

from fullcomp.errors import DomainError
from fullcomp.sets.base import Set, as_shape, check_radius
from fullcomp.sets.combinatorial import check_count, project_capped

#: Bisection steps of the per-entry equation in the l_p projection: halving [0, a_i] this often resolves
#: y_i to rounding.
LP_BISECTIONS = 64


def top_k_abs_sum(x: np.ndarray, k: int) -> float:
    """The K-norm: the sum of the k largest |x_i|."""
    a = np.abs(x.ravel())
    return float(np.sum(np.partition(a, a.size - k)[a.size - k :])) if k < a.size else float(a.sum())


def check_p(p) -> float:
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise DomainError(f"p must be a number in (1, inf], got {p!r}; pass e.g. p=1.5 (fc.L1Ball for p=1)") from None
    if math.isnan(p) or p <= 1:
        raise DomainError(f"p must be in (1, inf], got {p}; pass e.g. p=1.5, or use fc.L1Ball for p = 1")
    return p


def easy_projection(ball: LpBall | KNormBall, v: np.ndarray) -> np.ndarray | None:
    """The projection of ``v`` onto a norm ball where it needs no search: ``v`` itself inside the ball, the origin
    for radius 0; None otherwise."""
    if ball.norm(v) <= ball.radius:
        return v.copy()
    if ball.radius == 0:
        return np.zeros_like(v)
    return None


class LpBall(Set):
    """{x : ||x||_p <= radius} entrywise for any shape, p in (1, inf].

    LMO (Hoelder's equality case): -radius sign(d) |d|^(q-1) / ||d||_q^(q-1) with 1/p + 1/q = 1;
    for p = inf, -radius sign(d). The projection solves, for the multiplier lam of the norm constraint,
    y_i + lam p y_i^(p-1) = |v_i| entrywise (bisection), with lam the root of ||y(lam)||_p = radius.
    """

    def __init__(self, shape, p: float, radius: float = 1.0):
        self.shape = as_shape(shape)
        self.p = check_p(p)
        self.radius = check_radius(radius)

    @property
    def q(self) -> float:
        """The dual exponent, 1/p + 1/q = 1."""
        return 1.0 if math.isinf(self.p) else self.p / (self.p - 1.0)

    @property
    def diameter(self) -> float:
        # max ||x||_2 on the unit l_p ball: 1 for p <= 2 (at e_i), size^(1/2 - 1/p) for p >= 2 (at the
        # all-equal vector); x and -x are that far apart twice.
        exponent = 0.5 if math.isinf(self.p) else 0.5 - 1.0 / self.p
        return 2.0 * self.radius * max(1.0, self.size**exponent)

    contains_origin = True  # a ball centred at the origin

    def norm(self, x: np.ndarray) -> float:
        """||x||_p, computed on x / max |x| so that |x|^p neither overflows nor underflows."""
        flat = np.abs(np.asarray(x, dtype=float).ravel())
        top = float(flat.max(initial=0.0))
        return 0.0 if top == 0 else top * float(np.linalg.norm(flat / top, self.p))

    def lmo(self, d: np.ndarray) -> np.ndarray:
        top = np.abs(d).max(initial=0.0)
        if top == 0:
            return np.zeros_like(d)
        if math.isinf(self.p):
            return -self.radius * np.sign(d)
        # On d / max |d| the powers stay in [0, 1]: |d|^(q-1) cannot overflow for p near 1 (q large).
        weights = np.abs(d / top) ** (self.q - 1.0)
        x = weights / np.linalg.norm(weights.ravel(), self.p)
        return -self.radius * np.sign(d) * x

    def project(self, v: np.ndarray) -> np.ndarray:
        easy = easy_projection(self, v)
        if easy is not None:
            return easy
        if math.isinf(self.p):
            return np.clip(v, -self.radius, self.radius)
        if self.p == 2:
            return v * (self.radius / np.linalg.norm(v))
        # Homogeneity: project v / s onto the ball of radius / s, with s = max |v| keeping every power in [0, 1].
        s = float(np.abs(v).max())
        a, radius, p = np.abs(v.ravel()) / s, self.radius / s, self.p

        def entries(lam: float) -> np.ndarray:
            # y + lam p y^(p-1) = a has one root in [0, a] (the left side increases in y from 0).
            lo, hi = np.zeros_like(a), a.copy()
            for _ in range(LP_BISECTIONS):
                mid = 0.5 * (lo + hi)
                low = mid + lam * p * mid ** (p - 1.0) < a
                lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
            return 0.5 * (lo + hi)

        def excess(log_lam: float) -> float:
            return float(np.sum(entries(math.exp(log_lam)) ** p)) - radius**p

        # At lam >= ||a||_q / (p radius^(p-1)) every y_i <= (a_i / (lam p))^(1/(p-1)) has ||y||_p <= radius;
        # below, lam shrinks by e^8 until ||y||_p exceeds radius. The root is searched in log lam.
        high = math.log(np.linalg.norm(a, self.q)) - math.log(p) - (p - 1.0) * math.log(radius)
        low = high - 8.0
        while excess(low) <= 0:
            low -= 8.0
        log_lam = brentq(excess, low, high, xtol=1e-14, rtol=4 * np.finfo(float).eps)
        y = entries(math.exp(log_lam))
        return s * np.sign(v) * y.reshape(v.shape)

    def contains(self, point, tol: float = 1e-9) -> bool:
        p = np.asarray(point, dtype=float)  # a tensor comes as numpy (adapt_contains)
        return bool(p.shape == self.shape and self.norm(p) <= self.radius + tol * max(1.0, self.diameter))

    def cvxpy_constraints(self, var):
        return [cp.norm(cp.vec(var, order="C"), self.p) <= self.radius]

    def __repr__(self) -> str:
        return f"LpBall(shape={self.shape}, p={self.p}, radius={self.radius})"


def ksparse_project(v: np.ndarray, k: int, radius: float) -> np.ndarray:
    """Projection onto {||x||_inf <= radius, ||x||_1 <= k radius}: sign-symmetric, so |v| goes onto the capped
    simplex {0 <= y <= radius, sum y <= k radius} and the signs come back."""
    flat = v.ravel()
    y = project_capped(np.abs(flat), k * radius, radius, equality=False)
    return (np.sign(flat) * y).reshape(v.shape)


class _KSet(Set):
    """A set of the k largest entries' magnitudes: its shape, k and radius, checked."""

    contains_origin = True

    def __init__(self, shape, k: int, radius: float = 1.0):
        self.shape = as_shape(shape)
        self.k = check_count(k, "k", 1, self.size, f"k={max(1, self.size // 2)} (1 <= k <= size={self.size})")
        self.radius = check_radius(radius)


class KSparsePolytope(_KSet):
    """The K-sparse polytope: the convex hull of the vectors with k nonzero entries, each +-radius.

    Equal to {||x||_inf <= radius, ||x||_1 <= k radius} (FrankWolfe.jl's ``KSparseLMO``); it is the unit ball
    of the dual of the K-norm (:class:`KNormBall`), scaled. The LMO puts -radius sign(d_i) on the k largest
    |d_i| (0 where d_i = 0).
    """

    polytope = True

    @property
    def diameter(self) -> float:
        # Every vertex has norm radius sqrt(k), and v, -v are both vertices.
        return 2.0 * self.radius * math.sqrt(self.k)

    def lmo(self, d: np.ndarray) -> np.ndarray:
        flat = d.ravel()
        # Any k entries of largest |d_i| will do (ties are optimal either way): a partition, not a sort.
        top = np.argpartition(-np.abs(flat), self.k - 1)[: self.k] if self.k < flat.size else np.arange(flat.size)
        out = np.zeros_like(flat)
        out[top] = -self.radius * np.sign(flat[top])
        return out.reshape(self.shape)

    def project(self, p: np.ndarray) -> np.ndarray:
        return ksparse_project(p, self.k, self.radius)

    def contains(self, point, tol: float = 1e-9) -> bool:
        p = np.asarray(point, dtype=float)  # a tensor comes as numpy (adapt_contains)
        if p.shape != self.shape:
            return False
        slack = tol * max(1.0, self.diameter)
        a = np.abs(p)
        return bool(a.max() <= self.radius + slack and a.sum() <= self.k * self.radius + slack)

    def cvxpy_constraints(self, var):
        flat = cp.vec(var, order="C")
        return [cp.norm(flat, "inf") <= self.radius, cp.norm(flat, 1) <= self.k * self.radius]

    def __repr__(self) -> str:
        return f"KSparsePolytope(shape={self.shape}, k={self.k}, radius={self.radius})"


class KNormBall(_KSet):
    """{x : sum of the k largest |x_i| <= radius}, the ball of the K-norm (FrankWolfe.jl's ``KNormBallLMO``).

    It is conv(B_1(radius) U B_inf(radius / k)), so the LMO is the better of the l1 ball's vertex
    (-radius sign(d_i) e_i at the largest |d_i|) and the l_inf ball's (-(radius / k) sign(d)): its value is
    -radius max(||d||_inf, ||d||_1 / k), the dual norm. Not the intersection of the l_inf and l1 balls: that
    is the K-sparse polytope, this ball's polar (:class:`KSparsePolytope`). The projection is the prox of
    lam * K-norm, v - P_{lam K-sparse}(v) (Moreau), at the lam where its K-norm is radius (a root search).
    """

    polytope = True

    @property
    def diameter(self) -> float:
        # The farthest vertices from the origin: radius e_i (norm radius) or (radius / k) (+-1, ..., +-1).
        return 2.0 * self.radius * max(1.0, math.sqrt(self.size) / self.k)

    def norm(self, x: np.ndarray) -> float:
        return top_k_abs_sum(np.asarray(x, dtype=float), self.k)

    def lmo(self, d: np.ndarray) -> np.ndarray:
        flat = d.ravel()
        a = np.abs(flat)
        i = int(np.argmax(a))
        out = np.zeros_like(flat)
        if a[i] == 0:
            return out.reshape(self.shape)
        if a[i] >= a.sum() / self.k:  # the l1 vertex is at least as good
            out[i] = -self.radius * np.sign(flat[i])
        else:
            out = -(self.radius / self.k) * np.sign(flat)
        return out.reshape(self.shape)

    def project(self, v: np.ndarray) -> np.ndarray:
        easy = easy_projection(self, v)
        if easy is not None:
            return easy

        def prox(lam: float) -> np.ndarray:
            return v - ksparse_project(v, self.k, lam)

        flat = np.abs(v.ravel())
        # prox(lam) = 0 from lam = dual norm of v on; its K-norm decreases continuously from ||v||_(k) at 0.
        high = max(float(flat.max()), float(flat.sum()) / self.k)
        lam = brentq(lambda t: self.norm(prox(t)) - self.radius, 0.0, high, xtol=1e-15 * high, rtol=1e-15)
        return prox(lam)

    def contains(self, point, tol: float = 1e-9) -> bool:
        p = np.asarray(point, dtype=float)  # a tensor comes as numpy (adapt_contains)
        return bool(p.shape == self.shape and self.norm(p) <= self.radius + tol * max(1.0, self.diameter))

    def cvxpy_constraints(self, var):
        return [cp.sum_largest(cp.abs(cp.vec(var, order="C")), self.k) <= self.radius]

    def __repr__(self) -> str:
        return f"KNormBall(shape={self.shape}, k={self.k}, radius={self.radius})"


__all__ = ["LpBall", "KSparsePolytope", "KNormBall"]
