"""fc.risk (a risk's declared closed forms), the calculus's use of them, and fullcomp.testing.check_risk.

check_risk passes on every named risk (one pytest case per check, through parametrize_risk_checks) and on
risks declared with fc.risk; it fails risks whose declared value or weights are wrong, each through the
guarantee that names the mistake.
"""

from __future__ import annotations

import math
import subprocess
import sys

import cvxpy as cp
import numpy as np
import pytest
import torch
from cvxpy.transforms.partial_optimize import partial_optimize
from scipy.special import softmax

import fullcomp as fc
from fullcomp.errors import ModelError
from fullcomp.model.calculus import OuterCalculus, capped_weights, chi2_weights, closed_form, outer_gradient
from fullcomp.testing import RISK_CHECKS, check_risk, parametrize_risk_checks

N = 6
SIZES = np.array([10.0, 40.0, 5.0, 90.0, 20.0, 60.0])


def named_risks() -> dict[str, cp.Expression]:
    """Every named risk, with the parameters at which its closed forms change regime."""
    u = fc.inner_value(N)
    return {
        "cvar": fc.cvar(u, 0.4),  # a fractional boundary entry
        "cvar-half": fc.cvar(u, 0.5),
        "cvar-below-one-entry": fc.cvar(u, 0.1),  # the max
        "top_k_mean": fc.top_k_mean(u, 2),
        "top_k_mean-all": fc.top_k_mean(u, N),
        "chi2_dro": fc.chi2_dro(u, 0.5),
        "chi2_dro-mean": fc.chi2_dro(u, 0.0),
        "chi2_dro-max": fc.chi2_dro(u, 5.0),
        "entropic_risk": fc.entropic_risk(u, 0.7),
        "kl_dro": fc.kl_dro(u, 0.3),
        "kl_dro-mean": fc.kl_dro(u, 0.0),
        "kl_dro-max": fc.kl_dro(u, math.log(N)),
        "smooth_max": fc.smooth_max(u, 0.5),
        "group_dro": fc.group_dro(u, SIZES, 0.8),
        "tv_dro": fc.tv_dro(u, 0.3),
        "tv_dro-below-one-entry": fc.tv_dro(u, 0.9),  # the max
        "entropic_risk-hot": fc.entropic_risk(u, 1e4),  # the variance term, about the mean
        "kl_dro-small": fc.kl_dro(u, 1e-4),
        "tpauc_cvar": fc.tpauc_cvar(u, 2, theta_0=0.5, theta_1=0.5),
        "tpauc_kl": fc.tpauc_kl(u, 2, lam=0.8, tau=1.3),
    }


@parametrize_risk_checks(named_risks())
def test_every_named_risk_keeps_the_risk_contract(risk, check):
    check(risk)


def test_every_named_risk_declares_both_closed_forms():
    for name, expr in named_risks().items():
        closed = closed_form(expr)
        assert closed is not None and closed.value is not None and closed.weights is not None, name


def test_chi2_weights_sum_to_one_at_nearly_tied_maxima():
    """Splitting maxima 1e-9 apart takes a tilt t of about 1e9, at which projecting 1/n + t u onto the simplex
    lost the sum 1 by 1e-6 (and a GLMO's value by 3e-7)."""
    w = np.array([-0.35496442, -0.59452392, -0.35496442, -0.35496442, -2.27598547, -0.35496442, -2.59328121])
    w[[0, 2, 3]] += np.array([3e-10, -2e-10, 1e-10])
    q = chi2_weights(w, 2.0)
    assert q.sum() == pytest.approx(1.0, abs=1e-14) and np.all(q >= 0)
    assert 0.5 * w.size * np.sum((q - 1 / w.size) ** 2) == pytest.approx(2.0, rel=1e-12)
    u = fc.inner_value(w.size)
    u.value = w
    assert closed_form(fc.chi2_dro(u, 2.0)).value_at(w) == pytest.approx(float(fc.chi2_dro(u, 2.0).value), abs=1e-8)


