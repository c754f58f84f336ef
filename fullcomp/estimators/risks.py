"""The risk of a robust estimator: its name and size (``risk=``, ``alpha=``), resolved to a CVXPY outer function.

A named risk of the per-sample losses u (one entry per training row) is one of fullcomp's named risks, which
declare their value and weights in closed form ("tv" is fc.tv_dro; with sample weights it is built here from
two weighted CVaRs).  Sample weights p (the normalized ``sample_weight``)
turn a risk of the empirical distribution into the same risk of the weighted one:
every named risk here is a worst expectation over distributions q near the data's, and with weights "near"
is measured from p instead of the uniform 1/n.  For integer weights this is the risk of the data set with
row i repeated ``sample_weight[i]`` times (the repeated rows get equal weights at the optimum).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import cvxpy as cp
import numpy as np
from cvxpy.transforms.partial_optimize import partial_optimize

from fullcomp.errors import OptionError
from fullcomp.model.calculus import risk, risk_weights
from fullcomp.model.outer import chi2_dro, cvar, entropic_risk, group_dro, kl_dro, tv_dro

#: name -> (default size, what the size is, the test it must pass, the words of that test).
SIZES: dict[str, tuple[float | None, str, Callable[[float], bool], str]] = {
    "cvar": (0.5, "the CVaR level (the fraction of the worst samples averaged)", lambda a: 0 < a <= 1, "in (0, 1]"),
    "chi2": (1.0, "the chi-square radius eps (kappa = eps / 2 of fc.chi2_dro)", lambda a: a >= 0, ">= 0"),
    "kl": (0.5, "the KL radius rho of fc.kl_dro", lambda a: a >= 0, ">= 0"),
    "tv": (0.1, "the total-variation radius eps (the mass the adversary moves)", lambda a: 0 <= a < 1, "in [0, 1)"),
    "entropic": (1.0, "the temperature lam of fc.entropic_risk", lambda a: a > 0, "> 0"),
    "wasserstein": (0.1, "the Wasserstein-1 radius on the features (l2 transport cost)", lambda a: a >= 0, ">= 0"),
    "group": (0.0, "Group DRO's C of fc.group_dro (C / sqrt(n_g) added to group g's loss)", lambda a: a >= 0, ">= 0"),
    "max": (None, "none: the worst sample's loss", lambda a: False, "None"),
    "mean": (None, "none: the mean loss (empirical risk minimization)", lambda a: False, "None"),
}
#: The named risks that take sample weights (see the module's docstring).
WEIGHTED = ("mean", "cvar", "chi2", "tv", "wasserstein", "group")


def size(name: str, alpha: float | None) -> float | None:
    """The risk's size: ``alpha`` checked against the risk's range, or the risk's default when None."""
    default, meaning, test, words = SIZES[name]
    if alpha is None:
        return default
    if default is None or not test(float(alpha)):
        raise OptionError(f"alpha={alpha!r} for risk={name!r} must be {words}: alpha is {meaning}")
    return float(alpha)


def outer(name: str | Callable, alpha: float | None, u: cp.Variable, p: np.ndarray | None) -> cp.Expression:
    """F(u) of the per-sample (or, for "group", per-group) losses u; ``p`` the normalized sample weights, None
    for the uniform ones.  "wasserstein" gives the mean here: its radius is a norm of the model (see
    :func:`fullcomp.estimators.linear`)."""
    n = u.shape[0]
    if callable(name):
        return _custom(name, alpha, u, p)
    if p is not None and name not in WEIGHTED:
        raise OptionError(
            f"sample_weight is not supported with risk={name!r}; the risks that take it are {list(WEIGHTED)} "
            "(fit without sample_weight, or pick one of them)"
        )
    a = size(name, alpha)
    if name == "cvar":
        return cvar(u, a) if p is None else weighted_cvar(u, a, p)
    if name == "chi2":
        return chi2_dro(u, a / 2) if p is None else weighted_chi2(u, a / 2, p)
    if name == "kl":
        return kl_dro(u, a)
    if name == "entropic":
        return entropic_risk(u, a)
    if name == "tv":
        return total_variation(u, a, p)
    if name == "max":
        return cvar(u, 1.0 / n)
    return cvar(u, 1.0) if p is None else weighted_cvar(u, 1.0, p)  # "mean", "wasserstein", "group"'s sizes


def group_outer(u: cp.Variable, sizes: np.ndarray, alpha: float | None) -> cp.Expression:
    """Group DRO's F of the per-group mean losses u, ``sizes`` the groups' (weighted) sample counts."""
    return group_dro(u, sizes, size("group", alpha))


