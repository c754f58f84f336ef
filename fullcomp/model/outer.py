"""Outer functions that CVXPY has no single atom for: named risks of the placeholder u.

Each helper returns a DCP CVXPY expression in ``u = fc.inner_value(n)`` (so every GLMO route applies) and
remembers how to compute the adversary's weights q at a point: :func:`risk_weights` returns them.  Every
risk here is the support function of a set of weights on the simplex, or such a supremum less a penalty:

    R(u) = max { q.u - penalty(q) : q in Q },   Q a subset of the simplex,

and its weights at u are the q that attains the max (a subgradient of R at u).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import cvxpy as cp
import numpy as np
from cvxpy.transforms.partial_optimize import partial_optimize
from scipy.optimize import brentq
from scipy.special import logsumexp, softmax

from fullcomp.errors import ModelError
from fullcomp.model.placeholder import is_placeholder

#: The attribute under which a named risk keeps its closed-form weights ``q(u)``.
WEIGHTS = "_fullcomp_weights"
Weights = Callable[[np.ndarray], np.ndarray]


def _vector(u: cp.Expression, name: str) -> int:
    if not isinstance(u, cp.Expression) or u.ndim != 1:
        raise ModelError(f"{name} needs a 1-D CVXPY expression such as fc.inner_value(n), got {u!r}")
    return u.shape[0]


def _named(expr: cp.Expression, weights: Weights) -> cp.Expression:
    """``expr`` carrying its closed-form weights for :func:`risk_weights`."""
    setattr(expr, WEIGHTS, weights)
    return expr


def _number(value: Any, name: str, helper: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ModelError(f"{helper} {name} must be a number, got {value!r}") from None
    if not math.isfinite(value):
        raise ModelError(f"{helper} {name} must be finite, got {value}")
    return value


def _temperature(lam: Any, name: str, helper: str) -> float:
    lam = _number(lam, name, helper)
    if not lam > 0:
        raise ModelError(
            f"{helper} {name} must be a temperature > 0, got {lam}; a small {name} approaches the max, "
            f"use cp.max(u) for {name} = 0"
        )
    return lam


# ---- weights in closed form ------------------------------------------------------------------------


def capped_weights(u: np.ndarray, m: float) -> np.ndarray:
    """argmax { q.u : q in the simplex, q <= 1/m }, for m >= 1: mass 1/m on the largest entries in turn, the
    boundary's share split evenly over entries tied there (so that tied entries get equal weights)."""
    u = np.asarray(u, dtype=np.float64)
    q = np.zeros(u.size)
    order = np.argsort(-u, kind="stable")
    ranked = u[order]
    slots, i = float(m), 0
    while slots > 1e-12 * m and i < u.size:
        j = i + 1
        while j < u.size and ranked[j] == ranked[i]:
            j += 1
        take = min(float(j - i), slots)
        q[order[i:j]] = take / (j - i) / m
        slots -= take
        i = j
    return q


def _softmax(u: np.ndarray, lam: float) -> np.ndarray:
    return softmax(np.asarray(u, dtype=np.float64) / lam)


def _argmax_split(u: np.ndarray) -> np.ndarray:
    """Uniform weights on the largest entries of u (a vertex when the max is unique)."""
    top = u == u.max()
    return top / top.sum()


def _grow(f: Callable[[float], float], target: float) -> float:
    """Some t >= 1 with f(t) >= target, for an increasing f that exceeds target eventually."""
    t = 1.0
    while f(t) < target and t < 1e300:
        t *= 2.0
    return t


