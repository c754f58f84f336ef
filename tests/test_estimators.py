"""The robust linear estimators of fullcomp.estimators: scikit-learn's estimator checks, the tools that compose
estimators (clone, Pipeline, GridSearchCV), and the fitted robust objective against CVXPY's optimum of the same
deterministic problem."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import fullcomp as fc
from fullcomp.estimators import RobustLinearRegression, RobustLinearSVC, RobustLogisticRegression

torch.set_num_threads(1)


def _data(n: int = 200, d: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two classes from a logistic-like model with some noise: the robust optimum is not the zero model."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (X @ (2.0 * rng.standard_normal(d)) + 0.5 * rng.standard_normal(n) > 0).astype(int)
    return X, y


# ---- scikit-learn's estimator checks ---------------------------------------------------------------------------

_CHECKED = [
    RobustLogisticRegression(max_iter=10),
    RobustLinearSVC(max_iter=10),
    RobustLinearRegression(max_iter=10),
]


def _expected_failures(estimator) -> dict[str, str]:
    return {
        "check_sample_weight_equivalence_on_dense_data": (
            "a first-order method stopped after max_iter steps: the weighted data and the repeated rows define "
            "the same problem (test_sample_weight_is_row_repetition checks it) but take different iterates"
        )
    }


@parametrize_with_checks(_CHECKED, expected_failed_checks=_expected_failures)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# ---- composing estimators --------------------------------------------------------------------------------------


def test_grid_search_over_the_radius_in_a_pipeline_and_clone():
    X, y = _data(120)
    pipe = Pipeline([("scale", StandardScaler()), ("clf", RobustLogisticRegression(risk="cvar", max_iter=20))])
    search = GridSearchCV(pipe, {"clf__alpha": [0.2, 0.8]}, cv=2).fit(X, y)
    assert search.best_params_["clf__alpha"] in (0.2, 0.8)
    assert search.score(X, y) > 0.8
    twin = clone(search.best_estimator_)
    assert twin.get_params()["clf__alpha"] == search.best_params_["clf__alpha"]
    assert not hasattr(twin.named_steps["clf"], "coef_")


# ---- the fit against CVXPY -------------------------------------------------------------------------------------


def _tv_reference(ell: cp.Variable, eps: float) -> tuple[cp.Expression, list]:
    """max { q.u : q in the simplex, (1/2) ||q - 1/n||_1 <= eps } through its LP dual:
    min over c, lam >= 0 of c + mean((u - c)_+) + 2 eps lam subject to u <= c + 2 lam."""
    c, lam = cp.Variable(), cp.Variable(nonneg=True)
    return c + cp.sum(cp.pos(ell - c)) / ell.shape[0] + 2 * eps * lam, [ell <= c + 2 * lam]


REFERENCES = {
    "cvar": (0.3, lambda ell, a: (fc.cvar(ell, a), [])),
    "chi2": (1.0, lambda ell, a: (fc.chi2_dro(ell, a / 2), [])),
    "kl": (0.3, lambda ell, a: (fc.kl_dro(ell, a), [])),
    "tv": (0.2, _tv_reference),
    "entropic": (1.0, lambda ell, a: (fc.entropic_risk(ell, a), [])),
}


@pytest.mark.parametrize("risk", list(REFERENCES))
def test_robust_objective_is_cvxpys_optimum(risk):
    X, y = _data()
    alpha, build = REFERENCES[risk]
    model = RobustLogisticRegression(risk, alpha, max_iter=150, random_state=0).fit(X, y)
    n, d = X.shape
    w, b, ell = cp.Variable(d), cp.Variable(), cp.Variable(n)
    # ell >= the logistic losses: every risk here is nondecreasing in each loss, so the epigraph is tight.
    F, constraints = build(ell, alpha)
    margins = cp.multiply(np.where(y == 1, 1.0, -1.0), X @ w + b)
    constraints += [ell >= cp.logistic(-margins), cp.norm(w, 2) <= model.radius_, cp.abs(b) <= model.intercept_bound_]
    optimum = cp.Problem(cp.Minimize(F), constraints).solve(solver=cp.CLARABEL)
    assert abs(model.robust_objective_ - optimum) <= 1e-3 * abs(optimum)
    losses = np.logaddexp(0.0, -np.where(y == 1, 1.0, -1.0) * model.decision_function(X))
    q = model.worst_case_weights_
    assert q.shape == (n,) and abs(q.sum() - 1) < 1e-9 and q.min() >= 0
    attained = q @ losses
    if risk == "entropic":  # a penalized sup: q.u less lam KL(q || 1/n) is the value
        attained -= alpha * np.sum(q * np.log(np.maximum(q * n, 1e-300)))
    assert abs(attained - model.robust_objective_) <= 1e-6
