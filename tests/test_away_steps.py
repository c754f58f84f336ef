"""Issue 42: away and pairwise Frank-Wolfe steps converge linearly where vanilla Frank-Wolfe zig-zags.

The measured problem is phi(x) = ||A x - b||^2 over the simplex of R^30, with A's singular values in [1, 2]
(strongly convex) and the minimizer x* in the relative interior of a 5-vertex face, with strict
complementarity (the optimality conditions are built in: grad phi(x*) is 1 on the face, 1.5 to 3 off it).
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp.errors import OptionError
from fullcomp.model.calculus import kink

D, M, SUPPORT = 30, 40, 5
PAIRWISE = ("away", "pairwise", "blended-pairwise")


def face_problem(seed: int = 0, dtype=torch.float64, **kwargs):
    """(problem, x*, A, b): ||A x - b||^2 on the simplex of R^30, minimized inside a 5-vertex face."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((M, D)))
    R, _ = np.linalg.qr(rng.standard_normal((D, D)))
    A = Q @ np.diag(np.linspace(1.0, 2.0, D)) @ R.T
    x_star = np.zeros(D)
    x_star[rng.choice(D, SUPPORT, replace=False)] = rng.dirichlet(5 * np.ones(SUPPORT))
    grad = 1.0 + np.where(x_star > 0, 0.0, rng.uniform(0.5, 2.0, D))  # = 2 A^T (A x* - b)
    b = A @ x_star - np.linalg.lstsq(A.T, grad / 2, rcond=None)[0]
    A_t, b_t = torch.tensor(A, dtype=dtype), torch.tensor(b, dtype=dtype)
    u = fc.inner_value(M)
    problem = fc.CompositeProblem(cp.sum_squares(u), lambda x, _: A_t @ x - b_t, fc.Simplex(D), **kwargs)
    return problem, x_star, A, b


@pytest.fixture(scope="module")
def face():
    problem, x_star, A, b = face_problem()
    x = cp.Variable(D)
    cp.Problem(cp.Minimize(cp.sum_squares(A @ x - b)), [x >= 0, cp.sum(x) == 1]).solve(solver="CLARABEL")
    # The built-in optimum is CVXPY's, to the solver's tolerance.
    assert np.abs(x.value - x_star).max() < 1e-6
    return problem, x_star, x.value


def errors(result, phi_star: float) -> np.ndarray:
    return result.history.column("objective_estimate") - phi_star


