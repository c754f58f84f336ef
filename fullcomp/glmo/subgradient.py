"""Outer-function calculus, written once: subgradients and smoothed gradients of F(u, x).

The projection-based and smoothed baselines (PSG, prox-linear, LiNASA+ICG) need
derivative information of the outer function, which HMSFW's GLMO never asks
for.  Everything here works for any convex CVXPY outer function:

* a subgradient (g_u, g_x) of F at (u, x) is minus the dual of the equalities
  of the compiled DPP program ``min F(u', x') s.t. u' == p_u (, x' == p_x)``.
  Its value function is F(p_u, p_x) and CVXPY's Lagrangian adds
  ``+ dual^T (u' - p_u)``, so stationarity in u' reads ``0 in dF + dual``;
* the Moreau envelope F_mu(u, x) = min F(u', x') + (||u' - u||^2 + ||x' - x||^2) / (2 mu)
  has gradient ((u - prox_u) / mu, (x - prox_x) / mu), from one compiled DPP
  prox program per mu.

``F = cp.max(u)``, recognized structurally, gets closed forms: the uniform
weights on the argmax face as subgradient, log-sum-exp (softmax gradient) or
the Moreau envelope (gradient = simplex projection of u / mu) as smoothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cvxpy as cp
import numpy as np
from cvxpy.atoms.max import max as cvxpy_max
from cvxpy.transforms.partial_optimize import PartialProblem

from fullcomp import solvers
from fullcomp.errors import ModelError, OptionError
from fullcomp.model.composite import Outer
from fullcomp.model.outer import WEIGHTS
from fullcomp.sets.balls import project_simplex

SMOOTHINGS = ("auto", "lse", "moreau")


@dataclass(frozen=True)
class OuterGradient:
    """F (or its smoothing F_mu) at a point and a (sub)gradient there.

    ``u`` has shape (n,); ``x`` is flat (row-major, like the oracle's Jacobian
    columns), or None when F does not read the domain variable.
    """

    value: float
    u: np.ndarray
    x: np.ndarray | None


def is_plain_max(outer: Outer) -> bool:
    """True when F is exactly ``cp.max(u)`` of the placeholder (no x, no scaling)."""
    expr = outer.expr
    return isinstance(expr, cvxpy_max) and expr.axis is None and expr.args[0] is outer.u and not outer.depends_on_x


def has_partial_minimization(expr: cp.Expression) -> bool:
    if isinstance(expr, PartialProblem):
        return True
    return any(has_partial_minimization(arg) for arg in getattr(expr, "args", []))


def softmax_smoothing(u: np.ndarray, mu: float) -> OuterGradient:
    """F_mu(u) = mu log sum exp(u / mu), within mu log n above max(u); gradient softmax(u / mu)."""
    s = u / mu
    top = s.max()
    e = np.exp(s - top)  # shifted so that no exponent overflows
    total = e.sum()
    return OuterGradient(float(mu * (top + np.log(total))), e / total, None)


def max_moreau(u: np.ndarray, mu: float) -> OuterGradient:
    """Moreau envelope of max = support function of the simplex Delta:
    F_mu(u) = max_{q in Delta} <q, u> - (mu/2) ||q||^2, gradient q* = proj_Delta(u / mu)."""
    q = project_simplex(u / mu, 1.0)
    return OuterGradient(float(q @ u - 0.5 * mu * q @ q), q, None)


class OuterCalculus:
    """Subgradients and smoothed gradients of one outer function.

    Parameters
    ----------
    outer : the problem's validated :class:`~fullcomp.model.Outer`.
    structural : use the closed forms when F is ``cp.max(u)`` (default True);
        False forces the compiled programs (used to cross-check them).

    The programs are compiled on first use and re-solved with new parameter
    values (Clarabel, SCS as fallback, never warm-started so runs repeat).
    """

    def __init__(self, outer: Outer, *, structural: bool = True):
        self.outer = outer
        self.plain_max = structural and is_plain_max(outer)
        self._subgradient_program: tuple | None = None
        self._prox_programs: dict[float, tuple] = {}

    @property
    def depends_on_x(self) -> bool:
        return self.outer.depends_on_x

    def smoothing(self, kind: str) -> str:
        """Resolve ``kind``: "auto" is log-sum-exp for ``cp.max(u)``, the Moreau envelope otherwise."""
        if kind not in SMOOTHINGS:
            raise OptionError(f"smoothing must be one of {SMOOTHINGS}, got {kind!r}")
        if kind == "lse" and not self.plain_max:
            raise OptionError("smoothing='lse' (log-sum-exp) needs F = cp.max(u); use 'moreau' or 'auto'")
        if kind == "auto":
            return "lse" if self.plain_max else "moreau"
        return kind

    # -- subgradients ---------------------------------------------------------

    def subgradient(self, u: Any, x: Any = None) -> OuterGradient:
        """A subgradient (g_u, g_x) of F at (u, x) and F(u, x); ``x`` is read only if F depends on it."""
        u = self._u(u)
        if self.plain_max:
            # The centre of the argmax face, which is what the interior-point dual returns too.
            face = u == u.max()
            return OuterGradient(float(u.max()), face / face.sum(), None)
        problem, p_u, p_x, link_u, link_x = self._subgradient_program or self._compile_subgradient()
        p_u.value = u
        if p_x is not None:
            p_x.value = self._x(x)
        solvers.solve(problem, "subgradient of the outer function")
        g_x = None if link_x is None else -np.asarray(link_x.dual_value, dtype=np.float64).reshape(-1)
        return OuterGradient(float(problem.value), -np.asarray(link_u.dual_value, dtype=np.float64), g_x)

    def weights(self, u: Any, x: Any = None) -> np.ndarray:
        """The weights F puts on each inner value at (u, x), g_u: the adversary's q for a worst case, a CVaR, a
        DRO risk.  A named risk's closed form (``fc.risk_weights``) where F is one, else the subgradient's."""
        closed = getattr(self.outer.expr, WEIGHTS, None)
        if closed is not None and not self.outer.depends_on_x:
            return np.asarray(closed(self._u(u)), dtype=np.float64)
        return self.subgradient(u, x).u

    def _compile_subgradient(self) -> tuple:
        outer = self.outer
        p_u = cp.Parameter(outer.n, name="u_point")
        link_u = outer.u == p_u
        constraints, p_x, link_x = [link_u], None, None
        if outer.depends_on_x:
            p_x = cp.Parameter(outer.domain.shape, name="x_point")
            link_x = outer.domain.variable == p_x
            constraints.append(link_x)
        problem = cp.Problem(cp.Minimize(outer.expr), constraints)
        if not problem.is_dcp(dpp=True):
            raise ModelError(
                "the subgradient program is not DPP; keep parameters out of products in the outer function"
            )
        self._subgradient_program = (problem, p_u, p_x, link_u, link_x)
        return self._subgradient_program

    # -- smoothing ------------------------------------------------------------

    def smoothed(self, u: Any, x: Any = None, *, mu: float, kind: str = "auto") -> OuterGradient:
        """F_mu at (u, x) and its gradient, for the smoothing ``kind`` ("auto", "lse" or "moreau")."""
        kind = self.smoothing(kind)
        if not (np.isfinite(mu) and mu > 0):
            raise OptionError(f"mu must be a positive smoothing parameter, got {mu!r}")
        u = self._u(u)
        if kind == "lse":
            return softmax_smoothing(u, mu)
        if self.plain_max:
            return max_moreau(u, mu)
        problem, p_u, p_x = self._prox_programs.get(mu) or self._compile_prox(mu)
        p_u.value = u
        if p_x is not None:
            p_x.value = self._x(x)
        solvers.solve(problem, "prox of the outer function")
        outer = self.outer
        g_u = (u - np.asarray(outer.u.value, dtype=np.float64)) / mu
        g_x = None
        if p_x is not None:
            g_x = ((p_x.value - np.asarray(outer.domain.variable.value, dtype=np.float64)) / mu).reshape(-1)
        return OuterGradient(float(problem.value), g_u, g_x)

    def _compile_prox(self, mu: float) -> tuple:
        # mu is a constant of the program: a parameter 1/(2 mu) multiplying a parametrized sum of
        # squares would break DPP, and a run uses one mu, so one compiled program per mu.
        outer = self.outer
        p_u = cp.Parameter(outer.n, name="u_point")
        distance = cp.sum_squares(outer.u - p_u)
        p_x = None
        if outer.depends_on_x:
            p_x = cp.Parameter(outer.domain.shape, name="x_point")
            distance = distance + cp.sum_squares(outer.domain.variable - p_x)
        if has_partial_minimization(outer.expr):
            # CVXPY 1.9's QP detection walks into partial minimizations (fc.chi2_dro) and fails on a
            # quadratic objective, so the squared distance goes to an epigraph constraint instead
            # (a second-order cone, solved less accurately than Clarabel's native quadratic objective).
            t = cp.Variable(nonneg=True, name="squared_distance")
            problem = cp.Problem(cp.Minimize(outer.expr + t / (2.0 * mu)), [distance <= t])
        else:
            problem = cp.Problem(cp.Minimize(outer.expr + distance / (2.0 * mu)))
        if not problem.is_dcp(dpp=True):
            raise ModelError("the prox program is not DPP; keep parameters out of products in the outer function")
        self._prox_programs[mu] = (problem, p_u, p_x)
        return self._prox_programs[mu]

    # -- inputs ---------------------------------------------------------------

    def _u(self, u: Any) -> np.ndarray:
        u = np.asarray(u.detach().cpu() if hasattr(u, "detach") else u, dtype=np.float64).reshape(-1)
        if u.shape != (self.outer.n,) or not np.all(np.isfinite(u)):
            raise OptionError(f"u must be a finite vector of length {self.outer.n}, got shape {u.shape}")
        return u

    def _x(self, x: Any) -> np.ndarray:
        if x is None:
            raise OptionError("F depends on x: pass the point x as well as u")
        x = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
        return x.reshape(self.outer.domain.shape)


__all__ = ["OuterCalculus", "OuterGradient", "is_plain_max", "softmax_smoothing", "max_moreau", "SMOOTHINGS"]
