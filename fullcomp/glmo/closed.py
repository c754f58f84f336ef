"""The column-generation master of a named risk, min_{w in simplex} F(c + A w), from the risk's closed forms.

A named risk (``fc.cvar``, ``fc.kl_dro``, ...) declares its value F(u) and its weights q(u), a subgradient of F,
in closed form: a sort or a bisection, O(n log n).  The master has a few variables w (one per pooled atom),
so it needs no conic program over the n values:

* the smooth risks (``entropic_risk``, ``smooth_max``, ``kl_dro``, ``chi2_dro`` off their kinks) take Newton
  steps on w, their Hessian A^T H(u) A in closed form, each step a QP over the simplex in the k weights;
  the Frank-Wolfe gap g.w - min_j g_j, g = A^T q(u), bounds the master's suboptimality and stops it;
* a smooth one at a kink (``kl_dro`` once its weights are the max's) takes cutting planes: every q(u_j) gives
  the minorant F(u) >= q_j.u + F(u_j) - q_j.u_j, and the LP over the minorants (HiGHS's simplex, exact
  vertices) bounds the master from below.  A polyhedral risk has finitely many weights, so the cuts end with
  the LP's bound equal to F at its point.

The polyhedral risks (``cvar``, ``top_k_mean``, ``tv_dro``, ``group_dro``) keep the conic master (an LP that
Clarabel solves in one go): cutting planes on them are exact but need hundreds of LPs a master at n = 10,000
(162 s against 64 s for one certified GLMO call of a CVaR, benchmarks/risk_master.py).

The master's q is the risk's weights at the master's u (a convex combination of them where the cuts end, with
the LP's multipliers: the subgradient that certifies the master's optimality), so the certificate
<V^T q, x_master - atom> of column generation holds as with the conic master.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from fullcomp.glmo.master import MasterSolution
from fullcomp.model.calculus import argmax_weights, closed_form, kl_tilt, named_risk
from fullcomp.model.composite import Outer

#: The risks whose F is smooth off a kink, with their Hessian in closed form: Newton steps.
SMOOTH = ("entropic_risk", "smooth_max", "kl_dro", "chi2_dro")
#: The risks whose F is the max of finitely many linear functions: cutting planes end, exact.
POLYHEDRAL = ("cvar", "top_k_mean", "tv_dro", "group_dro")
#: The master stops once its gap is this times max(1, |F|): rounding, for the sums over n values it forms.
TOL = 1e-12
#: Cutting planes on a smooth risk at a kink converge only linearly: they stop at this gap (an epsilon-
#: subgradient q, within 1e-9 |F| of certifying), or give the master up to the conic one after SMOOTH_CUTS.
LOOSE = 1e-9
NEWTON_STEPS = 60
CUTS = 400
SMOOTH_CUTS = 60
#: Below this many values the compiled conic master of fc.chi2_dro is the faster one: near its kink between
#: pieces, Newton on the atom weights takes dozens of steps (n = 7, kappa = 2: 1.5 s against 0.01 s per GLMO;
#: n = 200: even; n = 1,000: 0.47 s against 4.8 s).
CHI2_CLOSED_FROM = 500


class ClosedMaster:
    """The restricted master of one named risk over varying atom images, solved from its closed forms.

    Build it with :meth:`build` (None for an F that is not one of the smooth named risks of the placeholder:
    the polyhedral and the pairwise risks keep the conic master; the class itself solves the polyhedral ones
    too).  :meth:`solve` returns None where neither method reached the master's optimum, and column generation
    then solves the conic master.
    """

    @classmethod
    def build(cls, outer: Outer) -> ClosedMaster | None:
        named = named_risk(outer.expr)
        if named is None or named[0] not in SMOOTH:
            return None
        return cls(outer)

    @classmethod
    def for_column_generation(cls, outer: Outer) -> ClosedMaster | None:
        """The master column generation takes: :meth:`build`'s, but fc.chi2_dro keeps the conic master below
        ``CHI2_CLOSED_FROM`` values, where that one is faster."""
        master = cls.build(outer)
        if master is not None and master.name == "chi2_dro" and outer.n < CHI2_CLOSED_FROM:
            return None
        return master

    def __init__(self, outer: Outer):
        self.name, self.params = named_risk(outer.expr)
        form = closed_form(outer.expr)
        self.value, self.weights = form.value_at, form.weights_at
        self.kept: list[tuple[np.ndarray, float]] = []  # (q_j, F(u_j) - q_j.u_j) of the cuts the last master used

    def solve(self, c: np.ndarray, images: np.ndarray) -> MasterSolution | None:
        """Weights on the columns of ``images`` (n, k) minimizing F(c + images @ w) over the simplex, and the
        risk's weights q at the minimizer's u; None where the master was not solved to its gap."""
        if images.shape[1] == 1:
            return MasterSolution(np.ones(1), self.weights(c + images[:, 0]))
        if self.name in SMOOTH:
            solution = self._newton(c, images)
            if solution is not None:
                return solution
        return self._cuts(c, images)

    def _at(self, u: np.ndarray) -> tuple[float, np.ndarray, float | None]:
        """(F(u), q(u), and for kl_dro the inverse temperature of its tilt: inf at the kink where q is the max's),
        from one bisection for kl_dro, whose value is q.u."""
        if self.name == "kl_dro":
            q, beta = kl_tilt(u, self.params["rho"])
            return float(q @ u), q, beta
        return self.value(u), self.weights(u), None

    def _newton(self, c: np.ndarray, A: np.ndarray) -> MasterSolution | None:
        """Projected Newton steps from the centre of the simplex; None at a kink (no Hessian there)."""
        k = A.shape[1]
        w = np.full(k, 1.0 / k)
        u = c + A @ w
        F, q, beta = self._at(u)
        for _ in range(NEWTON_STEPS):
            g = A.T @ q
            gap = float(g @ w - g.min())  # F(u) - min: at most this, q being a subgradient at u
            if gap <= TOL * max(1.0, abs(F)):
                return MasterSolution(w, q)
            H = self._curvature(u, q, beta, A, g)
            if H is None:
                return None
            step = self._step(c, A, w, F, g, H)
            if step is None or np.abs(step[0]).max() <= 1e-12:
                # No descent left along the Newton direction: at a kink between pieces (tied losses), where the
                # weights at u are a subgradient but not the certifying one.  Within LOOSE, q prices well.
                return MasterSolution(w, q) if gap <= LOOSE * max(1.0, abs(F)) else None
            # w + d is a convex combination of w and the QP's point: on the simplex up to rounding, which the clip
            # takes off (u, evaluated at w + d, moves by as little).
            w, (u, (F, q, beta)) = np.clip(w + step[0], 0.0, None), step[1]
        g = A.T @ q
        return MasterSolution(w, q) if float(g @ w - g.min()) <= LOOSE * max(1.0, abs(F)) else None

    def _step(self, c: np.ndarray, A: np.ndarray, w: np.ndarray, F: float, g: np.ndarray, H: np.ndarray):
        """(d, (u, F, q, beta) at w + d) for a step d that decreases F by Armijo's rule along the Newton direction,
        damped (H + delta I) where the Hessian of the piece at u misleads across a kink of chi2_dro's pieces;
        None where none descends."""
        scale = 1.0 + float(np.abs(np.diag(H)).max())
        for delta in (0.0, 1e-6, 1e-3, 1.0, 1e3):
            d = _simplex_qp(g, H + delta * scale * np.eye(w.size), w) - w
            slope, step = float(g @ d), 1.0
            while slope < 0 and step > 1e-12:
                u = c + A @ (w + step * d)
                at = self._at(u)
                if at[0] <= F + 1e-4 * step * slope:
                    return step * d, (u, at)
                step *= 0.5
        return None

    def _curvature(self, u: np.ndarray, q: np.ndarray, beta: float | None, A: np.ndarray, g: np.ndarray):
        """A^T H(u) A, H the Hessian of F at u, in closed form; None at a kink of F."""
        name = self.name
        if name in ("entropic_risk", "smooth_max"):
            return _tilted(A, q, g) / self.params["lam"]
        if name == "kl_dro":
            # F(u) = min_t G(u, t), G = t rho + t log mean exp(u / t): its Hessian is G_uu - G_ut G_tu / G_tt,
            # (Sigma - Sigma u u^T Sigma / u^T Sigma u) / t with Sigma = diag(q) - q q^T.
            if beta is None or not math.isfinite(beta):
                return None
            r = u - float(q @ u)
            s, spread = A.T @ (q * r), float(q @ (r * r))
            B = _tilted(A, q, g)
            return beta * (B - np.outer(s, s) / spread) if spread > 0 else beta * B
        if self.params["kappa"] == 0:  # chi2_dro at 0 is the mean: linear
            return np.zeros((A.shape[1], A.shape[1]))
        return _chi2_curvature(u, q, A)

    def _cuts(self, c: np.ndarray, A: np.ndarray) -> MasterSolution | None:
        """Kelley's cutting planes, from the cuts the last master used and the centre of the simplex."""
        k = A.shape[1]
        cuts = list(self.kept)
        u = c + A @ np.full(k, 1.0 / k)
        q = self.weights(u)
        cuts.append((q, self.value(u) - float(q @ u)))
        rows = [A.T @ qj for qj, _ in cuts]
        offsets = [float(qj @ c) + bj for qj, bj in cuts]
        smooth = self.name in SMOOTH
        for i in range(SMOOTH_CUTS if smooth else CUTS):
            lp = _cut_lp(np.array(rows), np.array(offsets))
            if lp is None:
                return None
            w, lower, mu = lp
            u = c + A @ w
            F = self.value(u)
            if F - lower <= (LOOSE if smooth and i + 1 == SMOOTH_CUTS else TOL) * max(1.0, abs(F)):
                used = np.flatnonzero(mu > 0)
                if used.size == 0:  # no multiplier reported: the weights at u (the LP's point) itself
                    return MasterSolution(w, self.weights(u))
                self.kept = [cuts[j] for j in used]
                q = sum(mu[j] * cuts[j][0] for j in used) / mu[used].sum()
                return MasterSolution(w, q)
            q = self.weights(u)
            cuts.append((q, F - float(q @ u)))
            rows.append(A.T @ q)
            offsets.append(float(q @ c) + cuts[-1][1])
        return None


def _tilted(A: np.ndarray, q: np.ndarray, g: np.ndarray) -> np.ndarray:
    """A^T (diag(q) - q q^T) A, with g = A^T q."""
    return (A * q[:, None]).T @ A - np.outer(g, g)


def _chi2_curvature(u: np.ndarray, q: np.ndarray, A: np.ndarray) -> np.ndarray | None:
    """chi2_dro's A^T H A where the ball is tight: on the support S of q (k entries) F is
    mean_S(u) + r ||P_S u|| (P_S centres on S), so H = t (P_S - v v^T), v = P_S u / ||P_S u||, t = q's slope."""
    if np.array_equal(q, argmax_weights(u)):
        return None  # the maximizers' weights: F is the max there, no Hessian
    S = q > 0
    centred = u[S] - u[S].mean()
    norm2 = float(centred @ centred)
    if norm2 == 0:
        return None
    t = float((q[S] - 1.0 / S.sum()) @ centred) / norm2
    AS = A[S] - A[S].mean(axis=0)
    s = AS.T @ centred
    return t * (AS.T @ AS - np.outer(s, s) / norm2)


def _simplex_qp(g: np.ndarray, H: np.ndarray, w: np.ndarray) -> np.ndarray:
    """argmin over the simplex of g.(v - w) + (v - w)^T H (v - w) / 2 (Clarabel on k variables); the best vertex
    where Clarabel reports no solution."""
    import clarabel

    k = w.size
    H = 0.5 * (H + H.T) + 1e-14 * (1.0 + np.abs(np.diag(H)).max()) * np.eye(k)
    P = sp.csc_matrix(np.triu(H))
    A = sp.csc_matrix(np.vstack([np.ones((1, k)), -np.eye(k)]))
    b = np.concatenate([[1.0], np.zeros(k)])
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    cones = [clarabel.ZeroConeT(1), clarabel.NonnegativeConeT(k)]
    solution = clarabel.DefaultSolver(P, g - H @ w, A, b, cones, settings).solve()
    if str(solution.status) != "Solved":
        return np.eye(k)[int(np.argmin(g))]
    v = np.clip(np.asarray(solution.x), 0.0, None)
    return _polish(g, H, w, v / v.sum())


def _polish(g: np.ndarray, H: np.ndarray, w: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The QP's exact minimizer, by active sets from the support Clarabel found: the KKT system on a support
    (a linear solve), entries that turn negative dropped, entries whose gradient undercuts the support's
    added, until both hold; Clarabel's answer (accurate to its tolerance, 1e-8, which would stop Newton's
    quadratic convergence there) where the sets cycle."""
    k = v.size
    support = v > 1e-6 * v.max()
    for _ in range(2 * k + 2):
        S = np.flatnonzero(support)
        m = S.size
        kkt = np.zeros((m + 1, m + 1))
        kkt[:m, :m], kkt[:m, m], kkt[m, :m] = H[np.ix_(S, S)], 1.0, 1.0
        try:
            solved = np.linalg.solve(kkt, np.concatenate([H[S] @ w - g[S], [1.0]]))
        except np.linalg.LinAlgError:
            return v
        if solved[:m].min() < 0:
            support[S[solved[:m] < 0]] = False
            continue
        exact = np.zeros(k)
        exact[S] = solved[:m]
        residual = g + H @ (exact - w)  # the QP's gradient: -nu on the support, at least -nu off it
        below = ~support & (residual < -solved[m] - 1e-13 * (1.0 + np.abs(residual).max()))
        if not below.any():
            return exact
        support[np.flatnonzero(below)[np.argmin(residual[below])]] = True
    return v


def _cut_lp(rows: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, float, np.ndarray] | None:
    """min t over (w in the simplex, t) s.t. rows @ w + offsets <= t: (w, t, the cuts' multipliers)."""
    m, k = rows.shape
    cost = np.concatenate([np.zeros(k), [1.0]])
    A_ub = np.hstack([rows, -np.ones((m, 1))])
    A_eq = np.concatenate([np.ones(k), [0.0]])[None, :]
    bounds = [(0.0, None)] * k + [(None, None)]
    res = linprog(cost, A_ub=A_ub, b_ub=-offsets, A_eq=A_eq, b_eq=[1.0], bounds=bounds, method="highs")
    if res.status != 0:
        return None
    w = np.clip(res.x[:k], 0.0, None)
    return w / w.sum(), float(res.fun), np.clip(-np.asarray(res.ineqlin.marginals), 0.0, None)