@pytest.mark.parametrize("step", PAIRWISE)
def test_away_and_pairwise_steps_converge_linearly(face, step):
    problem, x_star, x_cvxpy = face
    phi_star = problem.objective(x_star)
    result = fc.solve(problem, "fw", corrective=step, iters=80, progress=False)
    error, gap = errors(result, phi_star), result.history.column("gap")[:-1]
    assert error.min() >= -1e-13  # phi ~ 16: its rounding
    assert np.argmax(error < 1e-8) <= 40 and (error < 1e-8).any()  # measured: 32, 20 and 23 iterations
    assert np.argmax(gap < 1e-6) <= 60 and (gap < 1e-6).any()  # measured: 49, 32 and 33
    # The linear phase: every iteration until the error reaches the rounding of phi.
    phase = int(np.argmax(error < 1e-11))
    assert phase >= 15
    second_half = np.arange(phase // 2, phase)
    slope = np.polyfit(second_half, np.log(error[second_half]), 1)[0]
    assert slope < np.log(0.75), f"{step}: {np.exp(slope):.3f} per iteration"  # measured: 0.57, 0.36, 0.42
    # Over every window of 5 iterations the error shrinks by a constant factor (0.85 per iteration or better;
    # measured: 0.67, 0.50, 0.57 at worst).
    ratios = error[5:phase] / error[: phase - 5]
    assert ratios.max() < 0.85**5, f"{step}: worst 5-iteration ratio {ratios.max():.3f}"
    # The final point is CVXPY's, and the active set is x*'s face.
    assert np.abs(result.x.numpy() - x_cvxpy).max() < 1e-6
    assert np.abs(result.x.numpy() - x_star).max() < 1e-7
    vertices = np.array([a for a, _ in result.atoms])
    assert sorted(np.argmax(vertices, axis=1)) == sorted(np.flatnonzero(x_star))
    assert sum(w for _, w in result.atoms) == pytest.approx(1.0, abs=1e-12)
    assert result.history.column("away_step")[:-1].sum() > 0 and result.history.column("drop")[:-1].sum() >= 1


def test_vanilla_frank_wolfe_zig_zags_at_the_sublinear_rate(face):
    problem, x_star, _ = face
    phi_star = problem.objective(x_star)
    result = fc.solve(problem, "fw", corrective="vanilla", iters=600, progress=False)
    error = errors(result, phi_star)
    k = np.arange(1, len(error) + 1)
    # With the iterations the away steps need to reach 1e-8, vanilla Frank-Wolfe is still above 1e-2 ...
    assert error[80] > 1e-2 and error[-1] > 1e-3
    # ... and its error decays like c / k: slope -1 of log error against log k, k error about constant.
    late = k >= 60
    slope = np.polyfit(np.log(k[late]), np.log(error[late]), 1)[0]
    assert -1.15 < slope < -0.85, slope
    scaled = (k * error)[late]
    assert scaled.max() / scaled.min() < 1.5
    assert result.history.column("away_step")[:-1].sum() == 0
    assert len(result.atoms) > SUPPORT  # the vertices off the face keep their weight


def test_gap_tol_stops_with_the_converged_status(face):
    problem, x_star, _ = face
    result = fc.solve(problem, "fw", corrective="blended-pairwise", gap_tol=1e-6, iters=500, progress=False)
    assert result.status == "converged"
    assert result.history[-2]["gap"] <= 1e-6 and result.info["iterations"] < 60
    assert result.history[-1]["gap"] <= 1e-6  # the closing row's gap, at the final point
    assert np.abs(result.x.numpy() - x_star).max() < 1e-5


def test_short_steps_with_a_known_L_converge_linearly(face):
    problem, x_star, _ = face
    # phi = ||A x - b||^2 has L = 2 sigma_max(A)^2 = 8.
    result = fc.solve(problem, "fw", corrective="away", line_search="short", L=8.0, iters=300, progress=False)
    error = errors(result, problem.objective(x_star))
    assert error[-1] < 1e-10 and result.L == 8.0


def test_away_steps_from_a_vertex_on_l1_ball_and_box():
    """Away steps on the other polytopes, against CVXPY, with F reading x too (grad_x F)."""
    rng = np.random.default_rng(1)
    A, c = rng.standard_normal((12, 8)), 2.0 * rng.standard_normal(12)
    A_t, c_t = torch.tensor(A), torch.tensor(c)
    for domain in (fc.L1Ball(8, 1.0), fc.Box(-0.2, 0.3, shape=(8,))):
        outer = cp.sum_squares(fc.inner_value(12)) + 0.5 * cp.sum_squares(domain.variable - 0.1)
        problem = fc.CompositeProblem(outer, lambda x, _: A_t @ x - c_t, domain)
        x = cp.Variable(8)
        ref = cp.Problem(
            cp.Minimize(cp.sum_squares(A @ x - c) + 0.5 * cp.sum_squares(x - 0.1)), domain.cvxpy_constraints(x)
        )
        ref.solve(solver="CLARABEL")
        start = domain.lmo(np.ones(8))  # a vertex
        result = fc.solve(problem, "fw", corrective="away", iters=300, x0=start, gap_tol=1e-7, progress=False)
        assert result.status == "converged", type(domain).__name__
        assert np.abs(result.x.numpy() - x.value).max() < 1e-6, type(domain).__name__


def test_a_matrix_domain_and_reads():
    """F reads a matrix-shaped x (CVXPY's gradient is column-major); a map declaring reads= gives the same run."""
    rng = np.random.default_rng(2)
    C, target = rng.standard_normal((3, 4)), rng.standard_normal(5)
    B = torch.tensor(rng.standard_normal((5, 6)))
    reads = np.array([0, 2, 5, 7, 9, 11])
    domain = fc.Simplex((3, 4))
    outer = cp.sum_squares(fc.inner_value(5) - target) + cp.sum(cp.multiply(C, domain.variable))

    def dense_map(x, _):
        return B @ x.reshape(-1)[torch.as_tensor(reads)]

    runs = [
        fc.solve(fc.CompositeProblem(outer, dense_map, domain), "fw", corrective="pairwise", iters=200, progress=False),
        fc.solve(
            fc.CompositeProblem(outer, lambda v, _: B @ v, domain, reads=reads),
            "fw",
            corrective="pairwise",
            iters=200,
            progress=False,
        ),
    ]
    X = cp.Variable((3, 4))
    flat = cp.hstack([X[i // 4, i % 4] for i in reads])
    ref = cp.Problem(
        cp.Minimize(cp.sum_squares(B.numpy() @ flat - target) + cp.sum(cp.multiply(C, X))), [X >= 0, cp.sum(X) == 1]
    )
    ref.solve(solver="CLARABEL")
    for result in runs:
        assert result.x.shape == (3, 4)
        assert np.abs(result.x.numpy() - X.value).max() < 1e-6
    assert torch.allclose(runs[0].x, runs[1].x, atol=1e-12)


def test_nonsmooth_F_runs_vanilla_on_the_glmo_and_refuses_away_steps():
    A = torch.randn(4, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u = fc.inner_value(4)
    problem = fc.CompositeProblem(cp.max(u), lambda x, _: torch.nn.functional.softplus(A @ x - 0.5), fc.L1Ball(10, 2.0))
    with pytest.raises(OptionError, match="corrective='vanilla'"):
        fc.solve(problem, "fw", iters=2, progress=False)  # corrective="away" is the default
    result = fc.solve(problem, "fw", corrective="vanilla", iters=150, progress=False)
    x = cp.Variable(10)
    ref = cp.Problem(cp.Minimize(cp.max(cp.logistic(A.numpy() @ x - 0.5))), [cp.norm1(x) <= 2])
    ref.solve(solver="CLARABEL")
    assert result.info["direction"] == "glmo" and "glmo_gap" in result.history[0]
    assert problem.objective(result.x) - ref.value < 1e-6
    objective = result.history.column("objective_estimate")
    assert np.all(np.diff(objective) <= 1e-12)  # the line search never increases phi
    assert kink(cp.max(u)) is not None and kink(fc.cvar(u, 0.5)) is not None
    assert kink(cp.sum_squares(u) + cp.log_sum_exp(u) + cp.sum(cp.huber(u))) is None


def test_refusals_name_the_fix():
    problem, _, _, _ = face_problem()
    with pytest.raises(OptionError, match="needs L="):
        fc.solve(problem, "fw", line_search="short", iters=2, progress=False)
    ball = fc.CompositeProblem(cp.sum_squares(fc.inner_value(3)), lambda x, _: x - 1.0, fc.L2Ball(3, 1.0))
    with pytest.raises(OptionError, match="polytope"):
        fc.solve(ball, "fw", corrective="pairwise", iters=2, progress=False)
    vanilla = fc.solve(ball, "fw", corrective="vanilla", iters=50, progress=False)  # no active set off polytopes
    assert torch.allclose(vanilla.x, torch.full((3,), 3**-0.5, dtype=torch.float64), atol=1e-6)
    F, inner, simplex = cp.sum_squares(fc.inner_value(3)), (lambda x, e: x - 1.0 + e), fc.Simplex(3)
    noisy = fc.CompositeProblem(F, inner, simplex, sampler=lambda g: torch.randn(3, generator=g, dtype=torch.float64))
    with pytest.raises(OptionError, match="full_batch"):
        fc.solve(noisy, "fw", iters=2, progress=False)
    exact = fc.CompositeProblem(
        F, inner, simplex, sampler=noisy.sampler, full_batch=torch.zeros(3, dtype=torch.float64)
    )
    assert fc.solve(exact, "fw", iters=5, progress=False).status == "iterations"


def test_an_interrupted_away_step_run_resumes_exactly(tmp_path):
    problem, _, _, _ = face_problem()
    full = fc.solve(problem, "fw", corrective="blended-pairwise", iters=12, progress=False)
    ckpt = fc.Checkpoint(tmp_path / "run.ckpt", every=4)

    def interrupt(it):
        if it.k == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fc.solve(
            problem, "fw", corrective="blended-pairwise", iters=12, checkpoint=ckpt, callback=interrupt, progress=False
        )
    resumed = fc.solve(problem, "fw", corrective="blended-pairwise", iters=12, checkpoint=ckpt, progress=False)
    assert resumed.info["resumed_from"] == 7
    drop_time = [{k: v for k, v in row.items() if k != "time"} for row in resumed.history]
    assert drop_time == [{k: v for k, v in row.items() if k != "time"} for row in full.history]
    assert torch.equal(resumed.x, full.x)


def test_float32_data_run_in_float32():
    problem, x_star, _, _ = face_problem(dtype=torch.float32)
    result = fc.solve(problem, "fw", corrective="away", iters=60, progress=False)
    assert result.x.dtype == torch.float32
    assert np.abs(result.x.numpy() - x_star).max() < 1e-3


def test_away_steps_on_the_catalogs_polytopes_reach_cvxpys_optimum():
    # The CVaR weight set and the Birkhoff polytope: vertices from their LMOs, and the pairwise step's linear rate.
    rng = np.random.default_rng(3)
    for domain, size in ((fc.CappedSimplex(12, 1.0, cap=0.25), 12), (fc.Birkhoff(4), 16)):
        A, b = rng.standard_normal((20, size)), rng.standard_normal(20)
        A_t, b_t = torch.tensor(A), torch.tensor(b)
        problem = fc.CompositeProblem(
            cp.sum_squares(fc.inner_value(20)), lambda x, _, A_t=A_t, b_t=b_t: A_t @ x.reshape(-1) - b_t, domain
        )
        x = cp.Variable(domain.shape)
        best = cp.Problem(cp.Minimize(cp.sum_squares(A @ cp.vec(x, order="C") - b)), domain.cvxpy_constraints(x))
        best.solve(solver="CLARABEL")
        result = fc.solve(problem, "fw", corrective="pairwise", iters=300, gap_tol=1e-9, progress=False)
        assert result.value <= best.value + 1e-6 * max(1.0, abs(best.value)), type(domain).__name__


def test_the_old_option_name_is_an_error_naming_corrective():
    problem, _, _, _ = face_problem()
    with pytest.raises(OptionError, match="no option 'step': it is named 'corrective'"):
        fc.solve(problem, "fw", step="away", iters=2, progress=False)


def test_the_active_set_operations_keep_the_point_and_the_weights():
    """AtomicForm as fw's active set: each step's weights as the box writes them, atoms found again by value."""
    from fullcomp.sets.atoms import AtomicForm

    e = np.eye(3)
    S = AtomicForm.vertex(e[0]).toward(e[1], 0.5).toward(e[2], 0.5)  # weights 1/4, 1/4, 1/2
    assert np.allclose(S.weights(), [0.25, 0.25, 0.5]) and np.allclose(S.point(), [0.25, 0.25, 0.5])
    assert len(S.toward(e[1].copy(), 0.5)) == 3  # a vertex met again is the same atom
    g = np.array([3.0, 1.0, 2.0])
    away, local, scores = S.extremes(g)
    assert (away, local) == (0, 1) and np.allclose(scores, g)
    moved = S.away(away, 1 / 3)  # gamma_max = w_a / (1 - w_a): the away atom's weight reaches 0
    assert np.allclose(moved.weights(), [0.0, 1 / 3, 2 / 3]) and len(moved.pruned()) == 2
    assert np.allclose(moved.pruned().point(), moved.point())
    shifted = S.shift(away, e[1], 0.25)  # a pairwise step of the whole weight of a drops it
    assert np.allclose(shifted.drop(away).weights(), [0.5, 0.5]) and len(shifted.drop(away)) == 2
    scaled = AtomicForm(S.atoms, 2 * S.weights()).renormalized()
    assert np.allclose(scaled.weights(), S.weights())
