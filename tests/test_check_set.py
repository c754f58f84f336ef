"""fullcomp.testing.check_set on sets written as a user writes them (subclasses of fc.Set outside the package): it
passes the docs' Cross (which projects by its LMO) and a group-l1 ball, fails sets with a wrong LMO, projection or
diameter, and every method that takes a set runs on both, with numpy-only code, through the automatic numpy/torch
adapter."""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings

import cvxpy as cp
import numpy as np
import pytest
import torch
from contract_cases import CASES, dc, minimax, per_sample

import fullcomp as fc
from fullcomp.errors import DomainError, ProjectionWarning
from fullcomp.testing import SET_CHECKS, check_set, parametrize_set_checks


class Cross(fc.Set):
    """conv{+-e_i}, known by its LMO alone: docs/modeling.md's example, as written there."""

    def __init__(self, n):
        self.shape = (n,)

    diameter = 2.0

    def lmo(self, d):
        out = np.zeros_like(d)
        i = np.argmax(np.abs(d))
        out[i] = -1.0 if d[i] >= 0 else 1.0
        return out


class GroupL1Ball(fc.Set):
    """{x : sum over groups of ||x_g||_2 <= radius}, the group-lasso ball, in numpy alone."""

    def __init__(self, groups, radius=1.0):
        self.groups = [np.asarray(g) for g in groups]
        self.shape = (sum(len(g) for g in self.groups),)
        self.radius = radius

    @property
    def diameter(self):
        return 2.0 * self.radius

    def norms(self, x):
        return np.array([np.linalg.norm(x[g]) for g in self.groups])

    def lmo(self, d):
        norms = self.norms(d)
        out = np.zeros_like(d)
        j = int(np.argmax(norms))
        if norms[j] > 0:
            out[self.groups[j]] = -self.radius * d[self.groups[j]] / norms[j]
        return out

    def project(self, p):
        norms = self.norms(p)
        if norms.sum() <= self.radius:
            return p.copy()
        # the group norms go onto the simplex of total radius (sort and threshold); each group keeps its direction
        top = np.sort(norms)[::-1]
        excess = (np.cumsum(top) - self.radius) / np.arange(1, top.size + 1)
        theta = excess[np.nonzero(top > excess)[0][-1]]
        shrunk = np.maximum(norms - theta, 0.0)
        out = np.zeros_like(p)
        for g, n, s in zip(self.groups, norms, shrunk):
            if n > 0:
                out[g] = p[g] * (s / n)
        return out

    def contains(self, x, tol=1e-9):
        return x.shape == self.shape and self.norms(x).sum() <= self.radius + tol * max(1.0, self.diameter)

    def cvxpy_constraints(self, var):
        return [sum(cp.norm(var[g], 2) for g in self.groups) <= self.radius]


GROUPS = [[0, 1], [2, 3, 4], [5]]
N = 6


def l1_ball(v):
    """Cross = the l1 ball, written as its split into positive and negative parts."""
    plus, minus = cp.Variable(N, nonneg=True), cp.Variable(N, nonneg=True)
    return [v == plus - minus, cp.sum(plus + minus) <= 1]


def lifted_group_l1(v, radius=1.5):
    """The group-l1 ball with one bound per group's norm."""
    t = cp.Variable(len(GROUPS))
    return [cp.sum(t) <= radius] + [cp.norm(v[g], 2) <= t[j] for j, g in enumerate(GROUPS)]


@parametrize_set_checks(
    {
        "cross": Cross(N),
        "cross-cvxpy": (Cross(N), {"constraints": l1_ball}),
        "group-l1": (GroupL1Ball(GROUPS, 1.5), {"constraints": lifted_group_l1}),
    }
)
def test_user_sets_pass_check_set(domain, check):
    check(domain)


def test_the_parametrization_has_one_test_per_set_and_check():
    mark = parametrize_set_checks({"a": Cross(3), "b": (fc.Simplex(2), {"checks": ["lmo_optimal", "diameter"]})})
    names, params = mark.args
    assert names == ("domain", "check")
    assert [p.id for p in params] == [f"a-{c}" for c in SET_CHECKS] + ["b-lmo_optimal", "b-diameter"]
    with pytest.raises(DomainError, match=r"fullcomp sets \(fc.Set\)"):
        parametrize_set_checks([np.ones(3)])


