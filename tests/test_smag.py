"""SMAG against answers found independently: hand-derived critical points, CVXPY, grid searches."""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc

F64 = torch.float64

# -- DWC: phi(x) = ||x||_1 + ||x||^2/2, psi(x) = |a^T x - b| -------------------------------------------
#
# Critical points (0 in d phi(x) - d psi(x)): where a^T x > b, d psi = {a} and a in sign(x) + x gives
# x = soft(a, 1) = (1, -2, 0), with a^T x = 8 > 1, consistent.  Where a^T x < b, x = -soft(a, 1) =
# (-1, 2, 0), a^T x = -8 < 1, consistent.  F_gamma is stationary at x* + gamma v (v the common
# subgradient, +a or -a), and prox_{gamma Phi} = prox_{gamma Psi} = x* there.

A_DWC = torch.tensor([2.0, -3.0, 0.5], dtype=F64)
B_DWC = 1.0
X_PLUS = torch.tensor([1.0, -2.0, 0.0], dtype=F64)
X_MINUS = -X_PLUS


def dwc_phi(x, batch):
    noise = 0.0 if batch is None else batch[0].to(x) @ x
    return x.abs().sum() + 0.5 * x @ x + noise


def dwc_psi(x, batch):
    noise = 0.0 if batch is None else batch[1].to(x) @ x
    return (A_DWC.to(x) @ x - B_DWC).abs() + noise


def noise_sampler(generator):
    return 0.2 * torch.randn(2, 3, generator=generator, dtype=F64)


def dwc_problem(x0, stochastic=False):
    if stochastic:
        return fc.DMaxProblem(
            dwc_phi, dwc_psi, x0=torch.tensor(x0), sampler=noise_sampler, full_batch=torch.zeros(2, 3, dtype=F64)
        )
    return fc.DMaxProblem(dwc_phi, dwc_psi, x0=torch.tensor(x0))


def soft(v, t):
    return torch.sign(v) * torch.clamp(v.abs() - t, min=0)


def dwc_grad_envelope(v, gamma):
    """grad F_gamma(v) from the closed-form proximal maps of both components."""
    prox_phi = soft(v, gamma) / (1 + gamma)
    s = torch.clamp((A_DWC @ v - B_DWC) / (gamma * A_DWC @ A_DWC), -1, 1)
    prox_psi = v - gamma * s * A_DWC
    return (prox_psi - prox_phi) / gamma, prox_phi, prox_psi


def test_stationarity_matches_closed_form_proximal_maps():
    problem = dwc_problem([0.0, 0.0, 0.0])
    rng = np.random.default_rng(3)
    for gamma in (0.3, 0.5):
        for _ in range(2):
            v = torch.tensor(rng.normal(scale=2.0, size=3))
            expected, prox_phi, prox_psi = dwc_grad_envelope(v, gamma)
            got = fc.stationarity(problem, v, gamma)
            assert isinstance(got, float)
            # The certified bound holds and is small.
            assert abs(float(got) - float(expected.norm())) <= got.error_bound + 1e-12
            assert got.error_bound < 1e-4
            assert torch.allclose(got.prox_phi, prox_phi, atol=1e-5)
            assert torch.allclose(got.prox_psi, prox_psi, atol=1e-5)


def test_dwc_stochastic_reaches_hand_derived_critical_point():
    gamma = 0.5
    problem = dwc_problem([1.0, -1.0, 1.0], stochastic=True)
    res = fc.smag(problem, gamma=gamma, eta0=0.1, eta1=0.05, iters=800, seed=0, progress=False, dtype=F64)
    assert res.info["algorithm"] == 2 and res.y is None and res.z is None
    assert torch.linalg.vector_norm(res.x_phi - X_PLUS) < 0.15
    assert torch.linalg.vector_norm(res.x_psi - X_PLUS) < 0.15
    assert torch.linalg.vector_norm(res.x - (X_PLUS + gamma * A_DWC)) < 0.2
    measure = fc.stationarity(problem, res.x, gamma)  # on full_batch: the exact phi and psi
    assert measure < 0.2
    assert torch.linalg.vector_norm(measure.prox_phi - X_PLUS) < 0.1


