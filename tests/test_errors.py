"""Bad input on the model, set and GLMO side gets a clear fullcomp error naming the argument.

(Run-time errors of ``hmsfw`` -- NaN at an iteration, budgets -- are tested with the algorithm.)
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc
import fullcomp.solvers
from fullcomp.errors import DomainError, FullcompError, ModelError, OptionError, OracleError, SolverError


def test_hierarchy():
    for cls in (ModelError, DomainError, OptionError, OracleError, SolverError):
        assert issubclass(cls, FullcompError)
    assert issubclass(ModelError, ValueError) and issubclass(DomainError, ValueError)
    assert issubclass(SolverError, RuntimeError) and issubclass(OracleError, RuntimeError)


def linear_inner(n: int, d: int):
    A = torch.linspace(-1, 1, n * d, dtype=torch.float64).reshape(n, d)

    def inner(x, batch):
        return A @ x.reshape(-1)

    return inner


# ---- the outer function --------------------------------------------------------------------------

U = fc.inner_value(3)
NOT_CONVEX = {
    # concave
    "sqrt": (cp.sqrt(U[0]), r"concave.*atom \w+ in `.*f\(x\)\[0\]"),
    "neg_max": (-cp.max(U), r"concave.*atom NegExpression"),
    # neither convex nor concave under DCP
    "product": (cp.max(U) * cp.max(U), r"not convex under the DCP rules: atom multiply in `max\(f\(x\)"),
    "sqrt_of_max": (cp.sqrt(cp.max(U)), r"not convex under the DCP rules: atom \w+ in `\w+\(max\(f\(x\)"),
    "square_of_max": (cp.square(cp.max(U)), r"not convex under the DCP rules: atom \w+ in `\w+\(max\(f\(x\)"),
    "difference": (cp.max(U) - cp.norm(U, 2), r"not convex under the DCP rules"),
}


@pytest.mark.parametrize("case", list(NOT_CONVEX))
def test_non_convex_outer_is_rejected_naming_the_atom(case):
    expr, pattern = NOT_CONVEX[case]
    assert not expr.is_convex()  # the cases really are non-convex to CVXPY
    with pytest.raises(ModelError, match=pattern):
        fc.build_glmo(expr, fc.Simplex(4))
    with pytest.raises(ModelError, match=pattern):
        fc.CompositeProblem(expr, linear_inner(3, 4), fc.Simplex(4))


def test_outer_without_placeholder():
    w = cp.Variable(3, name="w")
    with pytest.raises(ModelError, match="does not use the placeholder"):
        fc.build_glmo(cp.max(w), fc.L1Ball(2))
    with pytest.raises(ModelError, match="does not use the placeholder"):
        fc.CompositeProblem(cp.Constant(1.0) + 0, linear_inner(3, 2), fc.L1Ball(2))


def test_outer_with_a_foreign_variable():
    u = fc.inner_value(3)
    w = cp.Variable(2, name="stray")
    with pytest.raises(ModelError, match="variable stray.*domain.variable"):
        fc.build_glmo(cp.max(u) + cp.norm(w, 2), fc.L1Ball(2))
    other = fc.L1Ball(2)
    with pytest.raises(ModelError, match="neither the placeholder nor domain.variable"):
        fc.build_glmo(cp.max(u) + cp.norm(other.variable, 2), fc.L1Ball(2))


def test_outer_other_shapes_and_types():
    u = fc.inner_value(3)
    with pytest.raises(ModelError, match="outer must be scalar"):
        fc.build_glmo(u, fc.L1Ball(2))
    with pytest.raises(ModelError, match="outer must be a CVXPY expression"):
        fc.build_glmo(lambda v: v, fc.L1Ball(2))
    with pytest.raises(ModelError, match="more than one"):
        fc.build_glmo(cp.max(u) + cp.max(fc.inner_value(2)), fc.L1Ball(2))
    p = cp.Parameter(3, name="weights")
    with pytest.raises(ModelError, match="parameter weights with no value"):
        fc.build_glmo(cp.max(u + p), fc.L1Ball(2))


@pytest.mark.parametrize("n", [0, -2, 2.5, True, "3"])
def test_inner_value_needs_a_positive_int(n):
    with pytest.raises(ModelError, match=r"inner_value\(n\) needs a positive int"):
        fc.inner_value(n)


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5, float("nan")])
def test_cvar_alpha(alpha):
    with pytest.raises(ModelError, match="cvar alpha must lie in"):
        fc.cvar(fc.inner_value(4), alpha)


@pytest.mark.parametrize("kappa", [-1.0, float("inf"), float("nan")])
def test_chi2_kappa(kappa):
    with pytest.raises(ModelError, match="chi2_dro kappa"):
        fc.chi2_dro(fc.inner_value(4), kappa)


def test_helpers_need_a_vector():
    with pytest.raises(ModelError, match="cvar needs a 1-D"):
        fc.cvar(cp.Variable((2, 2)), 0.5)
    with pytest.raises(ModelError, match="chi2_dro needs a 1-D"):
        fc.chi2_dro(np.ones(3), 0.5)


# ---- the composite problem -----------------------------------------------------------------------


def test_placeholder_size_differs_from_inner_output():
    u = fc.inner_value(4)
    with pytest.raises(ModelError, match=r"returned shape \(3,\) at x0.*fc.inner_value\(4\)"):
        fc.CompositeProblem(cp.max(u), linear_inner(3, 5), fc.Simplex(5))


@pytest.mark.parametrize(
    "inner, pattern",
    [
        (lambda x, b: [1.0, 2.0, 3.0], "must return a torch.Tensor; it returned list"),
        (lambda x, b: np.ones(3), "must return a torch.Tensor; it returned ndarray"),
        (lambda x, b: torch.ones(3, 1, dtype=torch.float64), r"returned shape \(3, 1\)"),
        (lambda x, b: torch.tensor([1.0, float("nan"), 0.0]), "NaN or Inf at x0"),
        (lambda x, b: torch.tensor([1.0, float("inf"), 0.0]), "NaN or Inf at x0"),
    ],
)
def test_bad_inner_output_at_construction(inner, pattern):
    with pytest.raises(ModelError, match=pattern):
        fc.CompositeProblem(cp.max(fc.inner_value(3)), inner, fc.L2Ball(4))


def test_bad_problem_arguments():
    u = fc.inner_value(3)
    inner = linear_inner(3, 4)
    with pytest.raises(ModelError, match="inner must be a callable"):
        fc.CompositeProblem(cp.max(u), "inner", fc.Simplex(4))
    with pytest.raises(ModelError, match="sampler must be a callable"):
        fc.CompositeProblem(cp.max(u), inner, fc.Simplex(4), sampler=3)
    with pytest.raises(DomainError, match="domain must be a fullcomp set"):
        fc.CompositeProblem(cp.max(u), inner, [0, 1])
    with pytest.raises(DomainError, match=r"x0 has shape \(3,\)"):
        fc.CompositeProblem(cp.max(u), inner, fc.Simplex(4), x0=np.ones(3) / 3)
    with pytest.raises(DomainError, match="x0 is not in the domain"):
        fc.CompositeProblem(cp.max(u), inner, fc.Simplex(4), x0=np.ones(4))
    # and the good declaration builds, with a ConvexSet start on its boundary accepted
    X = fc.ConvexSet(4, lambda v: [cp.norm(v, 1) <= 1, v >= -0.3])
    boundary = X.lmo(np.arange(4.0) - 1.5)
    problem = fc.CompositeProblem(cp.max(u), inner, X, x0=boundary)
    assert problem.n == 3


# ---- sets ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [fc.L1Ball, fc.L2Ball])
@pytest.mark.parametrize("radius", [-1.0, float("nan"), float("inf"), "big", None])
def test_bad_radius(cls, radius):
    with pytest.raises(DomainError, match="radius must be a finite number >= 0"):
        cls(3, radius)


def test_bad_radius_nuclear_and_total():
    with pytest.raises(DomainError, match="radius must be a finite number >= 0"):
        fc.NuclearBall((2, 3), -0.5)
    with pytest.raises(DomainError, match="total must be a finite number >= 0"):
        fc.Simplex(3, total=-1)


@pytest.mark.parametrize("shape", [0, -3, (2, 0), (), "ab", 2.5, None])
def test_bad_shape(shape):
    with pytest.raises(DomainError, match="shape must"):
        fc.L1Ball(shape)


def test_nuclear_needs_a_matrix():
    with pytest.raises(DomainError, match=r"NuclearBall needs a matrix shape \(P, Q\)"):
        fc.NuclearBall(5)
    with pytest.raises(DomainError, match="NuclearBall needs a matrix shape"):
        fc.NuclearBall((2, 3, 4))


def test_bad_box():
    with pytest.raises(DomainError, match="lower bound exceeds its upper bound"):
        fc.Box([0.0, 1.0], [1.0, 0.5])
    with pytest.raises(DomainError, match="bounds must be finite"):
        fc.Box([0.0, -np.inf], [1.0, 1.0])
    with pytest.raises(DomainError, match="bounds must be finite"):
        fc.Box(0.0, np.inf, shape=(3,))
    with pytest.raises(DomainError, match="needs shape="):
        fc.Box(0.0, 1.0)
    with pytest.raises(DomainError, match="do not broadcast"):
        fc.Box([0.0, 0.0], [1.0, 1.0, 1.0])
    with pytest.raises(DomainError, match="do not fit shape"):
        fc.Box([0.0, 0.0], 1.0, shape=(3,))


def test_convexset_unbounded_or_empty():
    with pytest.raises(DomainError, match="ConvexSet is unbounded"):
        fc.ConvexSet(3, lambda v: [v >= 0])
    with pytest.raises(DomainError, match="ConvexSet is unbounded"):
        fc.ConvexSet(2, lambda v: [cp.abs(v[0]) <= 1, v[1] >= cp.square(v[0])])  # open upwards only
    with pytest.raises(DomainError, match="ConvexSet is unbounded"):
        fc.ConvexSet(3, lambda v: [v[0] == v[1], cp.abs(v[2]) <= 1])  # a line in a slab
    with pytest.raises(DomainError, match="ConvexSet is empty"):
        fc.ConvexSet(3, lambda v: [v >= 1, v <= 0])


def test_convexset_bad_constraints():
    with pytest.raises(DomainError, match="not DCP"):
        fc.ConvexSet(3, lambda v: [cp.norm(v, 2) >= 1, cp.norm(v, 2) <= 2])
    with pytest.raises(DomainError, match="non-empty list of CVXPY constraints"):
        fc.ConvexSet(3, lambda v: [])
    with pytest.raises(DomainError, match="non-empty list of CVXPY constraints"):
        fc.ConvexSet(3, lambda v: None)
    with pytest.raises(DomainError, match="non-empty list of CVXPY constraints"):
        fc.ConvexSet(3, lambda v: [cp.norm(v, 2)])
    with pytest.raises(DomainError, match="constraints must be a function"):
        fc.ConvexSet(3, [cp.Variable(3) >= 0])


@pytest.mark.parametrize("X", [fc.L1Ball(3), fc.NuclearBall((2, 3)), fc.Box(0, 1, shape=(3,)), fc.Simplex(3)])
def test_set_methods_check_their_input(X):
    wrong = np.ones((4,) if X.shape != (4,) else (5,))
    with pytest.raises(DomainError, match=r"has shape .*got an array of shape"):
        X.lmo(wrong)
    with pytest.raises(DomainError, match=r"has shape .*got an array of shape"):
        X.project(torch.tensor(wrong))
    bad = np.full(X.shape, np.nan)
    with pytest.raises(DomainError, match="non-finite"):
        X.lmo(bad)


# ---- GLMO ----------------------------------------------------------------------------------------


def test_glmo_options():
    u = fc.inner_value(3)
    X = fc.L1Ball(4)
    with pytest.raises(OptionError, match="route must be one of"):
        fc.build_glmo(cp.max(u), X, route="simplex")
    with pytest.raises(ModelError, match="route='colgen' needs an outer function of the placeholder only"):
        fc.build_glmo(cp.max(u) + cp.norm(X.variable, 2), X, route="colgen")
    with pytest.raises(OptionError, match="pool must be a positive int"):
        fc.build_glmo(cp.max(u), X, route="colgen", pool=0)
    z, V, y = np.zeros(3), np.ones((3, 4)), np.zeros(4)
    for route in ("conic", "colgen", "affine"):  # the affine route checks its inputs once its value is not finite
        glmo = fc.build_glmo(cp.max(u) if route != "affine" else cp.sum(u), X, route=route)
        with pytest.raises(OptionError, match="tol must be a positive number"):
            glmo.solve(z, V, y, tol=-1e-3)
        with pytest.raises(OptionError, match="max_calls must be a positive int"):
            glmo.solve(z, V, y, max_calls=0)
        with pytest.raises(OptionError, match=r"z of size 3, V of size 3x4, y of size 4"):
            glmo.solve(np.zeros(4), V, y)
        with pytest.raises(OptionError, match=r"got z \(3,\), V \(3, 5\)"):
            glmo.solve(z, np.ones((3, 5)), y)
        bad = V.copy()
        bad[1, 2] = np.nan
        with pytest.raises(OptionError, match="GLMO input V has NaN or Inf"):
            glmo.solve(z, bad, y)
        with pytest.raises(OptionError, match="GLMO input z has NaN or Inf"):
            glmo.solve(np.array([0.0, np.inf, 0.0]), V, y)
        with pytest.raises(OptionError, match="GLMO input y has NaN or Inf"):
            glmo.solve(z, V, np.array([0.0, -np.inf, np.inf, 0.0]))  # the total is NaN, not Inf
    # Entries whose total overflows are finite: the check must not refuse them.
    huge = np.zeros((3, 4))
    huge[0, :2] = 1e308
    assert np.isfinite(fc.build_glmo(cp.sum(u), X).solve(z, huge, y).x).all()
    huge[1, :2] = 1e308  # now the direction V^T 1 overflows
    for ball in (X, fc.L2Ball(4)):
        with pytest.raises(DomainError, match="non-finite entries"):
            fc.build_glmo(cp.sum(u), ball).solve(z, huge, y)


@pytest.mark.parametrize("route", ["conic", "colgen"])
def test_solver_failure_after_fallback_reports_the_statuses(route, monkeypatch):
    # both solvers stopped after one iteration: Clarabel hits its limit, SCS is inaccurate
    monkeypatch.setattr(fullcomp.solvers, "SOLVER_OPTIONS", {"CLARABEL": {"max_iter": 1}, "SCS": {"max_iters": 1}})
    u = fc.inner_value(3)
    glmo = fc.build_glmo(cp.max(u), fc.L1Ball(4), route=route)
    rng = np.random.default_rng(0)
    what = "conic GLMO" if route == "conic" else "column-generation master"
    with pytest.raises(SolverError, match=rf"{what} could not be solved \(CLARABEL: user_limit; SCS: \w+"):
        glmo.solve(rng.standard_normal(3), rng.standard_normal((3, 4)), np.zeros(4))


def test_solver_missing_is_reported(monkeypatch):
    monkeypatch.setattr(fullcomp.solvers, "SOLVERS", ("NO_SUCH_SOLVER",))
    u = fc.inner_value(3)
    with pytest.raises(SolverError, match="NO_SUCH_SOLVER: The solver NO_SUCH_SOLVER is not installed"):
        fc.build_glmo(cp.max(u), fc.L1Ball(4), route="conic").solve(np.zeros(3), np.ones((3, 4)), np.zeros(4))