class ArgmaxCross(Cross):
    """A sign error: the maximizer of <d, x>."""

    def lmo(self, d):
        return -super().lmo(d)


class OutsideCross(Cross):
    """Minimizes <d, x> over the cross scaled by 1.5: points outside it."""

    def lmo(self, d):
        return 1.5 * super().lmo(d)


class OutsideL1(fc.L1Ball):
    def lmo(self, d):
        return 1.5 * super().lmo(d)


class RadialL1(fc.L1Ball):
    """Scales a point onto the ball: in the ball, not the nearest point."""

    def project(self, p):
        norm = np.abs(p).sum()
        return p.copy() if norm <= self.radius else p * (self.radius / norm)


class IdentityL1(fc.L1Ball):
    """'Projects' by returning the point: outside the ball (and contains, from project, agrees)."""

    def project(self, p):
        return p.copy()


class WideCross(Cross):
    diameter = 1.0  # two opposite vertices are 2 apart


@pytest.mark.parametrize(
    ("domain", "options", "match"),
    [
        (ArgmaxCross(N), {}, "not a minimizer"),  # caught by the set's own points alone
        (ArgmaxCross(N), {"constraints": l1_ball}, "not a minimizer"),
        (OutsideCross(N), {"constraints": l1_ball}, "not in the set"),
        (OutsideCross(N), {}, "more than its diameter"),
        (OutsideL1(N, 1.0), {}, "not in the set"),
        (RadialL1(N, 1.0), {}, "not the nearest point"),
        (IdentityL1(N, 1.0), {}, r"project\(.* is not in the set"),
        (WideCross(N), {}, "more than its diameter"),
    ],
)
def test_check_set_fails_a_set_that_breaks_a_guarantee(domain, options, match):
    with pytest.raises(AssertionError, match=match):
        check_set(domain, **options)


def test_check_set_fails_the_one_check_that_is_broken():
    # RadialL1's LMO, diameter and types are right: only the projection check fails, at a point it moves wrongly.
    check_set(RadialL1(N, 1.0), checks=["lmo_feasible", "lmo_optimal", "diameter", "array_types", "membership"])
    with pytest.raises(AssertionError, match=r"project\(\[ 3\.  -1\. .*is not the nearest point"):
        check_set(RadialL1(N, 1.0), checks=["projection"], points=[np.array([3.0, -1.0, 0.5, 0.0, 0.0, 0.0])])


def test_check_set_refuses_bad_arguments():
    with pytest.raises(DomainError, match="subclass of fc.Set"):
        check_set(np.ones(3))
    with pytest.raises(DomainError, match="unknown names \\['lmo'\\]"):
        check_set(Cross(3), checks=["lmo"])
    with pytest.raises(DomainError, match="tol must be"):
        check_set(Cross(3), tol=0.0)
    with pytest.raises(DomainError, match="directions must be finite arrays of the set's shape"):
        check_set(Cross(3), directions=[np.ones(4)])


def test_numpy_code_gets_tensors_and_gives_back_their_type_dtype_and_device():
    X = Cross(4)
    d = np.array([0.5, -3.0, 1.0, 0.0])
    for dtype in (torch.float32, torch.float64):
        out = X.lmo(torch.tensor(d, dtype=dtype))
        assert isinstance(out, torch.Tensor) and out.dtype == dtype
        assert out.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert X.lmo(d.astype(np.float32)).dtype == np.float32
    assert X.lmo(d.tolist()).dtype == np.float64  # a list comes back as a float64 array
    with pytest.raises(DomainError, match=r"Cross has shape \(4,\), got an array of shape \(3,\)"):
        X.lmo(np.ones(3))

    class Flat(Cross):
        def lmo(self, d):
            return np.zeros(5)

    with pytest.raises(DomainError, match=r"got lmo\(\)'s result of shape \(5,\)"):
        Flat(4).lmo(d)