def test_dwc_deterministic_other_basin():
    gamma = 0.5
    problem = dwc_problem([-1.0, 1.0, 0.0])
    res = fc.smag(problem, gamma=gamma, eta0=0.2, eta1=0.05, iters=400, progress=False, dtype=F64)
    assert torch.linalg.vector_norm(res.x_phi - X_MINUS) < 0.06
    assert torch.linalg.vector_norm(res.x - (X_MINUS - gamma * A_DWC)) < 0.06
    assert fc.stationarity(problem, res.x, gamma) < 0.1
    # The row fields the issue asks for, and exact values in the final row of a deterministic run.
    assert {"k", "time", "phi_value", "psi_value", "grad_estimate_norm"} <= set(res.history[0])
    last = res.history[-1]
    x_phi = res.x_phi
    assert last["phi_value"] == pytest.approx(float(dwc_phi(x_phi, None)))


def test_first_step_is_the_papers_update():
    x0 = torch.tensor([1.0, -1.0, 1.0], dtype=F64)
    gamma, eta0, eta1 = 0.5, 0.2, 0.1
    opt = fc.Stepper(dwc_problem(x0.tolist()), "smag", gamma=gamma, eta0=eta0, eta1=eta1, dtype=F64)
    row = opt.step()
    # x_phi^0 = x_psi^0 = x_0, so the proximal term vanishes in the first step.
    x_phi = x0 - eta1 * (torch.sign(x0) + x0)
    x_psi = x0 - eta1 * A_DWC * math.copysign(1.0, float(A_DWC @ x0 - B_DWC))
    G = (x_psi - x_phi) / gamma
    assert torch.allclose(opt.outputs["x_phi"], x_phi) and torch.allclose(opt.outputs["x_psi"], x_psi)
    assert torch.allclose(opt.x, x0 - eta0 * G)
    assert row["grad_estimate_norm"] == pytest.approx(float(G.norm()))
    assert row["phi_value"] == pytest.approx(float(dwc_phi(x0, None)))


# -- WCSC: phi(x, y) = |a^T x - b| + y c^T x - mu/2 y^2 + rho/2 ||x||^2, y in [-1, 1] -----------------
#
# max over |y| <= 1 of y t - mu/2 y^2 is t^2/(2 mu) for |t| <= mu and |t| - mu/2 beyond, i.e.
# cp.huber(t, mu) / (2 mu).  CVXPY minimizes the closed-form Phi (the ridge makes the minimizer unique).

A_W = np.array([1.0, 2.0, -1.0])
C_W = np.array([1.0, 1.0, 1.0])
B_W, MU, RHO = 3.0, 0.5, 2.0


def wcsc_phi(x, y, batch):
    a, c = torch.as_tensor(A_W).to(x), torch.as_tensor(C_W).to(x)
    noise = 0.0 if batch is None else batch.to(x) @ x
    return (a @ x - B_W).abs() + y[0] * (c @ x) - MU / 2 * y[0] ** 2 + RHO / 2 * x @ x + noise


def wcsc_Phi_cvxpy(x):
    return cp.abs(A_W @ x - B_W) + cp.huber(C_W @ x, MU) / (2 * MU) + RHO / 2 * cp.sum_squares(x)


def test_wcsc_reaches_cvxpy_minimizer():
    x = cp.Variable(3)
    cp.Problem(cp.Minimize(wcsc_Phi_cvxpy(x))).solve()
    x_star = torch.tensor(x.value)
    problem = fc.DMaxProblem(
        wcsc_phi,
        x0=torch.zeros(3),
        y0=torch.zeros(1),
        Y=fc.Box(-1, 1, shape=(1,)),
        sampler=lambda g: 0.2 * torch.randn(3, generator=g, dtype=F64),
        full_batch=torch.zeros(3, dtype=F64),
    )
    gamma = 1.0
    res = fc.smag(problem, gamma=gamma, eta0=0.3, eta1=0.1, iters=800, seed=1, progress=False, dtype=F64)
    assert res.info["algorithm"] == 3 and res.x_psi is None and res.z is None
    assert torch.linalg.vector_norm(res.x - x_star) < 0.1
    assert torch.linalg.vector_norm(res.x_phi - x_star) < 0.12
    # y tracks y*(x) = clip(c^T x / mu, -1, 1) at the minimizer (0.5 here, inside the box).
    assert abs(float(res.y[0]) - float(np.clip(C_W @ x.value / MU, -1, 1))) < 0.1
    assert fc.stationarity(problem, res.x, gamma) < 0.1


