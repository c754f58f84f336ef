"""The oce method against CVXPY on a small robust logistic regression, its OCE forms against the risks'
closed forms, its certificate against the true gap, and the default route of fc.solve."""

import math

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp.algorithms.oce import oce_dual, oce_objective
from fullcomp.errors import ModelError, OptionError
from fullcomp.model.calculus import closed_form
from fullcomp.solvers import solve as conic_solve

N, D, RADIUS = 200, 5, 10.0
RISKS = {
    "cvar": (fc.cvar, 0.1),
    "chi2_dro": (fc.chi2_dro, 0.5),
    "kl_dro": (fc.kl_dro, 0.1),
    "entropic_risk": (fc.entropic_risk, 1.0),
}


def logistic_data(n: int = N, seed: int = 0, flipped: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Features with an intercept column and labels in {-1, 1} from a linear rule, a fraction ``flipped``
    of them flipped (none: the data are separable and the optimum lies on the ball's boundary)."""
    rng = np.random.default_rng(seed)
    A = np.hstack([rng.standard_normal((n, D)), np.ones((n, 1))])
    y = np.sign(A @ rng.standard_normal(D + 1)) * np.where(rng.random(n) < flipped, -1.0, 1.0)
    return A, y


def logistic(x: torch.Tensor, rows: tuple) -> torch.Tensor:
    a, b = rows
    return torch.nn.functional.softplus(-b * (a @ x))


def problem_of(name: str, A: np.ndarray, y: np.ndarray) -> fc.CompositeProblem:
    helper, parameter = RISKS[name]
    F = helper(fc.inner_value(len(y)), parameter)
    rows = fc.PerSample(logistic, (torch.tensor(A), torch.tensor(y)))
    return fc.CompositeProblem(F, rows, fc.L2Ball(A.shape[1], RADIUS))


def cvxpy_optimum(name: str, A: np.ndarray, y: np.ndarray) -> float:
    """The same robust logistic regression in CVXPY: F of an epigraph of the losses (F is nondecreasing)."""
    helper, parameter = RISKS[name]
    theta, losses = cp.Variable(A.shape[1]), cp.Variable(len(y))
    constraints = [losses >= cp.logistic(-cp.multiply(y, A @ theta)), cp.norm(theta) <= RADIUS]
    program = cp.Problem(cp.Minimize(helper(losses, parameter)), constraints)
    conic_solve(program, "the reference")
    return float(program.value)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return logistic_data()


CASES = [(name, 50) for name in RISKS] + [("cvar", None), ("kl_dro", None)]


@pytest.mark.parametrize(("name", "first_rows"), CASES)
def test_oce_reaches_the_cvxpy_optimum(data, name, first_rows):
    A, y = data
    best = cvxpy_optimum(name, A, y)
    # The Frank-Wolfe gap bounds the true gap (the losses are convex): gap_tol stops the run once certified.
    options = dict(iters=150, first_rows=first_rows, eval_every=1, gap_tol=1e-8, progress=False)
    result = fc.solve(problem_of(name, A, y), "oce", **options)
    final = result.history.rows[-1]
    # The conic solvers stop at 1e-8 (Clarabel) to 1e-9 (SCS) of the optimum; 1e-6 is above both.
    assert final["objective"] == pytest.approx(best, rel=1e-6, abs=1e-6)
    assert final["rows"] == N
    assert float(result.x.norm()) <= RADIUS * (1 + 1e-12)
    # The OCE form at the run's (eta, lam) is F's closed form at its x.
    with torch.no_grad():
        losses = logistic(result.x, (torch.tensor(A), torch.tensor(y))).numpy()
    params = fc.model.calculus.named_risk(problem_of(name, A, y).outer.expr)[1]
    assert oce_objective(name, params, losses, **result.dual) == pytest.approx(final["objective"], rel=1e-6)


@pytest.mark.parametrize("flipped", [0.005, 0.02])
def test_cvar_leaves_the_origin_where_every_loss_ties(flipped):
    """At x = 0 every logistic loss is log 2: CVaR's kink there stopped L-BFGS on the exact risk at the
    origin, 5e-4 above the optimum (0.5 % flipped) or at a kink near it; the smoothed start reaches it."""
    A, y = logistic_data(flipped=flipped)
    best = cvxpy_optimum("cvar", A, y)
    result = fc.solve(problem_of("cvar", A, y), "oce", iters=150, first_rows=None, eval_every=10, progress=False)
    assert result.history.rows[-1]["objective"] == pytest.approx(best, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("name", list(RISKS))
def test_certificate_bounds_the_true_gap(data, name):
    A, y = data
    best = cvxpy_optimum(name, A, y)
    result = fc.solve(problem_of(name, A, y), "oce", iters=12, first_rows=50, eval_every=1, progress=False)
    rows = [row for row in result.history.rows if "fw_gap" in row]
    assert len(rows) >= 12
    for row in rows:
        assert row["fw_gap"] >= row["objective"] - best - 1e-6


@pytest.mark.parametrize("name", list(RISKS))
def test_oce_form_at_its_minimizer_is_the_closed_form(name):
    u = np.random.default_rng(1).exponential(size=300)
    helper, parameter = RISKS[name]
    F = helper(fc.inner_value(u.size), parameter)
    params = fc.model.calculus.named_risk(F)[1]
    value = closed_form(F).value(u)
    dual = oce_dual(name, params, u)
    assert oce_objective(name, params, u, **dual) == pytest.approx(value, rel=1e-6)
    # F is the minimum of the form: any other (eta, lam) gives at least F.
    for shift in (-0.3, 0.2):
        moved = {key: v + shift if key == "eta" else v * math.exp(shift) for key, v in dual.items()}
        assert oce_objective(name, params, u, **moved) >= value - 1e-9


def test_chi2_form_matches_its_conic_program():
    """The chi-square ball's dual form, minimized by CVXPY, against the ball's sup form solved by CVXPY."""
    u = np.random.default_rng(2).exponential(size=50)
    kappa, n = 0.5, u.size
    q = cp.Variable(n)
    sup = cp.Problem(cp.Maximize(q @ u), [q >= 0, cp.sum(q) == 1, 0.5 * n * cp.sum_squares(q - 1 / n) <= kappa])
    conic_solve(sup, "the sup form")
    eta, lam = cp.Variable(), cp.Variable(nonneg=True)
    t = cp.Variable(n)
    # (lam/2) ((1 + s/lam)_+^2 - 1) = (t^2)/(2 lam) + ... with t = (lam + u - eta)_+: a quad-over-lin.
    form = lam * kappa + eta + cp.sum(cp.quad_over_lin(t, 2 * lam * n) * n) / n - lam / 2
    dual = cp.Problem(cp.Minimize(form), [t >= lam + u - eta, t >= 0])
    conic_solve(dual, "the dual form")
    assert dual.value == pytest.approx(sup.value, rel=1e-6)
    assert oce_objective("chi2_dro", {"kappa": kappa}, u, **oce_dual("chi2_dro", {"kappa": kappa}, u)) == (
        pytest.approx(sup.value, rel=1e-6)
    )


def test_solve_without_a_method_takes_the_oce_route(data):
    A, y = data
    result = fc.solve(problem_of("chi2_dro", A, y), iters=3, progress=False)
    assert result.info["method"] == "oce"


def test_solve_without_a_method_elsewhere_asks_for_one(data):
    A, y = data
    u = fc.inner_value(N)
    rows = fc.PerSample(logistic, (torch.tensor(A), torch.tensor(y)))
    problem = fc.CompositeProblem(fc.top_k_mean(u, 5), rows, fc.L2Ball(D + 1, RADIUS))
    with pytest.raises(OptionError, match="needs a method"):
        fc.solve(problem, iters=1)
    with pytest.raises(ModelError, match="oce needs F to be one of"):
        fc.solve(problem, "oce", iters=1)


def test_oce_needs_per_sample_losses():
    u = fc.inner_value(3)
    problem = fc.CompositeProblem(fc.cvar(u, 0.5), lambda x, batch: x * 1.0, fc.L2Ball(3, 1.0))
    with pytest.raises(ModelError, match="fc.PerSample"):
        fc.solve(problem, "oce", iters=1)
