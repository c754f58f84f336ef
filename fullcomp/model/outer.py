"""Outer functions that CVXPY has no single atom for: named risks of the placeholder u.

Each helper returns a DCP CVXPY expression in ``u = fc.inner_value(n)`` (so every GLMO route applies),
declared through :func:`fullcomp.model.calculus.risk` with its value and the adversary's weights q in
closed form (:func:`~fullcomp.model.calculus.risk_weights` returns them) when its argument is the placeholder
itself.  Every risk here is the support
function of a set of weights on the simplex, or such a supremum less a penalty:

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
from scipy.special import logsumexp, softmax

from fullcomp.errors import ModelError
from fullcomp.model.calculus import (
    argmax_weights,
    capped_weights,
    chi2_weights,
    kl_weights,
    log_mean_exp,
    risk,
    softmax_weights,
)
from fullcomp.model.placeholder import is_placeholder


def _vector(u: cp.Expression, name: str) -> int:
    if not isinstance(u, cp.Expression) or u.ndim != 1:
        raise ModelError(f"{name} needs a 1-D CVXPY expression such as fc.inner_value(n), got {u!r}")
    return u.shape[0]


def _declared(u: cp.Expression, expr: cp.Expression, *, named: tuple[str, dict], **closed: Callable) -> cp.Expression:
    """``expr`` declaring its closed forms, which are functions of the placeholder's value, and its name and
    parameters: so only where the risk's argument is the placeholder itself (of ``u[:3]`` or ``u - c``,
    ``expr`` is any other F)."""
    if isinstance(u, cp.Variable) and is_placeholder(u):
        return risk(expr, named=named, **closed)
    return expr


def _attained(weights: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], float]:
    """The value q(u).u of a risk whose sup form has no penalty: its maximizing weights attain it."""
    return lambda w: float(weights(w) @ w)


def _mean(w: np.ndarray) -> np.ndarray:
    return np.full(w.size, 1.0 / w.size)


def _number(value: Any, name: str, helper: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ModelError(f"{helper} {name} must be a number, got {value!r}") from None
    if not math.isfinite(value):
        raise ModelError(f"{helper} {name} must be finite, got {value}")
    return value


#: The smallest temperature a risk takes: below it (subnormal numbers included) u / lam overflows float64 for
#: losses of ordinary size, in CVXPY's expression and in any solver, and the risk is the max to rounding.
MIN_TEMPERATURE = 1e-150


def _temperature(lam: Any, name: str, helper: str) -> float:
    lam = _number(lam, name, helper)
    if not lam > 0:
        raise ModelError(
            f"{helper} {name} must be a temperature > 0, got {lam}; a small {name} approaches the max, "
            f"use cp.max(u) for {name} = 0"
        )
    if lam < MIN_TEMPERATURE:
        raise ModelError(
            f"{helper} {name} must be at least {MIN_TEMPERATURE:g} (below it u / {name} overflows float64), got "
            f"{lam!r}; at such a temperature the risk is the max to rounding: use cp.max(u)"
        )
    return lam


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
        return _declared(
            u,
            cp.max(u),
            named=("cvar", {"alpha": alpha}),
            value=lambda w: float(np.max(w)),
            weights=lambda w: capped_weights(w, 1.0),
        )
    k = int(math.floor(m))
    frac = m - k
    tail = _sum_largest(u, k, n)
    if frac > 0:
        # S_k + frac * u_(k+1), written with integer sum_largest (CVXPY's canonicalization needs int k).
        tail = (1 - frac) * tail + frac * _sum_largest(u, k + 1, n)
    return _declared(
        u,
        tail / m,
        named=("cvar", {"alpha": alpha}),
        value=_attained(lambda w: capped_weights(w, m)),
        weights=lambda w: capped_weights(w, m),
    )


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

    def weights(w: np.ndarray) -> np.ndarray:
        return capped_weights(w, float(k))

    return _declared(
        u, _sum_largest(u, k, n) / k, named=("top_k_mean", {"k": k}), value=_attained(weights), weights=weights
    )


def tv_dro(u: cp.Expression, eps: float) -> cp.Expression:
    """The worst expectation over weights within total variation eps of uniform:

        max { q.u : q in the simplex, (1/2) ||q - 1/n||_1 <= eps } = (1 - eps) CVaR_{1-eps}(u) + eps max(u),

    the adversary moving mass eps from the smallest entries onto the largest.  eps lies in [0, 1]; ``eps = 0``
    is the mean, ``eps = 1`` the max.  Weights: (1 - eps) times CVaR_{1-eps}'s weights (1/n on the entries of
    the upper (1 - eps)-tail, see :func:`cvar`) plus eps on the largest entries (split evenly over ties);
    q.u is the value.
    """
    n = _vector(u, "tv_dro")
    eps = _number(eps, "eps", "tv_dro")
    if not 0 <= eps <= 1:
        raise ModelError(f"tv_dro eps must lie in [0, 1] (the mass the adversary moves), got {eps}; 0 is the mean")
    m = (1 - eps) * n
    if m < 1:  # less than one entry in the (1 - eps)-tail: its CVaR is the max, and so is the risk
        tail, m = cp.max(u), 1.0
    else:
        tail = (1 - eps) * cvar(u, 1 - eps) + eps * cp.max(u)

    def weights(w: np.ndarray) -> np.ndarray:
        w = np.asarray(w, dtype=np.float64)
        return (1 - eps) * capped_weights(w, m) + eps * argmax_weights(w)

    return _declared(u, tail, named=("tv_dro", {"eps": eps}), value=_attained(weights), weights=weights)


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
        return _declared(
            u, cp.sum(u) / n, named=("chi2_dro", {"kappa": kappa}), value=lambda w: float(np.mean(w)), weights=_mean
        )
    v = cp.Variable(n, name="chi2_dual")
    radius = math.sqrt(2.0 * kappa / n)
    inner = cp.Problem(cp.Minimize(cp.max(u - v) + cp.sum(v) / n + radius * cp.norm(v, 2)))
    expr = partial_optimize(inner, opt_vars=[v], dont_opt_vars=list(u.variables()))

    def weights(w: np.ndarray) -> np.ndarray:
        return chi2_weights(w, kappa)

    return _declared(u, expr, named=("chi2_dro", {"kappa": kappa}), value=_attained(weights), weights=weights)


def entropic_risk(u: cp.Expression, lam: float) -> cp.Expression:
    """The entropic risk (KL-penalized DRO) at temperature lam > 0:

        lam * log( mean(exp(u / lam)) ) = lam * (log_sum_exp(u / lam) - log n)
                                        = max { q.u - lam KL(q || 1/n) : q in the simplex }.

    It lies between mean(u) and max(u): lam -> inf gives the mean, lam -> 0 the max.
    Weights: softmax(u / lam); at them q.u - lam KL(q || 1/n) is the risk's value.
    """
    n = _vector(u, "entropic_risk")
    lam = _temperature(lam, "lam", "entropic_risk")
    return _declared(
        u,
        lam * cp.log_sum_exp(u / lam) - lam * math.log(n),
        named=("entropic_risk", {"lam": lam}),
        value=lambda w: log_mean_exp(w, lam),
        weights=lambda w: softmax_weights(w, lam),
    )


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
        return _declared(
            u, cp.sum(u) / n, named=("kl_dro", {"rho": rho}), value=lambda w: float(np.mean(w)), weights=_mean
        )
    lam = cp.Variable(nonneg=True, name="kl_temperature")
    s = cp.Variable(name="kl_shift")
    z = cp.Variable(n, name="kl_cone")
    cones = [cp.constraints.ExpCone(u - s, lam * np.ones(n), z), cp.sum(z) <= n * lam]
    inner = cp.Problem(cp.Minimize(rho * lam + s), cones)
    expr = partial_optimize(inner, opt_vars=[lam, s, z], dont_opt_vars=list(u.variables()))

    def weights(w: np.ndarray) -> np.ndarray:
        return kl_weights(w, rho)

    return _declared(u, expr, named=("kl_dro", {"rho": rho}), value=_attained(weights), weights=weights)


def smooth_max(u: cp.Expression, lam: float) -> cp.Expression:
    """The log-sum-exp smoothing of the max at temperature lam > 0:

        lam * log( sum(exp(u / lam)) ) = max { q.u + lam H(q) : q in the simplex },  H(q) = -sum q log q,

    so max(u) <= smooth_max(u, lam) <= max(u) + lam log n (it upper-bounds the max by at most lam log n;
    ``entropic_risk(u, lam)`` is this less lam log n).
    Weights: softmax(u / lam); at them q.u + lam H(q) is the value.
    """
    _vector(u, "smooth_max")
    lam = _temperature(lam, "lam", "smooth_max")
    return _declared(
        u,
        lam * cp.log_sum_exp(u / lam),
        named=("smooth_max", {"lam": lam}),
        value=lambda w: log_mean_exp(w, lam) + lam * math.log(w.size),
        weights=lambda w: softmax_weights(w, lam),
    )


def group_dro(u: cp.Expression, group_sizes: Sequence[float], C: float) -> cp.Expression:
    """The group-adjusted worst case of Group DRO (Sagawa et al., 2020), u_g the loss of group g:

        max_g ( u_g + C / sqrt(n_g) ) = max { q.(u + C / sqrt(n)) : q in the simplex },

    with ``group_sizes`` the n_g > 0 (one per entry of u) and C >= 0; ``C = 0`` is the max.
    Weights: uniform on the groups that attain the max of u_g + C / sqrt(n_g) (the argmax vertex when
    it is unique); q.(u + C / sqrt(n)) is the value.
    """
    n = _vector(u, "group_dro")
    try:
        sizes = np.asarray(group_sizes, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ModelError(
            f"group_dro group_sizes must be numbers, one sample count n_g > 0 per entry of u ({n}), got {group_sizes!r}"
        ) from None
    if sizes.shape != (n,):
        raise ModelError(f"group_dro group_sizes needs one size per entry of u ({n}), got {sizes.size}")
    if not (np.all(np.isfinite(sizes)) and np.all(sizes > 0)):
        raise ModelError(f"group_dro group_sizes must be finite and > 0 (samples per group), got {sizes}")
    C = _number(C, "C", "group_dro")
    if not C >= 0:
        raise ModelError(f"group_dro C must be >= 0 (the weight of the 1/sqrt(n_g) adjustment), got {C}")
    adjust = C / np.sqrt(sizes)
    return _declared(
        u,
        cp.max(u + adjust),
        named=("group_dro", {"group_sizes": sizes, "C": C}),
        value=lambda w: float(np.max(w + adjust)),
        weights=lambda w: argmax_weights(np.asarray(w, dtype=np.float64) + adjust),
    )


def wasserstein_dro(
    u: cp.Expression,
    eps: float,
    weights: cp.Expression,
    *,
    norm: float = 2,
    lipschitz: float = 1.0,
    label_cost: float | None = None,
) -> cp.Expression:
    """The worst expected loss of a linear model over distributions within Wasserstein distance eps of the
    samples' (type-1, transport cost ||x - x'|| + label_cost 1[y != y']), for a loss l(y w.x) Lipschitz in the
    margin with constant ``lipschitz`` (logistic and hinge: 1).  Its closed-form dual (Shafieezadeh-Abadeh,
    Kuhn and Mohajerin Esfahani, 2015; the one the ``dro`` and skwdro libraries use):

    * ``label_cost=None`` (labels never move): u holds the n losses l(y_i w.x_i) and

          F(u, w) = mean(u) + eps * lipschitz * ||w||_*;

    * a finite label cost kappa: u holds 2n losses, the n at the labels y_i and then the n at -y_i, and

          F(u, w) = min_{lam >= lipschitz ||w||_*} lam eps + mean_i max(u_i, u_{n+i} - lam kappa).

    ``||.||_*`` is the dual norm of the features' cost ``norm`` (p = 1, 2 or inf, or any p >= 1: the dual of
    ||.||_p is ||.||_{p/(p-1)}).  ``weights`` is the CVXPY expression of w, the model's weights: the domain's
    variable (``domain.variable``) or an expression of it (a slice, without the bias).  F reads x, so the
    GLMO's conic route solves with it; the second form is a partial minimization over lam, which CVXPY
    evaluates (``F.value``) by a small solve.
    """
    n = _vector(u, "wasserstein_dro")
    eps = _number(eps, "eps", "wasserstein_dro")
    if not eps >= 0:
        raise ModelError(f"wasserstein_dro eps must be a radius >= 0, got {eps}; 0 is the mean loss")
    if not isinstance(weights, cp.Expression) or weights.size < 1:
        raise ModelError(
            f"wasserstein_dro weights must be the CVXPY expression of the model's weights, e.g. domain.variable "
            f"or domain.variable[:-1] (without the bias), got {weights!r}"
        )
    infinite = isinstance(norm, (int, float, np.number)) and norm == math.inf
    p = math.inf if infinite else _number(norm, "norm", "wasserstein_dro")
    if not p >= 1:
        raise ModelError(f"wasserstein_dro norm must be p >= 1 (or float('inf')): the features' cost ||.||_p, got {p}")
    dual = math.inf if p == 1 else (1.0 if p == math.inf else p / (p - 1))
    lip = _number(lipschitz, "lipschitz", "wasserstein_dro")
    if not lip > 0:
        raise ModelError(
            f"wasserstein_dro lipschitz must be > 0 (the loss's Lipschitz constant in the margin), got {lip}"
        )
    slope = lip * cp.norm(cp.vec(weights, order="C"), dual)
    if label_cost is None:
        return cp.sum(u) / n + eps * slope
    kappa = _number(label_cost, "label_cost", "wasserstein_dro")
    if not kappa > 0:
        raise ModelError(f"wasserstein_dro label_cost must be > 0 (None: labels never move), got {kappa}")
    if n % 2:
        raise ModelError(
            f"wasserstein_dro with a label_cost needs u of 2n losses (the n at y, then the n at -y), got {n}"
        )
    lam = cp.Variable(nonneg=True, name="wasserstein_multiplier")
    at_y, flipped = u[: n // 2], u[n // 2 :]
    objective = lam * eps + cp.sum(cp.maximum(at_y, flipped - kappa * lam)) / (n // 2)
    inner = cp.Problem(cp.Minimize(objective), [lam >= slope])
    return partial_optimize(inner, opt_vars=[lam], dont_opt_vars=[v for v in inner.variables() if v is not lam])


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

    return _declared(
        u,
        outer,
        named=("tpauc_cvar", {"n_pos": n_pos, "theta_0": theta_0, "theta_1": theta_1}),
        value=_attained(weights),
        weights=weights,
    )


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

    def row_risks(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Lw = np.asarray(w, dtype=np.float64).reshape(n_pos, n_neg)
        return Lw, lam * (logsumexp(Lw / lam, axis=1) - math.log(n_neg))

    def value(w: np.ndarray) -> float:
        h = row_risks(w)[1]
        return float(tau * (logsumexp(h / tau) - math.log(n_pos)))

    def weights(w: np.ndarray) -> np.ndarray:
        Lw, h = row_risks(w)
        return (softmax(h / tau)[:, None] * softmax(Lw / lam, axis=1)).reshape(-1)

    return _declared(
        u, outer, named=("tpauc_kl", {"n_pos": n_pos, "lam": lam, "tau": tau}), value=value, weights=weights
    )
