"""CompositeProblem(constraints=...): constraints on u = f(x) (and x) kept by the GLMO, checked against CVXPY."""

import json

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp.errors import ModelError


def fairness_data(n=200, d=5, seed=0):
    """A logistic-regression instance whose groups differ in their mean score (feature 0 shifted)."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, d))
    g = rng.random(n) < 0.4
    A[g, 0] += 1.0
    y = np.where(A @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return A, y, g


def group_means(w, batch):
    """u = (mean logistic loss, mean score of group 1, mean score of group 0) on the batch's rows."""
    A, y, g = batch
    s = A @ w
    return torch.stack([torch.nn.functional.softplus(-y * s).mean(), s[g].mean(), s[~g].mean()])


def as_batch(A, y, g):
    return torch.tensor(A), torch.tensor(y), torch.tensor(g)


def dp_problem(radius=3.0, bound=0.05, **extra):
    A, y, g = fairness_data()
    full = as_batch(A, y, g)

    def sampler(generator):
        rows = torch.randint(0, len(y), (32,), generator=generator)
        return tuple(t[rows] for t in full)

    u = fc.inner_value(3)
    constraints = {"dp": cp.abs(u[1] - u[2]) <= bound}
    problem = fc.CompositeProblem(
        u[0], group_means, fc.L2Ball(5, radius), sampler=sampler, full_batch=full, constraints=constraints, **extra
    )
    return problem, (A, y, g)


def test_constrained_optimum_matches_cvxpy_within_the_certified_gap():
    problem, (A, y, g) = dp_problem()
    result = fc.hmsfw(problem, exact=True, iters=300, seed=0, progress=False)
    assert result.info["glmo_route"] == "conic"
    # The deterministic problem: the group mean scores are affine in w, so CVXPY solves it exactly.
    w = cp.Variable(5)
    s = A @ w
    gap = cp.sum(s[g]) / g.sum() - cp.sum(s[~g]) / (~g).sum()
    loss = cp.sum(cp.logistic(-cp.multiply(y, s))) / len(y)
    reference = cp.Problem(cp.Minimize(loss), [cp.norm(w) <= 3.0, cp.abs(gap) <= 0.05])
    reference.solve(solver="CLARABEL")
    unconstrained = cp.Problem(cp.Minimize(loss), [cp.norm(w) <= 3.0])
    unconstrained.solve(solver="CLARABEL")
    last = result.history[-1]
    phi = problem.objective(result.x)
    assert phi == pytest.approx(last["objective"], rel=1e-12)
    # F is the loss and f convex, the constraints affine in w: the Frank-Wolfe gap bounds phi - phi*.
    assert 0 < last["gap_estimate"] < 1e-3
    assert -1e-6 <= phi - reference.value <= last["gap_estimate"] + 1e-6
    assert reference.value > unconstrained.value + 1e-3  # the constraint binds
    assert all(row["glmo_slack"] == 0.0 for row in result.history)
    (dp,) = result.constraints
    assert dp.name == "dp" and dp.violation <= 1e-7 and dp.satisfied
    assert float(dp.lhs) == pytest.approx(0.05, abs=1e-6)  # active at the optimum
    assert float(dp.rhs) == 0.05


def test_a_constraint_on_x_is_kept_and_matches_cvxpy():
    # f affine: the GLMO's model is exact, so one full step lands on the optimum of the whole problem.
    rng = np.random.default_rng(1)
    M, b = rng.normal(size=(6, 4)), rng.normal(size=6)
    Mt = torch.tensor(M)
    u = fc.inner_value(6)
    domain = fc.L1Ball(4, 2.0)
    x = domain.variable
    keep = [u[0] >= 0.2, x[0] - x[1] == 0.3]
    problem = fc.CompositeProblem(cp.norm1(u - b), lambda v, _: Mt @ v, domain, constraints=keep)
    result = fc.hmsfw(problem, iters=1, first_step=1.0, seed=0, progress=False)
    v = cp.Variable(4)
    ref = cp.Problem(cp.Minimize(cp.norm1(M @ v - b)), [cp.norm1(v) <= 2.0, (M @ v)[0] >= 0.2, v[0] - v[1] == 0.3])
    ref.solve(solver="CLARABEL")
    assert problem.objective(result.x) == pytest.approx(ref.value, abs=1e-6)
    assert [c.name for c in result.constraints] == ["constraint 0", "constraint 1"]
    assert max(c.violation for c in result.constraints) <= 1e-7


