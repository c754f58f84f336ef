"""Outer functions that CVXPY has no single atom for."""

from __future__ import annotations

import math

import cvxpy as cp
from cvxpy.transforms.partial_optimize import partial_optimize

from fullcomp.errors import ModelError


def _vector(u: cp.Expression, name: str) -> int:
    if not isinstance(u, cp.Expression) or u.ndim != 1:
        raise ModelError(f"{name} needs a 1-D CVXPY expression such as fc.inner_value(n), got {u!r}")
    return u.shape[0]


def cvar(u: cp.Expression, alpha: float) -> cp.Expression:
    """CVaR_alpha(u) = min_t t + sum(max(u - t, 0)) / (alpha n), the mean of the upper alpha-tail.

    This is the Rockafellar-Uryasev value; it equals (sum of the alpha n largest entries) / (alpha n)
    (with a fractional boundary entry), which is how it is written here so that
    no auxiliary variable is needed.  ``alpha = 1`` is the mean, ``alpha = 1/n`` the max.
    """
    n = _vector(u, "cvar")
    alpha = float(alpha)
    if not 0 < alpha <= 1:
        raise ModelError(f"cvar alpha must lie in (0, 1], got {alpha}")
    m = alpha * n
    if math.isclose(m, round(m), rel_tol=0, abs_tol=1e-12):
        m = float(round(m))
    if m < 1:
        # Fewer than one entry in the tail: the tail mean is the largest entry.
        return cp.max(u)
    k = int(math.floor(m))
    frac = m - k
    tail = _sum_largest(u, k, n)
    if frac > 0:
        # S_k + frac * u_(k+1), written with integer sum_largest (CVXPY's canonicalization needs int k).
        tail = (1 - frac) * tail + frac * _sum_largest(u, k + 1, n)
    return tail / m


def _sum_largest(u: cp.Expression, k: int, n: int) -> cp.Expression:
    # CVXPY's sum_largest canonicalization fails when k == n and u carries a value
    # (as the placeholder does after a GLMO call): the sum of all n entries is cp.sum.
    return cp.sum(u) if k >= n else cp.sum_largest(u, k)


def chi2_dro(u: cp.Expression, kappa: float) -> cp.Expression:
    """max { q^T u : q in the simplex, (n/2) ||q - 1/n||^2 <= kappa }.

    The chi-square divergence ball around uniform weights, written through its
    dual (support function of simplex intersect ball = inf-convolution):
    ``min_v max(u - v) + mean(v) + sqrt(2 kappa / n) ||v||_2``.  ``kappa = 0``
    gives the mean; large ``kappa`` approaches the max.
    """
    n = _vector(u, "chi2_dro")
    kappa = float(kappa)
    if not kappa >= 0 or not math.isfinite(kappa):
        raise ModelError(f"chi2_dro kappa must be a finite number >= 0, got {kappa}")
    if kappa == 0:
        return cp.sum(u) / n
    v = cp.Variable(n, name="chi2_dual")
    radius = math.sqrt(2.0 * kappa / n)
    inner = cp.Problem(cp.Minimize(cp.max(u - v) + cp.sum(v) / n + radius * cp.norm(v, 2)))
    return partial_optimize(inner, opt_vars=[v], dont_opt_vars=list(u.variables()))
