"""Column generation's master of a named risk from its closed forms (fullcomp.glmo.closed), against CVXPY.

The master min_{w in simplex} F(c + A w) over a few atom images: its value against CVXPY's (Clarabel) on random,
tied and degenerate models, its q a subgradient of F at the master's u that certifies the master's optimality
(g = A^T q has g_j >= g.w on every column, the KKT condition on the simplex), and no conic solve on the way.
"""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest

import fullcomp as fc
from fullcomp import solvers
from fullcomp.glmo.closed import POLYHEDRAL, ClosedMaster
from fullcomp.model.composite import Outer

N = 40
SIZES = np.random.default_rng(0).integers(5, 100, N).astype(float)
RISKS = {
    "cvar": lambda u: fc.cvar(u, 0.3),
    "cvar-max": lambda u: fc.cvar(u, 0.01),
    "top_k_mean": lambda u: fc.top_k_mean(u, min(4, u.shape[0])),
    "tv_dro": lambda u: fc.tv_dro(u, 0.2),
    "group_dro": lambda u: fc.group_dro(u, SIZES[: u.shape[0]], 0.5),
    "entropic_risk": lambda u: fc.entropic_risk(u, 0.6),
    "entropic_risk-hot": lambda u: fc.entropic_risk(u, 1e8),
    "smooth_max": lambda u: fc.smooth_max(u, 0.3),
    "kl_dro": lambda u: fc.kl_dro(u, 0.2),
    "kl_dro-small": lambda u: fc.kl_dro(u, 1e-9),
    "kl_dro-max": lambda u: fc.kl_dro(u, 10.0),
    "chi2_dro": lambda u: fc.chi2_dro(u, 0.4),
    "chi2_dro-mean": lambda u: fc.chi2_dro(u, 0.0),
}


def models(n: int, k: int = 6, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    tied = rng.integers(0, 3, (n, k)) / 2.0
    huge = rng.standard_normal((n, k))
    huge[0] += 1e3
    return {
        "random": (rng.standard_normal(n), rng.standard_normal((n, k))),
        "tied": (np.zeros(n), tied),
        "equal": (np.full(n, 0.7), np.zeros((n, k))),
        "one-huge": (np.zeros(n), huge),
        "one-atom": (rng.standard_normal(n), rng.standard_normal((n, 1))),
    }


def cvxpy_master(expr: cp.Expression, u: cp.Variable, c: np.ndarray, A: np.ndarray) -> float:
    w = cp.Variable(A.shape[1], nonneg=True)
    problem = cp.Problem(cp.Minimize(expr), [u == c + A @ w, cp.sum(w) == 1])
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    return float(problem.value)


@pytest.mark.parametrize("name", list(RISKS))
def test_the_closed_master_is_cvxpys_master_with_certifying_weights(name, monkeypatch):
    for n in (N, 1):
        u = fc.inner_value(n)
        F = RISKS[name](u)
        outer = Outer(F, fc.L2Ball(3))
        master = ClosedMaster.build(outer)
        assert (master is None) == (name.split("-")[0] in POLYHEDRAL)
        master = master or ClosedMaster(outer)  # the polyhedral ones' cutting planes, exact but slow at scale
        for kind, (c, A) in models(n).items():
            with monkeypatch.context() as m:
                m.setattr(solvers, "solve", lambda *a, **k: pytest.fail("a conic solve in the closed master"))
                solution = master.solve(c, A)
            assert solution is not None, (name, kind, n)
            w, q = solution.weights, solution.q
            assert np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-12)
            at = c + A @ w
            value = outer.value(at)
            scale = max(1.0, abs(value))
            if name.endswith(("-small", "-hot")):
                # CVXPY's exponential cones are off by 3e-6 here (issue 50, K5 and K6): F is within 1e-8 of
                # the mean, linear, whose minimum over the simplex is at a vertex
                reference = min(outer.value(c + A[:, j]) for j in range(A.shape[1]))
                assert value == pytest.approx(reference, abs=1e-7 * scale), (name, kind, n)
            else:
                assert value == pytest.approx(cvxpy_master(F, u, c, A), abs=2e-7 * scale), (name, kind, n)
            g = A.T @ q
            assert g.min() >= g @ w - 1e-9 * scale, (name, kind, n)  # optimal on the simplex along q
            # q is a subgradient of F at the master's u: F(v) >= F(u) + q.(v - u)
            rng = np.random.default_rng(1)
            for v in (at + rng.standard_normal(n), at + 0.01 * rng.standard_normal(n), c + A[:, 0]):
                assert outer.value(v) >= value + q @ (v - at) - 1e-9 * scale, (name, kind, n)
            if name in ("entropic_risk", "smooth_max", "kl_dro") and kind == "random":
                assert np.allclose(q, fc.risk_weights(F, at), rtol=1e-9, atol=1e-12)


