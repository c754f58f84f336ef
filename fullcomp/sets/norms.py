"""More norm balls: l_p for p in (1, inf], the K-norm ball and the K-sparse polytope."""

from __future__ import annotations

import math
from fractions import Fraction

import cvxpy as cp
import numpy as np
from scipy.optimize import brentq

from fullcomp.errors import DomainError
from fullcomp.sets.base import Set, as_shape, check_radius
from fullcomp.sets.combinatorial import check_count, project_capped

#: Newton steps of the l_p projection's per-entry equation per multiplier (from bounds within a factor 2 of the
#: root, or the previous multiplier's solution, it takes a handful), and of the search for the multiplier.
LP_NEWTON_STEPS, LP_OUTER_STEPS = 60, 200
#: The largest denominator of CVXPY's rational p in its second-order-cone form of a p-norm (cp.pnorm's max_denom).
CVXPY_DENOMINATOR = 1024


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


class LpConditions:
    """The l_p projection's optimality conditions on magnitudes ``a`` in [0, 1]: y_i + c y_i^(p-1) = a_i for the
    multiplier's c = lam p, solved for all i at once by Newton's method.

    The equation is convex in y for p >= 2 and in w = y^(p-1) for p < 2 (y = w^r, r = 1/(p-1) > 1): there
    Newton's iterate lands at or above the root from any start and then decreases to it, and it is capped by
    the upper bounds min(a, (a/c)^(1/(p-1))) (in w: min(a^(p-1), a/c)), which are within a factor 2 of the
    root.  Each step costs one power, k = c y^(p-2) (formed from logs, since c overflows for a large p and a
    small ball) or k = w^(r-1); the iterate is kept between calls, so the outer search's nearby multipliers
    converge in one or two steps.
    """

    def __init__(self, a: np.ndarray, p: float):
        self.a, self.p = a, p
        self.in_y = p >= 2
        self.e = p - 2.0 if self.in_y else 1.0 / (p - 1.0) - 1.0  # k = c x^e (p >= 2), x^e (p < 2)
        with np.errstate(divide="ignore"):
            self.log_a = np.log(a) if self.in_y else None
        self.a_bound = None if self.in_y else a ** (p - 1.0)  # w <= a^(p-1), whatever c
        self.x: np.ndarray | None = None

    def _power(self, x: np.ndarray, log_c: float) -> np.ndarray:
        if not self.in_y:
            return x**self.e
        with np.errstate(divide="ignore"):
            return np.exp(log_c + self.e * np.log(x))

    def solve(self, log_c: float) -> tuple[np.ndarray, np.ndarray]:
        """x (y for p >= 2, w for p < 2) at the multiplier c = exp(log_c), and k at x."""
        a, p = self.a, self.p
        c = math.exp(min(log_c, 700.0))  # used for p < 2 only, where the root keeps c <= 1 / w
        if self.in_y:
            bound = np.minimum(a, np.exp((self.log_a - log_c) / (p - 1.0)))
        else:
            bound = np.minimum(self.a_bound, a / c)
        x = bound if self.x is None else np.minimum(self.x, bound)
        for _ in range(LP_NEWTON_STEPS):
            k = self._power(x, log_c)
            if self.in_y:
                step = (x + k * x - a) / (1.0 + (p - 1.0) * k)
            else:
                step = (k * x + c * x - a) / ((self.e + 1.0) * k + c)
            x = np.clip(x - step, 0.0, bound)
            # Newton's error squares: after a step of 1e-9 relative the iterate is at rounding (an all-eps test
            # could wait forever on entries that rounding moves by an ulp).
            if np.all(np.abs(step) <= 1e-9 * x + 1e-300):
                break
        self.x = x
        return x, self._power(x, log_c)

    def gap(self, log_c: float, log_target: float) -> tuple[float, float, np.ndarray]:
        """log sum y^p - ``log_target`` at c = exp(log_c), its derivative in log c, and y."""
        x, k = self.solve(log_c)
        weighted = k * x * x  # c y^p for p >= 2 (k = c y^(p-2)); y^p = w^(r+1) for p < 2 (k = w^(r-1))
        total = float(weighted.sum())
        if total == 0:
            return -math.inf, 0.0, x
        if self.in_y:
            rate = -self.p * float((k * weighted / (1.0 + (self.p - 1.0) * k)).sum()) / total
            return math.log(total) - log_c - log_target, rate, x
        c = math.exp(min(log_c, 700.0))
        rate = -self.p * c * float((weighted / (k + c * (self.p - 1.0))).sum()) / total
        return math.log(total) - log_target, rate, k * x


def lp_project_magnitudes(a: np.ndarray, radius: float, p: float) -> np.ndarray:
    """The projection of magnitudes ``a`` in [0, 1] (||a||_p > radius > 0) onto the l_p ball of ``radius``: the y
    of :class:`LpConditions` at the multiplier where ||y||_p = radius.

    Newton's method on log ||y||_p^p - log radius^p in log c, which is linear for large c (there
    y_i ~ (a_i / c)^(1/(p-1))): from the upper end it needs few steps.  A step that would leave the bracket
    bisects it, or steps down by e^8 while its lower end is unknown.
    """
    conditions, log_target = LpConditions(a, p), p * math.log(radius)
    # At c >= ||a||_q / radius^(p-1) every y_i <= (a_i / c)^(1/(p-1)) has ||y||_p <= radius.
    low, high = -math.inf, math.log(np.linalg.norm(a, p / (p - 1.0))) - (p - 1.0) * math.log(radius)
    log_c = high
    for _ in range(LP_OUTER_STEPS):
        gap, rate, y = conditions.gap(log_c, log_target)
        low, high = (log_c, high) if gap > 0 else (low, log_c)
        step = gap / rate if rate < 0 and math.isfinite(gap) else math.inf
        if abs(gap) <= 1e-14 or abs(step) <= 1e-15 * max(1.0, abs(log_c)) or high - low <= 1e-14:
            break
        log_c -= step
        if not low < log_c < high:
            log_c = 0.5 * (low + high) if math.isfinite(low) else high - 8.0
    return y


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
    y_i + lam p y_i^(p-1) = |v_i| entrywise (Newton's method on all entries at once), with lam the root of
    ||y(lam)||_p = radius (:func:`lp_project_magnitudes`).
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
        y = lp_project_magnitudes(np.abs(v.ravel()) / s, self.radius / s, self.p)
        y *= min(1.0, (self.radius / s) / max(self.norm(y), np.finfo(float).tiny))  # on the ball, not past it
        return s * np.sign(v) * y.reshape(v.shape)

    def contains(self, point, tol: float = 1e-9) -> bool:
        p = np.asarray(point, dtype=float)  # a tensor comes as numpy (adapt_contains)
        return bool(p.shape == self.shape and self.norm(p) <= self.radius + tol * max(1.0, self.diameter))

    def cvxpy_constraints(self, var):
        flat = cp.vec(var, order="C")
        if math.isinf(self.p) or Fraction(self.p).limit_denominator(CVXPY_DENOMINATOR) == self.p:
            return [cp.norm(flat, self.p) <= self.radius]
        # CVXPY rounds p to a fraction of denominator <= 1024 for its cone form; p = 1.0001 rounds to 1, an atom
        # CVXPY then calls nonconvex. The power-cone form keeps p exact.
        return [cp.pnorm(flat, self.p, approx=False) <= self.radius]

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