def test_a_set_that_takes_tensors_gets_them_as_they_are():
    seen = []

    class TorchCross(Cross):
        takes_tensors = True

        def lmo(self, d):
            seen.append(type(d))
            if isinstance(d, torch.Tensor):
                out = torch.zeros_like(d)
                i = int(torch.argmax(d.abs()))
                out[i] = -1.0 if d[i] >= 0 else 1.0
                return out
            return super().lmo(d)

    X = TorchCross(4)
    assert X.lmo(torch.tensor([0.5, -3.0, 1.0, 0.0], dtype=torch.float32)).dtype == torch.float32
    assert seen == [torch.Tensor]
    check_set(X, checks=["lmo_optimal", "array_types", "input_checks"])


def test_library_sets_are_adapted_once():
    raw = fc.L1Ball.lmo.unchecked
    assert not hasattr(raw, "unchecked")  # the numpy code itself, not a second wrapper

    class Inherits(fc.L1Ball):
        pass

    class Reassigns(fc.L1Ball):
        lmo = fc.L1Ball.lmo

    assert Inherits.lmo is fc.L1Ball.lmo and Reassigns.lmo is fc.L1Ball.lmo
    assert Cross.lmo.unchecked.__qualname__ == "Cross.lmo"


def test_fullcomp_testing_imports_without_pytest():
    code = "import sys, fullcomp.testing; assert 'pytest' not in sys.modules, 'pytest was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cross_projects_by_its_lmo_onto_the_l1_ball():
    # Cross is the l1 ball of radius 1: its projection from the LMO is within projection_tol * diameter of the
    # exact one (the stopping rule's guarantee, lmo_projection's docstring), inside the set and outside it.
    X, exact = Cross(N), fc.L1Ball(N, 1.0)
    rng = np.random.default_rng(3)
    points = [scale * rng.standard_normal(N) for scale in (0.02, 0.1, 0.2, 1.0, 3.0, 30.0) for _ in range(5)]
    points += [np.zeros(N), np.eye(N)[2], -np.eye(N)[4], np.full(N, 1.0 / N), np.array([0.5, -0.5, 0, 0, 0, 0])]
    inside = sum(np.abs(p).sum() < 1 for p in points)
    assert 8 <= inside <= len(points) - 8  # both kinds are tested
    bound = X.projection_tol * X.diameter
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProjectionWarning)
        for p in points:
            q = X.project(p)
            assert np.abs(q).sum() <= 1 + 1e-12
            assert np.linalg.norm(q - exact.project(p)) <= bound, p
    assert X.project(torch.tensor(points[3], dtype=torch.float32)).dtype == torch.float32  # through the adapter


class LMOOnlyGroupL1(fc.Set):
    """The group-l1 ball known by its LMO alone: a curved set, no polytope."""

    def __init__(self, groups, radius):
        self.ball = GroupL1Ball(groups, radius)
        self.shape = self.ball.shape

    @property
    def diameter(self):
        return self.ball.diameter

    def lmo(self, d):
        return self.ball.lmo(d)


def test_a_curved_set_projects_by_its_lmo_to_the_same_accuracy():
    X = LMOOnlyGroupL1(GROUPS, 1.5)
    rng = np.random.default_rng(4)
    bound = X.projection_tol * X.diameter
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProjectionWarning)
        for scale in (0.05, 0.2, 0.5, 1.0, 3.0):
            for _ in range(4):
                p = scale * rng.standard_normal(N)
                assert np.linalg.norm(X.project(p) - X.ball.project(p)) <= bound, p
    check_set(X, lifted_group_l1, checks=["projection", "array_types", "input_checks"])


def test_the_projection_from_the_lmo_warns_when_its_steps_run_out():
    X = Cross(N)
    X.projection_iters = 2
    p = np.array([0.3, -0.2, 0.25, 0.1, -0.05, 0.02])  # inside: its projection needs one atom per entry
    with pytest.warns(ProjectionWarning, match=r"Cross.project: .* after 2 steps .* define project\(point\) on Cross"):
        q = X.project(p)
    assert np.abs(q).sum() <= 1 + 1e-12 and np.linalg.norm(q - p) > X.projection_tol * X.diameter
    X.projection_iters = Cross.projection_iters
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProjectionWarning)
        np.testing.assert_allclose(X.project(p), p, atol=X.projection_tol * X.diameter)