def test_wcsc_unconstrained_dual_matches_cvxpy():
    """Y = None: the ridge in y makes the maximum finite, Phi = |a^T x - b| + (c^T x)^2/(2 mu) + rho/2 ||x||^2."""
    x = cp.Variable(3)
    cp.Problem(cp.Minimize(cp.abs(A_W @ x - B_W) + cp.square(C_W @ x) / (2 * MU) + RHO / 2 * cp.sum_squares(x))).solve()
    problem = fc.DMaxProblem(wcsc_phi, x0=torch.zeros(3), y0=torch.zeros(1))
    res = fc.smag(problem, gamma=1.0, eta0=0.3, eta1=0.1, iters=400, progress=False, dtype=F64)
    assert torch.linalg.vector_norm(res.x - torch.tensor(x.value)) < 0.02
    assert float(res.y[0]) == pytest.approx(float(C_W @ x.value / MU), abs=0.02)


def test_convex_set_dual_follows_the_box_trajectory():
    """Y as a fc.ConvexSet from CVXPY constraints projects like the equivalent fc.Box."""
    box = fc.DMaxProblem(wcsc_phi, x0=torch.zeros(3), y0=torch.zeros(1), Y=fc.Box(-0.3, 0.3, shape=(1,)))
    convex = fc.DMaxProblem(
        wcsc_phi, x0=torch.zeros(3), y0=torch.zeros(1), Y=fc.ConvexSet((1,), lambda v: [cp.abs(v) <= 0.3])
    )
    opts = dict(gamma=1.0, eta0=0.3, eta1=0.1, iters=25, progress=False, dtype=F64)
    a, b = fc.smag(box, **opts), fc.smag(convex, **opts)
    assert torch.allclose(a.x, b.x, atol=1e-6) and torch.allclose(a.y, b.y, atol=1e-6)
    assert float(a.y[0]) == pytest.approx(0.3)  # the constraint is active: a real projection happened


def test_stationarity_prox_of_a_max_matches_cvxpy():
    problem = fc.DMaxProblem(wcsc_phi, x0=torch.zeros(3), y0=torch.zeros(1), Y=fc.Box(-1, 1, shape=(1,)))
    gamma = 0.7
    v = np.array([0.5, -1.0, 2.0])
    x = cp.Variable(3)
    cp.Problem(cp.Minimize(wcsc_Phi_cvxpy(x) + cp.sum_squares(x - v) / (2 * gamma))).solve()
    got = fc.stationarity(problem, torch.tensor(v), gamma)
    assert np.allclose(got.prox_phi.numpy(), x.value, atol=1e-4)
    # Without psi, grad F_gamma(v) = (v - prox)/gamma.
    assert float(got) == pytest.approx(np.linalg.norm(v - x.value) / gamma, abs=1e-4)


# -- Full DMax in 2-D, against a grid search of F_gamma ----------------------------------------------
#
# phi(x, y) = ||x||^2/2 + |x_1 - 0.3| + y^T M x - mu/2 ||y||^2, y in the unit disc
# psi(x, z) = z b^T x - nu/2 z^2, z in [-1, 1]

M_D = np.array([[1.0, 0.5], [0.0, 1.0]])
B_D = np.array([2.0, 1.0])
MU_D, NU_D, GAMMA_D = 1.0, 0.5, 0.5


def dmax_phi(x, y, batch):
    return 0.5 * x @ x + (x[0] - 0.3).abs() + y @ (torch.as_tensor(M_D).to(x) @ x) - MU_D / 2 * y @ y


def dmax_psi(x, z, batch):
    return z[0] * (torch.as_tensor(B_D).to(x) @ x) - NU_D / 2 * z[0] ** 2


