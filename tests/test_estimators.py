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
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

import fullcomp as fc
from fullcomp.errors import OptionError
from fullcomp.estimators import RobustLinearRegression, RobustLinearSVC, RobustLogisticRegression, risks

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


#: risk -> (alpha, CVXPY's risk of the loss epigraph, iterations: each within 1e-3 of the optimum, tv the dearest)
REFERENCES = {
    "cvar": (0.3, lambda ell, a: (fc.cvar(ell, a), []), 150),
    "chi2": (1.0, lambda ell, a: (fc.chi2_dro(ell, a / 2), []), 150),
    "kl": (0.3, lambda ell, a: (fc.kl_dro(ell, a), []), 150),
    "tv": (0.2, _tv_reference, 80),
    "entropic": (1.0, lambda ell, a: (fc.entropic_risk(ell, a), []), 150),
}


@pytest.mark.parametrize("risk", list(REFERENCES))
def test_robust_objective_is_cvxpys_optimum(risk):
    X, y = _data()
    alpha, build, iters = REFERENCES[risk]
    model = RobustLogisticRegression(risk, alpha, max_iter=iters, random_state=0).fit(X, y)
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


def _fit_reference(F: cp.Expression, constraints: list, w: cp.Variable, b: cp.Variable, model) -> float:
    constraints += [cp.norm(w, 2) <= model.radius_, cp.abs(b) <= model.intercept_bound_]
    return cp.Problem(cp.Minimize(F), constraints).solve(solver=cp.CLARABEL)


def test_group_risk_and_its_weights_against_cvxpy():
    X, y = _data()
    groups = np.where(X[:, 0] > 0.5, "a", "b")
    model = RobustLogisticRegression("group", 1.0, max_iter=600, random_state=0).fit(X, y, groups=groups)
    w, b = cp.Variable(X.shape[1]), cp.Variable()
    losses = cp.logistic(-cp.multiply(np.where(y == 1, 1.0, -1.0), X @ w + b))
    worst = [cp.sum(losses[groups == g]) / np.sum(groups == g) + 1.0 / np.sqrt(np.sum(groups == g)) for g in "ab"]
    optimum = _fit_reference(cp.max(cp.hstack(worst)), [], w, b, model)
    assert abs(model.robust_objective_ - optimum) <= 1e-3 * abs(optimum)
    q = model.worst_case_weights_
    assert abs(q.sum() - 1) < 1e-9 and q.min() >= 0
    for g in "ab":  # a group's weight is shared evenly by its rows, as its mean loss shares the group's loss
        assert np.ptp(q[groups == g]) < 1e-12


def test_wasserstein_is_the_mean_loss_plus_a_norm_against_cvxpy():
    X, y = _data()
    model = RobustLogisticRegression("wasserstein", 0.05, max_iter=150, random_state=0).fit(X, y)
    w, b = cp.Variable(X.shape[1]), cp.Variable()
    # Wasserstein-1 DRO on the features of the 1-Lipschitz logistic loss: mean loss + radius ||w||_2
    losses = cp.logistic(-cp.multiply(np.where(y == 1, 1.0, -1.0), X @ w + b))
    optimum = _fit_reference(cp.sum(losses) / X.shape[0] + 0.05 * cp.norm(w, 2), [], w, b, model)
    # F reads w here: the conic GLMO route, and Frank-Wolfe's O(1/k) decrease, so a looser tolerance
    assert abs(model.robust_objective_ - optimum) <= 2e-2 * abs(optimum)
    np.testing.assert_allclose(model.worst_case_weights_, 1.0 / X.shape[0])