def test_polyhedral_and_pairwise_risks_and_other_outer_functions_keep_the_conic_master():
    u = fc.inner_value(6)
    for F in (fc.tpauc_cvar(u, 2), cp.max(u), 2 * fc.kl_dro(u, 0.5), fc.cvar(u, 0.5)):
        assert ClosedMaster.build(Outer(F, fc.L2Ball(3))) is None
        glmo = fc.build_glmo(F, fc.L1Ball(3), route="colgen")
        assert glmo.closed is None and glmo.master is not None
    glmo = fc.build_glmo(fc.kl_dro(u, 0.1), fc.L1Ball(3), route="colgen")
    assert glmo.closed is not None and glmo.master is None  # built only if a closed master fails


@pytest.mark.parametrize("F", ["entropic_risk", "kl_dro"])
def test_hmsfw_runs_at_extreme_parameters(F):
    """entropic_risk at lam = 1e12 and kl_dro at rho = 1e-9: the conic master failed as 'unbounded'."""
    import torch

    A = torch.randn(4, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    u = fc.inner_value(4)
    risk = fc.entropic_risk(u, 1e12) if F == "entropic_risk" else fc.kl_dro(u, 1e-9)
    problem = fc.CompositeProblem(
        risk,
        lambda x, noise: (A @ x - 0.5) ** 2 + noise,
        fc.L1Ball(10, 2.0),
        sampler=lambda g: 0.05 * torch.randn(4, generator=g, dtype=torch.float64),
        full_batch=torch.zeros(4, dtype=torch.float64),
    )
    result = fc.hmsfw(problem, iters=6, progress=False)
    assert math.isfinite(problem.objective(result.x))


def test_a_failing_conic_master_names_the_risks_numerics_not_the_set(monkeypatch):
    from fullcomp.errors import SolverError
    from fullcomp.glmo.master import ConicMaster

    monkeypatch.setattr(ConicMaster, "solve", lambda self, c, images: None)
    monkeypatch.setattr(solvers, "SOLVERS", ("CLARABEL",))
    u = fc.inner_value(4)
    F = cp.sum(cp.exp(u / 1e-3))  # a conic program Clarabel cannot solve at these losses
    glmo = fc.build_glmo(F, fc.L1Ball(3), route="colgen")
    rng = np.random.default_rng(0)
    with pytest.raises(SolverError, match="risk parameter far from the losses' scale") as info:
        glmo.solve(rng.standard_normal(4) * 10, rng.standard_normal((4, 3)), np.zeros(3), tol=1e-6)
    assert "set is non-empty" not in str(info.value)


def test_kl_dro_at_ten_thousand_losses_runs_on_the_default_route():
    """Issue 48's failing data, u in [-3.7, 1.0], at n = 10,000 (the conic master's fallback built a 47.8 GiB
    index array): the default route solves and certifies, F at its point is the scalar dual's minimum."""
    from scipy.optimize import minimize_scalar
    from scipy.special import logsumexp

    n, d = 10_000, 21
    rng = np.random.default_rng(48)
    z, V = rng.uniform(-3.7, 1.0, n), rng.standard_normal((n, d)) / np.sqrt(d)
    glmo = fc.build_glmo(fc.kl_dro(fc.inner_value(n), 0.1), fc.L2Ball(d, 1.0))
    assert glmo.route == "colgen"
    result = glmo.solve(z, V, np.zeros(d), tol=1e-6)
    assert result.converged and glmo.master is None  # no conic master was needed
    u = z + V @ result.x
    dual = minimize_scalar(
        lambda t: math.exp(t) * 0.1 + math.exp(t) * (logsumexp(u / math.exp(t)) - math.log(n)),
        bounds=(-10, 10),
        method="bounded",
        options={"xatol": 1e-12},
    )
    assert result.value == pytest.approx(dual.fun, rel=1e-9)


def test_a_failed_subgradient_solve_falls_back_to_the_closed_forms_and_says_so(monkeypatch):
    from fullcomp.errors import SolverError
    from fullcomp.model.calculus import OuterCalculus

    w = np.random.default_rng(5).uniform(-3.7, 1.0, 50)
    u = fc.inner_value(50)
    calculus = OuterCalculus(Outer(fc.kl_dro(u, 0.1), fc.L2Ball(3)))

    def fail(*args, **kwargs):
        raise SolverError("CLARABEL: numerical error; SCS: numerical error")

    monkeypatch.setattr(solvers, "solve", fail)
    with pytest.warns(RuntimeWarning, match="closed-form value and weights are used"):
        g = calculus.subgradient(w)
    assert calculus.fallbacks == 1
    assert np.array_equal(g.u, fc.risk_weights(calculus.outer.expr, w)) and g.value == pytest.approx(g.u @ w)
    calculus = OuterCalculus(Outer(cp.max(u) + cp.sum_squares(u), fc.L2Ball(3)))  # no closed form: the error
    with pytest.raises(SolverError):
        calculus.subgradient(w)