def grid_critical_points(h=0.02, half=3.0):
    """Local minima of F_gamma = Phi_gamma - Psi_gamma on a grid, the envelopes by exact inf-convolution."""
    g = np.arange(-half, half + h / 2, h)
    P = np.stack(np.meshgrid(g, g, indexing="ij"), -1)
    MP = P @ M_D.T
    Y = MP / MU_D
    Y = Y / np.maximum(1.0, np.linalg.norm(Y, axis=-1, keepdims=True))
    Phi = 0.5 * (P**2).sum(-1) + np.abs(P[..., 0] - 0.3) + (Y * MP).sum(-1) - MU_D / 2 * (Y**2).sum(-1)
    t = P @ B_D
    z = np.clip(t / NU_D, -1, 1)
    Psi = z * t - NU_D / 2 * z**2
    D = (g[:, None] - g[None, :]) ** 2 / (2 * GAMMA_D)

    def envelope(V):  # ||x - x'||^2 separates: minimize over x2', then over x1'
        T = np.stack([(row[:, None] + D).min(0) for row in V])
        return np.stack([(T[:, j][:, None] + D).min(0) for j in range(len(g))], axis=1)

    F = envelope(Phi) - envelope(Psi)
    n = len(g)
    C = F[1:-1, 1:-1]
    is_min = np.ones_like(C, bool)
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            if di or dj:
                is_min &= C <= F[1 + di : n - 1 + di, 1 + dj : n - 1 + dj]
    return np.array([(g[i + 1], g[j + 1]) for i, j in np.argwhere(is_min)])


def dmax_problem(x0):
    return fc.DMaxProblem(
        dmax_phi,
        dmax_psi,
        x0=torch.tensor(x0),
        y0=torch.zeros(2),
        z0=torch.zeros(1),
        Y=fc.L2Ball(2, 1.0),
        Z=fc.Box(-1, 1, shape=(1,)),
    )


def test_dmax_2d_matches_grid_search_of_envelope():
    minima = grid_critical_points()
    assert len(minima) >= 2
    for x0 in ([1.0, 1.0], [-1.0, -1.0]):
        problem = dmax_problem(x0)
        res = fc.smag(problem, gamma=GAMMA_D, eta0=0.25, eta1=0.25, iters=300, progress=False, dtype=F64)
        assert res.info["algorithm"] == 1
        distance = np.linalg.norm(minima - res.x.numpy(), axis=1).min()
        assert distance < 0.05, (res.x, minima)
        assert np.sign(float(res.x[0])) == np.sign(x0[0])  # the critical point of the start's basin
        measure = fc.stationarity(problem, res.x, GAMMA_D)
        assert measure < 1e-3
        assert torch.allclose(res.x_phi, measure.prox_phi, atol=1e-3)
        assert torch.allclose(res.x_psi, measure.prox_psi, atol=1e-3)
        # y and z are the maximizers at the proximal point: P_Y(M x'/mu) and clip(b^T x'/nu).
        xp = measure.prox_phi.numpy()
        y_star = M_D @ xp / MU_D
        y_star /= max(1.0, np.linalg.norm(y_star))
        assert np.allclose(res.y.numpy(), y_star, atol=1e-3)
        assert float(res.z[0]) == pytest.approx(float(np.clip(B_D @ xp / NU_D, -1, 1)), abs=1e-3)


# -- the cutting-plane master against CVXPY -------------------------------------------------------------


def test_simplex_qp_matches_cvxpy():
    import sys

    simplex_qp = sys.modules["fullcomp.stationarity"].simplex_qp
    rng = np.random.default_rng(0)
    for m, n in ((4, 2), (9, 3), (12, 20)):
        B = rng.normal(size=(m, n))
        B[1] = B[0]  # a repeated cut: the Gram matrix is singular
        c = rng.normal(size=m)
        Q = B @ B.T
        lam = cp.Variable(m)
        ref = cp.Problem(cp.Maximize(c @ lam - 0.5 * cp.sum_squares(B.T @ lam)), [lam >= 0, cp.sum(lam) == 1])
        ref.solve()
        got = simplex_qp(Q, c)
        assert np.all(got >= 0) and got.sum() == pytest.approx(1.0)
        assert c @ got - 0.5 * got @ Q @ got == pytest.approx(ref.value, abs=1e-7)