def kl_weights(u: np.ndarray, rho: float) -> np.ndarray:
    """argmax { q.u : q in the simplex, KL(q || 1/n) <= rho }: softmax(u / lam) with the lam at which the
    KL constraint is tight, or uniform weights on the maximizers when even they are within rho."""
    u = np.asarray(u, dtype=np.float64)
    n, spread = u.size, float(u.max() - u.min())
    top = _argmax_split(u)
    if rho == 0 or spread == 0:
        return np.full(n, 1.0 / n)
    if rho >= math.log(n / np.count_nonzero(top)):
        return top
    w = (u - u.max()) / spread  # in [-1, 0]: q(t) = softmax(t w), KL increasing in t from 0 to log(n / |argmax|)

    def kl(t: float) -> float:
        q = softmax(t * w)
        return float(np.sum(q * np.log(np.maximum(n * q, 1e-300))))

    hi = _grow(kl, rho)
    if kl(hi) < rho:  # rho within rounding of log(n / #maximizers)
        return top
    t = brentq(lambda s: kl(s) - rho, 0.0, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    return softmax(t * w)


def project_simplex(y: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex (sort and threshold)."""
    s = np.sort(y)[::-1]
    cums = np.cumsum(s) - 1.0
    ks = np.arange(1, y.size + 1)
    k = ks[s - cums / ks > 0][-1]
    return np.maximum(y - cums[k - 1] / k, 0.0)


def chi2_weights(u: np.ndarray, kappa: float) -> np.ndarray:
    """argmax { q.u : q in the simplex, (n/2) ||q - 1/n||^2 <= kappa }: the projection of 1/n + t u onto
    the simplex with the t at which the ball constraint is tight (the distance to 1/n grows with t), or
    uniform weights on the maximizers when they lie in the ball."""
    u = np.asarray(u, dtype=np.float64)
    n, spread = u.size, float(u.max() - u.min())
    uniform = np.full(n, 1.0 / n)
    if kappa == 0 or spread == 0:
        return uniform
    top = _argmax_split(u)
    if 0.5 * n * float(np.sum((top - uniform) ** 2)) <= kappa:
        return top
    w = (u - u.mean()) / spread

    def divergence(t: float) -> float:
        return 0.5 * n * float(np.sum((project_simplex(uniform + t * w) - uniform) ** 2))

    hi = _grow(divergence, kappa)
    if divergence(hi) < kappa:  # kappa within rounding of the maximizers' divergence
        return top
    t = brentq(lambda s: divergence(s) - kappa, 0.0, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    return project_simplex(uniform + t * w)


# ---- the risks -------------------------------------------------------------------------------------


def cvar(u: cp.Expression, alpha: float) -> cp.Expression:
    """CVaR_alpha(u) = min_t t + sum(max(u - t, 0)) / (alpha n), the mean of the upper alpha-tail.

    This is the Rockafellar-Uryasev value; it equals (sum of the alpha n largest entries) / (alpha n)
    (with a fractional boundary entry), which is how it is written here so that
    no auxiliary variable is needed.  ``alpha = 1`` is the mean, ``alpha = 1/n`` the max.

    Sup form: max { q.u : q in the simplex, q <= 1 / (alpha n) }.  Weights: 1/(alpha n) on the
    floor(alpha n) largest entries, the remainder on the next one (ties at the boundary share it evenly);
    for alpha n < 1, the max's weights.
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
        return _named(cp.max(u), lambda w: capped_weights(w, 1.0))
    k = int(math.floor(m))
    frac = m - k
    tail = _sum_largest(u, k, n)
    if frac > 0:
        # S_k + frac * u_(k+1), written with integer sum_largest (CVXPY's canonicalization needs int k).
        tail = (1 - frac) * tail + frac * _sum_largest(u, k + 1, n)
    return _named(tail / m, lambda w: capped_weights(w, m))


def _sum_largest(u: cp.Expression, k: int, n: int) -> cp.Expression:
    # CVXPY's sum_largest canonicalization fails when k == n and u carries a value
    # (as the placeholder does after a GLMO call): the sum of all n entries is cp.sum.
    return cp.sum(u) if k >= n else cp.sum_largest(u, k)


def top_k_mean(u: cp.Expression, k: int) -> cp.Expression:
    """The mean of the k largest entries of u: ``cp.sum_largest(u, k) / k``.

    Equal to ``cvar(u, k / n)``; ``k = 1`` is the max, ``k = n`` the mean.
    Sup form: max { q.u : q in the simplex, q <= 1/k }.  Weights: 1/k on the k largest entries (entries
    tied with the k-th largest share what is left evenly).
    """
    n = _vector(u, "top_k_mean")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise ModelError(f"top_k_mean k must be an int in 1..{n} (the number of entries averaged), got {k!r}")
    k = int(k)
    return _named(_sum_largest(u, k, n) / k, lambda w: capped_weights(w, float(k)))


def chi2_dro(u: cp.Expression, kappa: float) -> cp.Expression:
    """max { q^T u : q in the simplex, (n/2) ||q - 1/n||^2 <= kappa }.

    The chi-square divergence ball around uniform weights, written through its
    dual (support function of simplex intersect ball = inf-convolution):
    ``min_v max(u - v) + mean(v) + sqrt(2 kappa / n) ||v||_2``.  ``kappa = 0``
    gives the mean; large ``kappa`` approaches the max.

    Weights: the projection of 1/n + t u onto the simplex, with t chosen so that the divergence is kappa;
    uniform weights on the largest entries once those are within kappa (kappa >= (n - 1)/2 always is).
    """
    n = _vector(u, "chi2_dro")
    kappa = float(kappa)
    if not kappa >= 0 or not math.isfinite(kappa):
        raise ModelError(f"chi2_dro kappa must be a finite number >= 0, got {kappa}")
    if kappa == 0:
        return _named(cp.sum(u) / n, lambda w: np.full(w.size, 1.0 / w.size))
    v = cp.Variable(n, name="chi2_dual")
    radius = math.sqrt(2.0 * kappa / n)
    inner = cp.Problem(cp.Minimize(cp.max(u - v) + cp.sum(v) / n + radius * cp.norm(v, 2)))
    expr = partial_optimize(inner, opt_vars=[v], dont_opt_vars=list(u.variables()))
    return _named(expr, lambda w: chi2_weights(w, kappa))


def entropic_risk(u: cp.Expression, lam: float) -> cp.Expression:
    """The entropic risk (KL-penalized DRO) at temperature lam > 0:

        lam * log( mean(exp(u / lam)) ) = lam * (log_sum_exp(u / lam) - log n)
                                        = max { q.u - lam KL(q || 1/n) : q in the simplex }.

    It lies between mean(u) and max(u): lam -> inf gives the mean, lam -> 0 the max.
    Weights: softmax(u / lam); at them q.u - lam KL(q || 1/n) is the risk's value.
    """
    n = _vector(u, "entropic_risk")
    lam = _temperature(lam, "lam", "entropic_risk")
    return _named(lam * cp.log_sum_exp(u / lam) - lam * math.log(n), lambda w: _softmax(w, lam))


def kl_dro(u: cp.Expression, rho: float) -> cp.Expression:
    """The worst expectation over weights within KL divergence rho of uniform:

        max { q.u : q in the simplex, KL(q || 1/n) <= rho }
          = min_{lam >= 0} lam rho + lam log mean(exp(u / lam)),

    written through the dual as a partial minimization over (lam, s, z): minimize lam rho + s subject to
    z_i >= lam exp((u_i - s) / lam) (exponential cones) and sum(z) <= n lam; lam = 0 leaves s >= max(u).
    ``rho = 0`` is the mean, ``rho >= log n`` the max.
    Weights: softmax(u / lam*) with lam* the temperature at which KL(q || 1/n) = rho; uniform weights on
    the largest entries once rho >= log(n / #maximizers).  q.u is the risk's value.
    """
    n = _vector(u, "kl_dro")
    rho = _number(rho, "rho", "kl_dro")
    if not rho >= 0:
        raise ModelError(f"kl_dro rho must be a radius >= 0, got {rho}; rho = 0 is the mean")
    if rho == 0:
        return _named(cp.sum(u) / n, lambda w: np.full(w.size, 1.0 / w.size))
    lam = cp.Variable(nonneg=True, name="kl_temperature")
    s = cp.Variable(name="kl_shift")
    z = cp.Variable(n, name="kl_cone")
    cones = [cp.constraints.ExpCone(u - s, lam * np.ones(n), z), cp.sum(z) <= n * lam]
    inner = cp.Problem(cp.Minimize(rho * lam + s), cones)
    expr = partial_optimize(inner, opt_vars=[lam, s, z], dont_opt_vars=list(u.variables()))
    return _named(expr, lambda w: kl_weights(w, rho))


def smooth_max(u: cp.Expression, lam: float) -> cp.Expression:
    """The log-sum-exp smoothing of the max at temperature lam > 0:

        lam * log( sum(exp(u / lam)) ) = max { q.u + lam H(q) : q in the simplex },  H(q) = -sum q log q,

    so max(u) <= smooth_max(u, lam) <= max(u) + lam log n (it upper-bounds the max by at most lam log n;
    ``entropic_risk(u, lam)`` is this less lam log n).
    Weights: softmax(u / lam); at them q.u + lam H(q) is the value.
    """
    _vector(u, "smooth_max")
    lam = _temperature(lam, "lam", "smooth_max")
    return _named(lam * cp.log_sum_exp(u / lam), lambda w: _softmax(w, lam))


def group_dro(u: cp.Expression, group_sizes: Sequence[float], C: float) -> cp.Expression:
    """The group-adjusted worst case of Group DRO (Sagawa et al., 2020), u_g the loss of group g:

        max_g ( u_g + C / sqrt(n_g) ) = max { q.(u + C / sqrt(n)) : q in the simplex },

    with ``group_sizes`` the n_g > 0 (one per entry of u) and C >= 0; ``C = 0`` is the max.
    Weights: uniform on the groups that attain the max of u_g + C / sqrt(n_g) (the argmax vertex when
    it is unique); q.(u + C / sqrt(n)) is the value.
    """
    n = _vector(u, "group_dro")
    sizes = np.asarray(group_sizes, dtype=np.float64).reshape(-1)
    if sizes.shape != (n,):
        raise ModelError(f"group_dro group_sizes needs one size per entry of u ({n}), got {sizes.size}")
    if not (np.all(np.isfinite(sizes)) and np.all(sizes > 0)):
        raise ModelError(f"group_dro group_sizes must be finite and > 0 (samples per group), got {sizes}")
    C = _number(C, "C", "group_dro")
    if not C >= 0:
        raise ModelError(f"group_dro C must be >= 0 (the weight of the 1/sqrt(n_g) adjustment), got {C}")
    adjust = C / np.sqrt(sizes)
    return _named(cp.max(u + adjust), lambda w: _argmax_split(np.asarray(w, dtype=np.float64) + adjust))


def _pairs(u: cp.Expression, n_pos: int, helper: str) -> int:
    n = _vector(u, helper)
    if isinstance(n_pos, bool) or not isinstance(n_pos, (int, np.integer)) or not 1 <= n_pos <= n or n % n_pos:
        raise ModelError(
            f"{helper} n_pos must be an int dividing n = {n} (u holds n_pos x n_neg pairwise losses, "
            f"row by row), got {n_pos!r}"
        )
    return n // int(n_pos)


def _rate(theta: Any, name: str, helper: str) -> float:
    theta = _number(theta, name, helper)
    if not 0 < theta <= 1:
        raise ModelError(f"{helper} {name} must lie in (0, 1] (the fraction of the tail kept), got {theta}")
    return theta


def tpauc_cvar(u: cp.Expression, n_pos: int, theta_0: float = 0.5, theta_1: float = 0.5) -> cp.Expression:
    """The two-way partial AUC risk in its CVaR form, LibAUC's ``tpAUC_CVaR_loss`` (Zhou et al., 2025).

    u holds the pairwise surrogate losses L_ij = l(h(x_j) - h(x_i)) of positive i and negative j, flattened
    row by row: ``u[i * n_neg + j]``, with n_neg = n / n_pos.  LibAUC minimizes over thresholds s_i, s'

        s' + 1/(theta_0 n_pos) sum_i [ g_i - s' ]_+,   g_i = s_i + 1/(theta_1 n_neg) sum_j [ L_ij - s_i ]_+,

    and the minimum over the thresholds is a CVaR of CVaRs:

        F(u) = CVaR_{theta_0}( (CVaR_{theta_1}(L_i1, ..., L_i n_neg))_{i = 1..n_pos} ),

    the mean, over the hardest theta_0 fraction of the positives, of each positive's mean loss over its
    hardest theta_1 fraction of the negatives.  theta_0 (for the true-positive rate) and theta_1 (for the
    false-positive rate) lie in (0, 1]; theta_0 = theta_1 = 1 is the mean pairwise loss (the AUC risk).
    Weights: q_ij = p_i r_ij, with p the CVaR_{theta_0} weights of the row values g and r_i the
    CVaR_{theta_1} weights of row i (see :func:`cvar`); q.u is the value.
    """
    n_neg = _pairs(u, n_pos, "tpauc_cvar")
    theta_0 = _rate(theta_0, "theta_0", "tpauc_cvar")
    theta_1 = _rate(theta_1, "theta_1", "tpauc_cvar")
    rows = [cvar(u[i * n_neg : (i + 1) * n_neg], theta_1) for i in range(int(n_pos))]
    outer = cvar(cp.hstack(rows), theta_0)
    m_pos, m_neg = max(theta_0 * n_pos, 1.0), max(theta_1 * n_neg, 1.0)

    def weights(w: np.ndarray) -> np.ndarray:
        L = np.asarray(w, dtype=np.float64).reshape(int(n_pos), n_neg)
        r = np.stack([capped_weights(row, m_neg) for row in L])
        p = capped_weights(np.sum(r * L, axis=1), m_pos)
        return (p[:, None] * r).reshape(-1)

    return _named(outer, weights)


def tpauc_kl(u: cp.Expression, n_pos: int, lam: float = 1.0, tau: float = 1.0) -> cp.Expression:
    """The two-way partial AUC risk in its KL form, LibAUC's ``tpAUC_KL_Loss`` (SOTAs; Zhu et al., 2022).

    u holds the pairwise surrogate losses L_ij of positive i and negative j, flattened row by row:
    ``u[i * n_neg + j]``, with n_neg = n / n_pos.  LibAUC's objective (its ``Lambda`` is lam, its ``tau`` tau)

        F(u) = tau log mean_i ( mean_j exp(L_ij / lam) )^(lam / tau)
             = entropic_tau( (entropic_lam(L_i1, ..., L_i n_neg))_{i = 1..n_pos} ),

    the entropic risk at temperature tau, over positives, of each positive's entropic risk at temperature
    lam over negatives (lam: KL regularization of the negatives, tau: of the positives; both > 0).
    Sup form: max over p in the simplex and r_i in the simplex of
    sum_i p_i (r_i.L_i - lam KL(r_i || 1/n_neg)) - tau KL(p || 1/n_pos).
    Weights: q_ij = p_i r_ij with r_i = softmax(L_i / lam) and p = softmax(h / tau), h_i the row risks;
    LibAUC's per-pair weights divided by n_pos n_neg.
    """
    n_neg = _pairs(u, n_pos, "tpauc_kl")
    lam = _temperature(lam, "lam", "tpauc_kl")
    tau = _temperature(tau, "tau", "tpauc_kl")
    n_pos = int(n_pos)
    L = cp.reshape(u, (n_pos, n_neg), order="C")
    rows = lam * cp.log_sum_exp(L / lam, axis=1) - lam * math.log(n_neg)
    outer = tau * cp.log_sum_exp(rows / tau) - tau * math.log(n_pos)

    def weights(w: np.ndarray) -> np.ndarray:
        Lw = np.asarray(w, dtype=np.float64).reshape(n_pos, n_neg)
        r = softmax(Lw / lam, axis=1)
        h = lam * (logsumexp(Lw / lam, axis=1) - math.log(n_neg))
        return (softmax(h / tau)[:, None] * r).reshape(-1)

    return _named(outer, weights)


# ---- weights at a point ------------------------------------------------------------------------------


def risk_weights(outer: Any, u_value: Any) -> np.ndarray:
    """The adversary's weights q at ``u_value``: the maximizer of the risk's sup form, a subgradient of F.

    ``outer`` is an outer function (a CVXPY expression in ``fc.inner_value(n)``), a
    :class:`~fullcomp.model.composite.Outer` or a :class:`~fullcomp.CompositeProblem`.  For the named
    risks of this module (``fc.cvar``, ``fc.chi2_dro``, ``fc.top_k_mean``, ``fc.entropic_risk``,
    ``fc.kl_dro``, ``fc.smooth_max``, ``fc.group_dro``, ``fc.tpauc_cvar``, ``fc.tpauc_kl``) q is computed
    in closed form (their docstrings give it); for any other F of the placeholder alone it is read off
    CVXPY's dual of ``u == u_value`` in ``min F(u)`` (a subgradient; for a sup-form risk, weights on the
    simplex), which costs one conic solve.  An expression built from a named risk (``2 * fc.cvar(u, a)``)
    is "any other F".
    """
    from fullcomp import solvers
    from fullcomp.model.composite import CompositeProblem, Outer, free_variables

    expr = outer.outer if isinstance(outer, CompositeProblem) else outer
    expr = expr.expr if isinstance(expr, Outer) else expr
    if not isinstance(expr, cp.Expression):
        raise ModelError(
            f"risk_weights needs an outer function (a CVXPY expression in fc.inner_value(n)), an Outer or a "
            f"CompositeProblem, got {type(outer).__name__}"
        )
    variables = free_variables(expr)
    holders = [v for v in variables if is_placeholder(v)]
    if len(holders) != 1 or len(variables) != 1:
        raise ModelError(
            "risk_weights needs an outer function of one fc.inner_value placeholder alone "
            "(no other variables, no domain variable)"
        )
    n = holders[0].shape[0]
    value = np.asarray(u_value.detach().cpu() if hasattr(u_value, "detach") else u_value, dtype=np.float64)
    value = value.reshape(-1)
    if value.shape != (n,) or not np.all(np.isfinite(value)):
        raise ModelError(f"risk_weights u_value must be a finite vector of length {n}, got shape {value.shape}")
    closed = getattr(expr, WEIGHTS, None)
    if closed is not None:
        return closed(value)
    link = holders[0] == value
    solvers.solve(cp.Problem(cp.Minimize(expr), [link]), "risk_weights' subgradient program")
    return -np.asarray(link.dual_value, dtype=np.float64).reshape(-1)