def test_regression_cvar_against_cvxpy_and_a_callable_risk_is_the_named_one():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((100, 4))
    y = X @ np.array([1.0, -2.0, 0.5, 0.0]) + 3.0 + 0.3 * rng.standard_normal(100)
    model = RobustLinearRegression("cvar", 0.3, C=0.2, max_iter=150, random_state=0).fit(X, y)
    w, b = cp.Variable(4), cp.Variable()
    optimum = _fit_reference(fc.cvar(cp.square(y - X @ w - b), 0.3), [], w, b, model)
    # C = 0.2: a smaller domain (the reference has the same), which Frank-Wolfe crosses in fewer steps
    assert -1e-6 <= model.robust_objective_ - optimum <= 2e-2 * abs(optimum)
    assert model.score(X, y) > 0.9
    same = RobustLinearRegression(lambda u: fc.cvar(u, 0.3), C=0.2, max_iter=150, random_state=0).fit(X, y)
    np.testing.assert_allclose(same.coef_, model.coef_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name, alpha", [("mean", None), ("cvar", 0.3), ("chi2", 1.0), ("tv", 0.2)])
def test_sample_weight_is_row_repetition(name, alpha):
    rng = np.random.default_rng(2)
    losses, counts = rng.standard_normal(7), np.array([1, 3, 0, 2, 1, 4, 2])
    weighted = risks.outer(name, alpha, fc.inner_value(7), counts / counts.sum())
    repeated_u = np.repeat(losses, counts)
    repeated = risks.outer(name, alpha, fc.inner_value(repeated_u.size), None)
    q_repeated = fc.risk_weights(repeated, repeated_u)
    q = fc.risk_weights(weighted, losses)
    assert abs(q @ losses - q_repeated @ repeated_u) < 1e-9  # the closed forms agree
    np.testing.assert_allclose(np.bincount(np.repeat(np.arange(7), counts), q_repeated, minlength=7), q, atol=1e-8)
    u = next(v for v in weighted.variables() if v.shape == (7,))
    u.value = losses
    assert abs(weighted.value - q @ losses) < 1e-6  # and so does CVXPY's value of the weighted expression


def test_bad_settings_raise_clear_errors():
    X, y = _data(40)
    with pytest.raises(OptionError, match="alpha=2.0 for risk='cvar' must be in"):
        RobustLogisticRegression("cvar", 2.0).fit(X, y)
    with pytest.raises(OptionError, match="alpha=0.3 for risk='mean'"):
        RobustLogisticRegression("mean", 0.3).fit(X, y)
    with pytest.raises(OptionError, match="sample_weight is not supported with risk='kl'"):
        RobustLogisticRegression("kl").fit(X, y, sample_weight=np.arange(40) % 3)
    with pytest.raises(OptionError, match="risk='group' needs the group of each row"):
        RobustLogisticRegression("group").fit(X, y)
    with pytest.raises(OptionError, match="groups is read by risk='group' only"):
        RobustLogisticRegression().fit(X, y, groups=y)
    with pytest.raises(OptionError, match="needs a Lipschitz loss"):
        RobustLinearRegression("wasserstein").fit(X, y.astype(float))
    with pytest.raises(OptionError, match="a callable risk carries its own size"):
        RobustLogisticRegression(lambda u: fc.cvar(u, 0.2), 0.3).fit(X, y)
    with pytest.raises(OptionError, match="must return a scalar CVXPY expression"):
        RobustLogisticRegression(lambda u: u).fit(X, y)
    with pytest.raises(InvalidParameterError, match="'C' parameter"):
        RobustLogisticRegression(C=-1.0).fit(X, y)


def test_import_fullcomp_does_not_load_scikit_learn():
    import subprocess
    import sys

    probe = "import sys, fullcomp\nprint('sklearn' in sys.modules, 'fullcomp.estimators' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_groups_and_sample_weight_reach_the_estimator_through_pipeline_and_grid_search():
    X, y = _data(120)
    groups, weights = np.where(X[:, 1] > 0, 0, 1), 1.0 + (np.arange(120) % 2)
    pipe = Pipeline([("scale", StandardScaler()), ("clf", RobustLogisticRegression(risk="group", max_iter=20))])
    search = GridSearchCV(pipe, {"clf__alpha": [0.0, 1.0]}, cv=2)
    search.fit(X, y, clf__groups=groups, clf__sample_weight=weights)  # each fold gets its rows' groups and weights
    fitted = search.best_estimator_.named_steps["clf"]
    assert fitted.worst_case_weights_.shape == (120,) and search.score(X, y) > 0.8


def _benchmark_data(n: int = 1000, d: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """benchmarks/dro_peer.py's data: Gaussian features, a random linear rule with an offset, 0.5% flipped."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d))
    y = np.sign(X @ rng.standard_normal(d) + 0.5) * np.where(rng.random(n) < 0.005, -1.0, 1.0)
    return X, y


@pytest.mark.parametrize(
    "risk, alpha, build",
    [
        ("cvar", 0.1, lambda ell: fc.cvar(ell, 0.1)),
        ("chi2", 1.0, lambda ell: fc.chi2_dro(ell, 0.5)),
        ("kl", 0.1, lambda ell: fc.kl_dro(ell, 0.1)),
    ],
)
def test_the_per_sample_benchmarks_formulations_against_cvxpy(risk, alpha, build):
    """On the data and risks of benchmarks/dro_peer.py (n = 1,000, d = 20 and an intercept), fc.solve's default
    route reaches CVXPY's optimum within 1e-3, and the worst-case weights attain the objective."""
    X, y = _benchmark_data()
    model = RobustLogisticRegression(risk, alpha, random_state=0).fit(X, y)
    n, d = X.shape
    w, b, ell = cp.Variable(d), cp.Variable(), cp.Variable(n)
    constraints = [
        ell >= cp.logistic(-cp.multiply(y, X @ w + b)),
        cp.norm(w, 2) <= model.radius_,
        cp.abs(b) <= model.intercept_bound_,
    ]
    reference = cp.Problem(cp.Minimize(build(ell)), constraints)
    try:
        optimum = reference.solve(solver=cp.CLARABEL)
    except cp.error.SolverError:  # exponential cones Clarabel gives up on: SCS, at its own tolerance
        optimum = reference.solve(solver=cp.SCS, eps=1e-7, max_iters=200_000)
    assert model.result_.info["method"] == "oce"
    assert abs(model.robust_objective_ - optimum) <= 1e-3 * abs(optimum)
    losses = np.logaddexp(0.0, -y * model.decision_function(X))
    assert abs(model.worst_case_weights_ @ losses - model.robust_objective_) <= 1e-6


def _sensitive_data(n: int = 300) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = (rng.random(n) < 0.4).astype(int)
    X = np.column_stack([rng.standard_normal(n) + a, rng.standard_normal(n)])
    return X, np.where(X[:, 0] + 0.3 * rng.standard_normal(n) > 0.5, 1, 0), a


@pytest.mark.parametrize("constraint", ["demographic_parity", "equal_opportunity"])
def test_a_fairness_constraint_holds_and_is_reported(constraint):
    """Without the constraint the groups' mean probabilities differ by far more than the bound; with it the
    fitted model keeps the gap within the bound on the training data, and the reports compute it as numpy."""
    X, y, a = _sensitive_data()
    free = RobustLogisticRegression("mean", max_iter=100, random_state=0).fit(X, y)
    model = RobustLogisticRegression("mean", constraint=constraint, bound=0.05, max_iter=300, random_state=0)
    model.fit(X, y, sensitive_features=a)
    keep = y == 1 if constraint == "equal_opportunity" else np.ones(y.size, dtype=bool)

    def gap(m):
        p = m.predict_proba(X)[:, 1]
        return abs(p[keep & (a == 0)].mean() - p[keep & (a == 1)].mean())

    assert gap(free) > 0.06  # above the bound without the constraint
    assert model.constraint_["gap"] == pytest.approx(gap(model), abs=1e-12)
    assert model.constraint_["gap"] <= 0.05 + 1e-6 and model.constraint_["violation"] <= 1e-6
    assert model.robust_objective_ > free.robust_objective_  # the constraint costs training loss
    held = model.constraint_report(X[:150], y[:150], a[:150])
    assert held["bound"] == 0.05 and held["violation"] == max(held["gap"] - 0.05, 0.0)


def test_a_fairness_constraint_refuses_what_it_cannot_fit():
    X, y, a = _sensitive_data(60)
    with pytest.raises(OptionError, match="sensitive_features"):
        RobustLogisticRegression("mean", constraint="demographic_parity").fit(X, y)
    with pytest.raises(OptionError, match="sensitive_features"):
        RobustLogisticRegression("mean").fit(X, y, sensitive_features=a)
    with pytest.raises(OptionError, match="risk='mean'"):
        RobustLogisticRegression("cvar", constraint="demographic_parity").fit(X, y, sensitive_features=a)
    with pytest.raises(OptionError, match="exactly two values"):
        three = np.arange(60) % 3
        RobustLogisticRegression("mean", constraint="demographic_parity").fit(X, y, sensitive_features=three)
    with pytest.raises(OptionError, match="positive class"):
        RobustLinearRegression("mean", constraint="equal_opportunity").fit(X, X[:, 1], sensitive_features=a)