# ---- a user's risk --------------------------------------------------------------------------------


def mixture(u: cp.Expression, b: float) -> cp.Expression:
    """(1 - b) mean(u) + b max(u): CVXPY's atoms give its value, the weights are declared."""

    def weights(w: np.ndarray) -> np.ndarray:
        top = w == w.max()
        return (1 - b) / w.size + b * top / top.sum()

    return fc.risk((1 - b) * cp.sum(u) / u.shape[0] + b * cp.max(u), weights=weights)


def rockafellar_uryasev(u: cp.Expression, alpha: float, calls: dict[str, int]) -> cp.Expression:
    """CVaR as min_t t + sum(max(u - t, 0)) / (alpha n), a partial minimization that CVXPY evaluates by a
    solve; value and weights declared in closed form, counting their calls."""
    n = u.shape[0]
    t = cp.Variable()
    tail = partial_optimize(
        cp.Problem(cp.Minimize(t + cp.sum(cp.pos(u - t)) / (alpha * n))), opt_vars=[t], dont_opt_vars=[u]
    )

    def value(w: np.ndarray) -> float:
        calls["value"] += 1
        return float(capped_weights(w, alpha * n) @ w)

    def weights(w: np.ndarray) -> np.ndarray:
        calls["weights"] += 1
        return capped_weights(w, alpha * n)

    return fc.risk(tail, value=value, weights=weights)


def test_a_user_risk_passes_check_risk():
    check_risk(mixture(fc.inner_value(N), 0.3))
    check_risk(rockafellar_uryasev(fc.inner_value(N), 0.5, {"value": 0, "weights": 0}), seed=4)


def test_the_calculus_uses_the_declared_closed_forms_with_no_conic_solve(monkeypatch):
    calls = {"value": 0, "weights": 0}
    u = fc.inner_value(N)
    F = rockafellar_uryasev(u, 0.5, calls)
    A = torch.tensor(np.random.default_rng(1).standard_normal((N, 4)))
    problem = fc.CompositeProblem(F, lambda x, batch: A @ x, fc.Simplex(4))
    w = np.random.default_rng(2).standard_normal(N)

    def no_solve(*args, **kwargs):
        raise AssertionError("a conic solve where the risk declares its closed form")

    with monkeypatch.context() as patch:
        patch.setattr(cp.Problem, "solve", no_solve)
        q = fc.risk_weights(problem, w)
        assert np.array_equal(q, capped_weights(w, 0.5 * N))
        assert np.array_equal(OuterCalculus(problem.outer).weights(w), q)
        assert problem.outer.value(w) == pytest.approx(np.sort(w)[-3:].mean(), rel=1e-15)
    assert calls["weights"] == 2 and calls["value"] >= 1
    # the history's q[i] columns are the declared weights too
    before = calls["weights"]
    res = fc.solve(problem, "hmsfw", iters=3, progress=False)
    assert calls["weights"] > before
    assert all(abs(sum(row[f"q[{i}]"] for i in range(N)) - 1.0) < 1e-12 for row in res.history.rows if "q[0]" in row)
    # an expression built on the risk is a new F: CVXPY's dual, which agrees
    assert np.allclose(fc.risk_weights(2.0 * F, w), 2.0 * q, atol=1e-6)


def test_a_named_risk_of_an_expression_of_the_placeholder_declares_nothing():
    """The closed forms are functions of the placeholder's value, so a risk of u[:3] or of a plain variable is
    any other F: its weights are CVXPY's dual, on the placeholder's n entries."""
    u = fc.inner_value(N)
    w = np.array([0.3, 2.0, 1.0, 5.0, 4.0, -1.0])
    head = fc.cvar(u[:3], 1 / 3)
    assert closed_form(head) is None
    np.testing.assert_allclose(fc.risk_weights(head, w), [0, 1, 0, 0, 0, 0], atol=1e-6)
    assert closed_form(fc.kl_dro(cp.Variable(N), 0.3)) is None
    assert closed_form(fc.tpauc_cvar(u, 2)) is not None