def _custom(build: Callable, alpha: float | None, u: cp.Variable, p: np.ndarray | None) -> cp.Expression:
    if alpha is not None:
        raise OptionError(f"alpha={alpha!r} is for a named risk; a callable risk carries its own size (alpha=None)")
    if p is not None:
        raise OptionError(
            "sample_weight is not supported with a callable risk: fullcomp cannot reweight a risk it did not "
            f"build; use one of the named risks {list(WEIGHTED)}"
        )
    expr = build(u)
    if not isinstance(expr, cp.Expression) or expr.size != 1:
        raise OptionError(
            "a callable risk must return a scalar CVXPY expression of the placeholder it is given, e.g. "
            f"risk=lambda u: fc.cvar(u, 0.2); got {type(expr).__name__}"
        )
    return expr


def total_variation(u: cp.Variable, eps: float, p: np.ndarray | None) -> cp.Expression:
    """max { q.u : q in the simplex, TV(q, p) <= eps }: the adversary moves mass eps from the smallest losses to
    the largest, so it is eps max(u) + (1 - eps) CVaR_{1 - eps}(u) (of the p-weighted distribution)."""
    n = u.shape[0]
    if p is None:
        return tv_dro(u, eps)
    if eps == 0:
        return weighted_cvar(u, 1.0, p)
    top = cvar(u, 1.0 / n)
    tail = cvar(u, 1.0 - eps) if p is None else weighted_cvar(u, 1.0 - eps, p)

    def weights(w: np.ndarray) -> np.ndarray:
        return eps * risk_weights(top, w) + (1 - eps) * risk_weights(tail, w)

    return risk(eps * top + (1 - eps) * tail, value=lambda w: float(weights(w) @ w), weights=weights)


def weighted_cvar(u: cp.Variable, alpha: float, p: np.ndarray) -> cp.Expression:
    """max { q.u : q in the simplex, q <= p / alpha } = min_t t + p.(u - t)_+ / alpha, the CVaR of the
    distribution p; weights fill p / alpha on the largest losses in turn."""
    t = cp.Variable(name="cvar_threshold")
    expr = partial_optimize(cp.Problem(cp.Minimize(t + p @ cp.pos(u - t) / alpha)), opt_vars=[t], dont_opt_vars=[u])

    def weights(w: np.ndarray) -> np.ndarray:
        q, left = np.zeros(w.size), 1.0
        for i in np.argsort(-np.asarray(w), kind="stable"):
            q[i] = min(p[i] / alpha, left)
            left -= q[i]
        return q

    return risk(expr, value=lambda w: float(weights(w) @ w), weights=weights)


def weighted_chi2(u: cp.Variable, kappa: float, p: np.ndarray) -> cp.Expression:
    """max { q.u : q in the simplex, (1/2) sum (q_i - p_i)^2 / p_i <= kappa }, the chi-square ball around p,
    through its dual min over (eta, mu >= 0) of p.(u + mu) + sqrt(2 kappa) ||sqrt(p) (u + mu - eta)||_2."""
    n = u.shape[0]
    eta, mu = cp.Variable(name="chi2_shift"), cp.Variable(n, nonneg=True, name="chi2_floor")
    radius = math.sqrt(2.0 * kappa)
    dual = p @ (u + mu) + radius * cp.norm(cp.multiply(np.sqrt(p), u + mu - eta), 2)
    expr = partial_optimize(cp.Problem(cp.Minimize(dual)), opt_vars=[eta, mu], dont_opt_vars=[u])

    def weights(w: np.ndarray) -> np.ndarray:
        return chi2_ball_weights(np.asarray(w, dtype=np.float64), kappa, p)

    return risk(expr, value=lambda w: float(weights(w) @ w), weights=weights)


def chi2_ball_weights(w: np.ndarray, kappa: float, p: np.ndarray) -> np.ndarray:
    """The maximizer of q.w over the chi-square ball around p: q_i = p_i (a + b w_i)_+ (the KKT form), with b
    the slope at which the divergence is kappa and a the level at which q sums to 1 (both by bisection)."""
    support = p > 0
    top = support & (w == w[support].max())
    corner = np.where(top, p, 0.0) / p[top].sum()
    if kappa == 0 or np.all(w[support] == w[support].max()):
        return p.copy() if kappa == 0 else corner
    if _divergence(corner, p) <= kappa:
        return corner
    lo, hi = 0.0, 1.0
    while _divergence(_tilt(w, p, hi), p) < kappa:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _divergence(_tilt(w, p, mid), p) < kappa else (lo, mid)
    return _tilt(w, p, lo)


def _tilt(w: np.ndarray, p: np.ndarray, b: float) -> np.ndarray:
    """p_i (a + b w_i)_+ with a such that it sums to 1 (the sum grows with a)."""
    lo, hi = -b * w.max(), 1.0 - b * w.min() + 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(p @ np.maximum(mid + b * w, 0.0)) < 1.0 else (lo, mid)
    q = p * np.maximum(hi + b * w, 0.0)
    return q / q.sum()


def _divergence(q: np.ndarray, p: np.ndarray) -> float:
    keep = p > 0
    return 0.5 * float(np.sum((q[keep] - p[keep]) ** 2 / p[keep]))