def test_every_library_set_projects_by_its_own_project():
    # The projection from the LMO is for user sets: each concrete library set keeps its exact (and fast) one.
    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    library = [c for c in subclasses(fc.Set) if c.__module__.startswith("fullcomp.") and not inspect.isabstract(c)]
    assert len(library) >= 15
    assert [c.__name__ for c in library if c.project is fc.Set.project] == []


# Every method that takes a set runs on both: the composite ones over the set, the min-max ones with y in it. The
# difference-of-convex methods (contract case ``dc``) take no set: x is free and psi has no constraint set.
SET_METHODS = [name for name, (factory, _) in CASES.items() if factory is not dc]
PROJECTION_FREE = {"hmsfw", "hmsfw-ii", "hmsfw-i", "hmsfw-exact", "scfw", "clipped-scfw", "linasa-icg", "fw"}


def composite_over(domain):
    A = torch.randn(3, N, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def inner(x, noise):
        return torch.nn.functional.softplus(A @ x - 0.5) + noise

    def sampler(gen):
        return 0.05 * torch.randn(3, generator=gen, dtype=torch.float64)

    return fc.CompositeProblem(
        cp.max(fc.inner_value(3)), inner, domain, sampler=sampler, full_batch=torch.zeros(3, dtype=torch.float64)
    )


def per_sample_over(domain):
    """CVaR of 30 logistic losses of fc.PerSample rows, over the set: the case of the oce method."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(30, N, generator=g, dtype=torch.float64)
    y = torch.sign(A @ torch.randn(N, generator=g, dtype=torch.float64))

    def loss(x, rows):
        a, b = rows
        return torch.nn.functional.softplus(-b * (a @ x))

    return fc.CompositeProblem(fc.cvar(fc.inner_value(30), 0.2), fc.PerSample(loss, (A, y)), domain)


def minimax_over(domain):
    """min over x = {w, s} of max over y in the set of (w - b)^2 + s^2 + y.w - |y|^2 / 2."""

    def phi(x, y, b):
        return ((x["w"] - b) ** 2).sum() + (x["s"] ** 2).sum() + y @ x["w"] - 0.5 * (y @ y)

    return fc.DMaxProblem(
        phi,
        x0={"w": torch.zeros(N, dtype=torch.float64), "s": torch.ones(2, dtype=torch.float64)},
        y0=torch.tensor(domain.default_point()),
        Y=domain,
        sampler=lambda gen: 1.0 + 0.1 * torch.randn(N, generator=gen, dtype=torch.float64),
        full_batch=torch.ones(N, dtype=torch.float64),
    )


def test_the_set_methods_are_every_method_but_the_dc_ones():
    assert set(CASES) == {m.name for m in fc.methods()}
    assert PROJECTION_FREE <= set(SET_METHODS)


@pytest.mark.parametrize("method", SET_METHODS)
@pytest.mark.parametrize("which", ["cross", "group-l1"])
def test_every_method_runs_on_the_user_sets(method, which, monkeypatch):
    domain = Cross(N) if which == "cross" else GroupL1Ball(GROUPS, 1.5)
    factory, required = CASES[method]
    over = {minimax: minimax_over, per_sample: per_sample_over}.get(factory, composite_over)
    problem = over(domain)
    calls = []
    by_lmo = fc.sets.base.project_by_lmo
    monkeypatch.setattr(fc.sets.base, "project_by_lmo", lambda *args: calls.append(1) or by_lmo(*args))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProjectionWarning)  # Cross's projection from its LMO reaches its accuracy
        res = fc.solve(problem, method, iters=3, seed=0, progress=False, **required)
    # the projection methods project Cross by its LMO; the group-l1 ball's own project is never replaced
    assert bool(calls) == (which == "cross" and method not in PROJECTION_FREE)
    point = res.x if factory is not minimax else res.y
    point = np.asarray(point.detach().cpu().double().numpy() if isinstance(point, torch.Tensor) else point)
    assert np.all(np.isfinite(point))
    if which == "cross":
        assert np.abs(point).sum() <= 1.0 + 1e-7  # Cross is the l1 ball
    else:
        assert domain.contains(point, tol=1e-7)