def test_fc_risk_returns_a_tagged_copy_and_leaves_the_expression_alone():
    u = fc.inner_value(N)
    plain = cp.max(u)
    declared = fc.risk(plain, weights=lambda w: (w == w.max()) / np.count_nonzero(w == w.max()))
    assert declared is not plain and closed_form(plain) is None and closed_form(declared) is not None
    assert closed_form(2 * declared) is None and closed_form(declared.copy()) is None
    u.value = np.arange(N, dtype=float)
    assert declared.value == plain.value == N - 1


def test_declared_answers_are_validated_where_they_are_used():
    u = fc.inner_value(N)
    w = np.arange(N, dtype=float)
    with pytest.raises(ModelError, match=r"weights= returned shape \(3,\) for u of length 6"):
        fc.risk_weights(fc.risk(cp.max(u), weights=lambda v: np.ones(3)), w)
    with pytest.raises(ModelError, match="weights= returned NaN or Inf"):
        fc.risk_weights(fc.risk(cp.max(u), weights=lambda v: v / 0.0), w)
    solved = rockafellar_uryasev(fc.inner_value(N), 0.5, {"value": 0, "weights": 0})  # its value is a solve
    outer = fc.CompositeProblem(fc.risk(solved, value=lambda v: "high"), lambda x, b: x * 1.0, fc.Simplex(N)).outer
    with pytest.raises(ModelError, match="value= returned 'high'; it must return one number"):
        outer.value(w)


def test_a_declared_closed_form_never_sees_the_callers_array():
    u = fc.inner_value(N)
    F = fc.risk(cp.max(u), weights=lambda v: (v.sort(), np.eye(N)[N - 1])[1])  # sorts its argument in place
    w = np.array([3.0, 1.0, 2.0, 0.0, 5.0, 4.0])
    fc.risk_weights(F, w)
    assert np.array_equal(w, [3.0, 1.0, 2.0, 0.0, 5.0, 4.0])


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda u: fc.risk(3.0, weights=np.ones), "fc.risk expr must be a CVXPY expression"),
        (lambda u: fc.risk(u, weights=np.ones), r"fc.risk expr must be scalar; it has shape \(6,\)"),
        (lambda u: fc.risk(cp.min(u), weights=np.ones), "fc.risk expr must be convex under the DCP rules"),
        (
            lambda u: fc.risk(cp.max(u) + cp.norm(cp.Variable(2)), weights=np.ones),
            "fc.risk expr must be a function of one fc.inner_value placeholder alone",
        ),
        (
            lambda u: fc.risk(cp.max(u) * cp.Parameter(nonneg=True, value=2.0, name="scale"), weights=np.ones),
            "fc.risk expr uses parameter scale",
        ),
        (lambda u: fc.risk(cp.max(u)), "fc.risk needs value= or weights= \\(or both\\)"),
        (lambda u: fc.risk(cp.max(u), value=1.0), "fc.risk value must be a callable of the numpy vector u"),
        (lambda u: fc.risk(cp.max(u), weights=[0.5, 0.5]), "fc.risk weights must be a callable"),
        (lambda u: fc.risk(fc.inner_value(1), value=float), "fc.risk expr is the placeholder itself"),
    ],
)
def test_fc_risk_arguments_are_validated(make, match):
    with pytest.raises(ModelError, match=match):
        make(fc.inner_value(N))


# ---- check_risk fails what is wrong ----------------------------------------------------------------


def test_check_risk_fails_a_wrong_declared_value():
    u = fc.inner_value(N)
    wrong = fc.risk(cp.sum_largest(u, 2) / 2, value=lambda w: float(np.sort(w)[-2:].mean()) * (1 + 1e-4))
    with pytest.raises(AssertionError, match="the declared value is CVXPY's value of the expression"):
        check_risk(wrong)