class Shifts:
    """A deterministic stream of batches: draw k shifts u[1] by shifts[k] (reset at the start of each run)."""

    def __init__(self, shifts):
        self.shifts, self.k = shifts, 0

    def __call__(self, generator):
        shift = self.shifts[min(self.k, len(self.shifts) - 1)]
        self.k += 1
        return torch.tensor(float(shift), dtype=torch.float64)

    def reset(self):
        self.k = 0

    def state_dict(self):
        return {"k": self.k}

    def load_state_dict(self, state):
        self.k = state["k"]


def shifted_problem(constraint_penalty=None):
    a = torch.tensor([1.0, 0.5], dtype=torch.float64)
    u = fc.inner_value(2)
    keep = {"floor": u[1] >= 0.5}
    if constraint_penalty is not None:
        keep = fc.Constraints(keep, penalty=constraint_penalty)
    # The fourth batch drops u[1] by 3: there the linearized floor x[1] - 3 >= 0.5 leaves the box.
    return fc.CompositeProblem(
        u[0],
        lambda x, shift: torch.stack([a @ x, x[1] + shift]),
        fc.Box(-1.0, 1.0, (2,)),
        sampler=Shifts([0, 0, 0, -3, 0, 0, 0, 0]),
        full_batch=torch.tensor(0.0, dtype=torch.float64),
        constraints=keep,
    )


def test_an_infeasible_linearized_constraint_mid_run_takes_the_elastic_program():
    result = fc.scfw(shifted_problem(), iters=6, seed=0, progress=False)
    slacks = {row["k"]: row["glmo_slack"] for row in result.history}
    # Only the step on the shifted batch is infeasible; the elastic program keeps x[1] = 1, 2.5 short of the
    # floor (the penalty, 100 per unit, outweighs the 0.5 per unit that x[1] adds to F).
    assert sorted(slacks) == list(range(7))
    assert slacks[3] == pytest.approx(2.5, rel=1e-6)  # the GLMO at y_3, on the fourth batch
    assert all(abs(s) <= 1e-9 for k, s in slacks.items() if k != 3)
    assert result.constraints[0].satisfied  # the run recovers on the later batches
    # A penalty below F's price of the slack gives up the floor: x[1] = -1, slack 4.5.
    cheap = fc.scfw(shifted_problem(constraint_penalty=0.1), iters=6, seed=0, progress=False)
    assert cheap.history[3]["glmo_slack"] == pytest.approx(4.5, rel=1e-6)


def test_report_on_a_passed_batch_and_in_the_saved_summary(tmp_path):
    problem, (A, y, g) = dp_problem()
    w = np.array([0.5, -0.2, 0.1, 0.0, 0.3])
    other = fairness_data(seed=3)
    (dp,) = fc.constraint_report(problem, w, batch=as_batch(*other))
    s = other[0] @ w
    gap = abs(s[other[2]].mean() - s[~other[2]].mean())
    assert float(dp.lhs) == pytest.approx(gap, rel=1e-12)
    assert dp.violation == pytest.approx(max(gap - 0.05, 0.0), rel=1e-12)
    (train,) = fc.constraint_report(problem, torch.tensor(w))  # full_batch by default
    s = A @ w
    assert float(train.lhs) == pytest.approx(abs(s[g].mean() - s[~g].mean()), rel=1e-12)
    result = fc.hmsfw(problem, exact=True, iters=3, seed=0, progress=False)
    summary = json.loads((result.save(tmp_path) / "summary.json").read_text())
    assert summary["constraints"][0]["name"] == "dp"
    assert summary["constraints"][0]["violation"] == result.constraints[0].violation
    assert "constraints" not in fc.Result.load(tmp_path).info