def test_check_risk_fails_wrong_declared_weights():
    u = fc.inner_value(N)
    wrong = fc.risk(0.5 * cp.log_sum_exp(u / 0.5), weights=lambda w: softmax(w / 0.6))  # the wrong temperature
    with pytest.raises(AssertionError, match=r"the declared weights are a subgradient of F, F\(v\) >= F\(u\)"):
        check_risk(wrong)


def test_check_risk_fails_weights_wrong_only_at_ties():
    u = fc.inner_value(N)
    unnormalized = fc.risk(cp.max(u), weights=lambda w: (w == w.max()).astype(float))  # right at a unique max
    for check in ("value", "dual"):
        RISK_CHECKS[check](unnormalized)
    with pytest.raises(AssertionError, match="a subgradient of F.*at the tied loss vector"):
        check_risk(unnormalized)


def test_check_risk_fails_weights_off_the_unique_subgradient():
    u = fc.inner_value(N)
    shift = 1e-4 * (np.eye(N)[0] - np.eye(N)[1])  # still on the simplex, too small for the inequality to see
    nearly = fc.risk(0.5 * cp.log_sum_exp(u / 0.5), weights=lambda w: softmax(w / 0.5) + shift)
    with pytest.raises(AssertionError, match="the declared weights are CVXPY's dual where the subgradient is unique"):
        RISK_CHECKS["dual"](nearly)


def test_check_risk_fails_a_nonconvex_expression_and_restores_the_placeholder():
    u = fc.inner_value(N)
    with pytest.raises(AssertionError, match="the risk is a convex scalar DCP expression"):
        check_risk(cp.min(u))
    u.value = np.ones(N)
    check_risk(fc.cvar(u, 0.5))
    assert np.array_equal(u.value, np.ones(N))


def test_parametrize_risk_checks_makes_one_case_per_risk_and_check():
    u = fc.inner_value(N)
    mark = parametrize_risk_checks([fc.cvar(u, 0.5), cp.max(u)])
    assert mark.name == "parametrize" and mark.args[0] == ("risk", "check")
    assert mark.kwargs["ids"] == [f"risk{i}-{check}" for i in range(2) for check in RISK_CHECKS]


def test_fullcomp_testing_imports_without_pytest():
    code = "import sys; sys.modules['pytest'] = None; import fullcomp.testing as t; assert callable(t.check_risk)"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- gradients ----------------------------------------------------------------------------------


def test_outer_gradient_is_the_gradient_of_a_smooth_f_and_the_slope_of_an_affine_one():
    rng = np.random.default_rng(5)
    domain = fc.L1Ball(4, 1.0)
    w, x = rng.standard_normal(N), rng.standard_normal(4)
    C = rng.standard_normal(4)
    smooth = fc.CompositeProblem(
        0.5 * cp.log_sum_exp(fc.inner_value(N) / 0.5) + C @ domain.variable,
        lambda x, b: x.sum() * torch.ones(N),
        domain,
    ).outer
    g_u, g_x = outer_gradient(smooth, w, x)
    np.testing.assert_allclose(g_u, softmax(w / 0.5), atol=1e-12)
    np.testing.assert_allclose(g_x, C, atol=1e-12)
    both = OuterCalculus(smooth).gradient(w, x)
    assert both.value == pytest.approx(0.5 * np.log(np.exp(w / 0.5).sum()) + C @ x, rel=1e-12)
    np.testing.assert_array_equal(both.u, g_u)
    assert OuterCalculus(smooth).value(torch.tensor(w), x) == both.value
    a = rng.standard_normal(N)
    affine = fc.CompositeProblem(a @ fc.inner_value(N), lambda x, b: x.sum() * torch.ones(N), domain).outer
    g_u, g_x = outer_gradient(affine, w, None)
    np.testing.assert_allclose(g_u, a, atol=1e-12)
    assert g_x is None
    log_barrier = fc.CompositeProblem(
        -cp.sum(cp.log(fc.inner_value(N))), lambda x, b: x.sum() * torch.ones(N), domain
    ).outer
    with pytest.raises(fc.errors.OracleError, match="F has no gradient at u"):
        outer_gradient(log_barrier, -np.ones(N), None)