def test_bad_constraints_name_the_constraint_and_the_fix():
    problem, _ = dp_problem()
    u = problem.outer.u
    domain = problem.domain
    build = lambda keep: fc.CompositeProblem(  # noqa: E731
        u[0], group_means, domain, sampler=problem.sampler, full_batch=problem.full_batch, constraints=keep
    )
    with pytest.raises(ModelError, match="gap .* is not DCP"):
        build({"gap": cp.abs(u[1] - u[2]) >= 0.05})
    stray = cp.Variable(name="t")
    with pytest.raises(ModelError, match="constraint 0 .* uses variable t, which is neither"):
        build([u[1] <= stray])
    with pytest.raises(ModelError, match="another fc.inner_value placeholder"):
        build([fc.inner_value(3)[0] <= 1])
    with pytest.raises(ModelError, match="written with <=, >= or =="):
        build([u[1] - u[2]])
    with pytest.raises(ModelError, match="must be a list or a dict"):
        build("u[1] <= 0.05")
    unset = cp.Parameter(name="limit")
    with pytest.raises(ModelError, match="parameter limit with no value"):
        build([u[1] <= unset])
    with pytest.raises(ModelError, match="penalty must be finite and > 0"):
        fc.Constraints([u[1] <= 1], penalty=0)
    with pytest.raises(ModelError, match="route='colgen' does not keep"):
        fc.hmsfw(problem, glmo="colgen", iters=1, progress=False)
    with pytest.raises(ModelError, match="psg does not keep the problem's constraints"):
        fc.solve(problem, "psg", iters=1, progress=False)
    unconstrained = fc.CompositeProblem(u[0], group_means, domain, problem.sampler, full_batch=problem.full_batch)
    with pytest.raises(ModelError, match="constraint_report needs"):
        fc.constraint_report(unconstrained, np.zeros(5))


def test_the_constrained_glmo_certificate_bounds_its_gap_to_cvxpy():
    # One GLMO on a random model: the conic route's answer and its LMO certificate against CVXPY's own solve.
    rng = np.random.default_rng(2)
    n, d = 4, 6
    z, V, y = rng.normal(size=n), rng.normal(size=(n, d)), np.zeros(d)
    u = fc.inner_value(n)
    problem = fc.CompositeProblem(
        cp.max(u),
        lambda x, _: torch.tensor(V) @ x,
        fc.L1Ball(d, 1.0),
        constraints=[cp.abs(u[0] - u[1]) <= 0.1, u[2] >= -0.2],
    )
    glmo = fc.build_glmo(problem.outer, problem.domain)
    result = glmo.solve(z, V, y)
    x = cp.Variable(d)
    v = z + V @ x
    ref = cp.Problem(cp.Minimize(cp.max(v)), [cp.norm1(x) <= 1.0, cp.abs(v[0] - v[1]) <= 0.1, v[2] >= -0.2])
    ref.solve(solver="CLARABEL")
    assert result.slack == 0.0
    assert result.value == pytest.approx(ref.value, abs=1e-6)
    assert result.value - ref.value <= result.gap_bound + 1e-6
    assert result.gap_bound <= 1e-6
    with pytest.raises(ModelError, match="route='dual' does not keep"):
        fc.build_glmo(problem.outer, problem.domain, route="dual")


def test_stochastic_hmsfw_and_a_vector_constraint_report_the_largest_violation():
    problem, (A, y, g) = dp_problem()
    u = problem.outer.u
    floors = fc.CompositeProblem(
        u[0],
        group_means,
        problem.domain,
        problem.sampler,
        full_batch=problem.full_batch,
        constraints={"floors": u[1:3] >= np.array([0.2, -0.1])},
    )
    result = fc.hmsfw(floors, iters=20, seed=0, progress=False)
    assert {"glmo_slack", "glmo_gap"} <= set(result.history[-1])
    (found,) = result.constraints
    w = np.array([0.1, 0.0, 0.0, 0.0, 0.0])
    (at_w,) = fc.constraint_report(floors, w)
    s = A @ w
    means = np.array([s[g].mean(), s[~g].mean()])
    np.testing.assert_allclose(at_w.rhs, means, rtol=1e-12)
    assert at_w.violation == pytest.approx(max(0.2 - means[0], -0.1 - means[1], 0.0), rel=1e-12)
    assert found.lhs.shape == (2,)


def test_a_checkpoint_tells_problems_with_other_constraints_apart():
    from fullcomp.model.fingerprint import problem_fingerprint

    def stamp(bound, penalty):
        problem, _ = dp_problem(bound=bound)
        if penalty is not None:
            u = problem.outer.u
            keep = fc.Constraints({"dp": cp.abs(u[1] - u[2]) <= bound}, penalty=penalty)
            problem = fc.CompositeProblem(
                u[0], group_means, problem.domain, problem.sampler, full_batch=problem.full_batch, constraints=keep
            )
        return problem_fingerprint(problem)

    base = stamp(0.05, None)
    assert base["constraints"] == ["dp: abs(f(x)[1] + -(f(x)[2])) <= 0.05"] and base["penalty"] == 100.0
    assert stamp(0.04, None)["constraints"] != base["constraints"]
    assert stamp(0.05, 10.0)["penalty"] == 10.0
