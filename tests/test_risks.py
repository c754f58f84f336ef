"""Named risks (fc.cvar, fc.chi2_dro, fc.top_k_mean, fc.entropic_risk, fc.kl_dro, fc.smooth_max,
fc.group_dro, fc.tpauc_cvar, fc.tpauc_kl) and their weights (fc.risk_weights).

Each risk's value is checked against numpy (a closed form where one exists) and against CVXPY solving its sup
form max { q.u - penalty(q) : q in Q } directly, with its own variables; its closed-form weights against the
maximizer of that program and against CVXPY's dual of u == u0 in min F(u); and each risk runs end to end
through the GLMO routes and a few HMSFW iterations.
"""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp, softmax

import fullcomp as fc
from fullcomp.errors import ModelError
from fullcomp.model.calculus import capped_weights

N = 6
N_POS, N_NEG = 2, 3  # the pairwise risks: u holds the 2 x 3 pairwise losses row by row
SIZES = np.array([10.0, 40.0, 5.0, 90.0, 20.0, 60.0])  # group sizes for group_dro


def point(seed: int, n: int = N) -> np.ndarray:
    """A point with distinct entries (so that every risk's weights are unique)."""
    return np.random.default_rng(seed).standard_normal(n)


# ---- references: numpy ---------------------------------------------------------------------------


def tail_mean(w: np.ndarray, alpha: float) -> float:
    """CVaR_alpha by sorting: the mean of the upper alpha-tail, a fractional boundary entry."""
    m = max(alpha * w.size, 1.0)
    s = np.sort(w)[::-1]
    k = int(math.floor(m + 1e-12))
    return float((s[:k].sum() + (m - k) * (s[k] if k < w.size else 0.0)) / m)


def log_mean_exp(w: np.ndarray, lam: float, axis=None) -> np.ndarray:
    return lam * (logsumexp(w / lam, axis=axis) - math.log(w.size if axis is None else w.shape[axis]))


def kl_dual(w: np.ndarray, rho: float) -> float:
    """min_{lam > 0} lam rho + lam log mean exp(w / lam), by a scalar search over log lam."""
    res = minimize_scalar(
        lambda t: math.exp(t) * rho + log_mean_exp(w, math.exp(t)),
        bounds=(-12, 12),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return float(min(res.fun, w.max()))


def libauc_tpauc_kl(L: np.ndarray, lam: float, tau: float) -> tuple[float, np.ndarray]:
    """LibAUC's tpAUC_KL_Loss objective and its per-pair weights p / (n_pos n_neg), with exact averages
    for its moving averages (gammas = 1)."""
    u_pos = np.exp(L / lam).mean(axis=1, keepdims=True)
    w = np.mean(u_pos ** (lam / tau))
    p = u_pos ** (lam / tau - 1) * np.exp(L / lam) / w
    return float(tau * math.log(w)), p / L.size


def numpy_value(name: str, w: np.ndarray) -> float:
    L = w.reshape(N_POS, N_NEG)
    return {
        "cvar": lambda: tail_mean(w, 0.4),
        "top_k_mean": lambda: float(np.sort(w)[-2:].mean()),
        "chi2_dro": lambda: None,  # no closed form; the sup form below is the reference
        "entropic_risk": lambda: float(0.7 * math.log(np.mean(np.exp(w / 0.7)))),
        "kl_dro": lambda: kl_dual(w, 0.3),
        "smooth_max": lambda: float(0.5 * math.log(np.sum(np.exp(w / 0.5)))),
        "group_dro": lambda: float(np.max(w + 0.8 / np.sqrt(SIZES))),
        "tv_dro": lambda: 0.7 * tail_mean(w, 0.7) + 0.3 * float(w.max()),
        "tpauc_cvar": lambda: tail_mean(np.array([tail_mean(row, 0.5) for row in L]), 0.5),
        "tpauc_kl": lambda: libauc_tpauc_kl(L, 0.8, 1.3)[0],
    }[name]()


RISKS = {
    "cvar": lambda u: fc.cvar(u, 0.4),
    "top_k_mean": lambda u: fc.top_k_mean(u, 2),
    "chi2_dro": lambda u: fc.chi2_dro(u, 0.5),
    "entropic_risk": lambda u: fc.entropic_risk(u, 0.7),
    "kl_dro": lambda u: fc.kl_dro(u, 0.3),
    "smooth_max": lambda u: fc.smooth_max(u, 0.5),
    "group_dro": lambda u: fc.group_dro(u, SIZES, 0.8),
    "tv_dro": lambda u: fc.tv_dro(u, 0.3),
    "tpauc_cvar": lambda u: fc.tpauc_cvar(u, N_POS, theta_0=0.5, theta_1=0.5),
    "tpauc_kl": lambda u: fc.tpauc_kl(u, N_POS, lam=0.8, tau=1.3),
}


# ---- references: the sup forms, solved by CVXPY -------------------------------------------------


def sup_form(name: str, w: np.ndarray) -> tuple[float, np.ndarray]:
    """(value, maximizing q) of max { q.w - penalty(q) : q in Q }, written here with CVXPY."""
    n = w.size
    q = cp.Variable(n, nonneg=True)
    simplex = [cp.sum(q) == 1]
    if name in ("tpauc_cvar", "tpauc_kl"):
        # q_ij = p_i r_ij: the product of a weight per positive and one per negative, in the variables
        # (p, Q = q as a matrix) in which the set is convex: sum_j Q_ij = p_i.
        Q, p = cp.reshape(q, (N_POS, N_NEG), order="C"), cp.Variable(N_POS, nonneg=True)
        rows = [cp.sum(Q, axis=1) == p, cp.sum(p) == 1]
        if name == "tpauc_cvar":
            cons = rows + [
                p <= 1 / (0.5 * N_POS),
                Q <= cp.reshape(p, (N_POS, 1), order="C") @ np.ones((1, N_NEG)) / (0.5 * N_NEG),
            ]
            objective = q @ w
        else:
            P = cp.reshape(p, (N_POS, 1), order="C") @ np.ones((1, N_NEG)) / N_NEG
            cons = rows
            objective = (
                q @ w - 0.8 * cp.sum(cp.rel_entr(Q, P)) - 1.3 * cp.sum(cp.rel_entr(p, np.full(N_POS, 1 / N_POS)))
            )
    else:
        cons, objective = simplex, q @ w
        if name == "cvar":
            cons = simplex + [q <= 1 / (0.4 * n)]
        elif name == "top_k_mean":
            cons = simplex + [q <= 1 / 2]
        elif name == "chi2_dro":
            cons = simplex + [(n / 2) * cp.sum_squares(q - 1 / n) <= 0.5]
        elif name == "entropic_risk":
            objective = q @ w - 0.7 * cp.sum(cp.rel_entr(q, np.full(n, 1 / n)))
        elif name == "kl_dro":
            cons = simplex + [cp.sum(cp.rel_entr(q, np.full(n, 1 / n))) <= 0.3]
        elif name == "smooth_max":
            objective = q @ w + 0.5 * cp.sum(cp.entr(q))
        elif name == "group_dro":
            objective = q @ (w + 0.8 / np.sqrt(SIZES))
        elif name == "tv_dro":
            cons = simplex + [0.5 * cp.norm1(q - 1 / n) <= 0.3]
    problem = cp.Problem(cp.Maximize(objective), cons)
    problem.solve(solver="CLARABEL")
    assert problem.status == cp.OPTIMAL
    return float(problem.value), np.asarray(q.value)


def penalty(name: str, q: np.ndarray) -> float:
    """What the sup form subtracts from q.u at q (so that q.u - penalty is the value)."""
    n = q.size
    kl = float(np.sum(q * np.log(np.maximum(n * q, 1e-300))))
    if name == "entropic_risk":
        return 0.7 * kl
    if name == "smooth_max":
        return -0.5 * float(-np.sum(q * np.log(np.maximum(q, 1e-300))))
    if name == "group_dro":
        return -float(q @ (0.8 / np.sqrt(SIZES)))
    if name == "tpauc_kl":
        Q = q.reshape(N_POS, N_NEG)
        p = Q.sum(axis=1)
        r = Q / p[:, None]
        rows = np.sum(r * np.log(np.maximum(N_NEG * r, 1e-300)), axis=1)
        return 0.8 * float(p @ rows) + 1.3 * float(np.sum(p * np.log(N_POS * p)))
    return 0.0


# ---- values --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RISKS))
def test_value_matches_numpy_and_sup_form(name):
    u = fc.inner_value(N)
    expr = RISKS[name](u)
    assert expr.is_dcp() and expr.is_convex()
    for seed in (1, 2):
        w = point(seed)
        u.value = w
        value = float(expr.value)
        reference = numpy_value(name, w)
        if reference is not None:
            assert value == pytest.approx(reference, rel=1e-6, abs=1e-7)
        assert value == pytest.approx(sup_form(name, w)[0], rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("name", list(RISKS))
def test_weights_are_the_sup_forms_maximizer_and_a_subgradient(name):
    u = fc.inner_value(N)
    expr = RISKS[name](u)
    w = point(3)
    u.value = w
    q = fc.risk_weights(expr, w)
    assert q.shape == (N,) and np.all(q >= 0) and q.sum() == pytest.approx(1.0, abs=1e-12)
    # q attains the sup: q.u - penalty(q) is the value (q.u itself for the sup-form risks)
    assert float(q @ w) - penalty(name, q) == pytest.approx(float(expr.value), rel=1e-6, abs=1e-6)  # kl, chi2: solved
    # the maximizer of the sup form, solved by CVXPY
    assert np.allclose(q, sup_form(name, w)[1], atol=2e-5)
    # CVXPY's dual of u == w in min F(u): the generic path of risk_weights, on a copy (which has no closed form)
    plain = RISKS[name](fc.inner_value(N)).copy()
    assert np.allclose(q, fc.risk_weights(plain, w), atol=2e-5)


def test_libauc_tpauc_kl_weights_match():
    w = point(4)
    value, pair_weights = libauc_tpauc_kl(w.reshape(N_POS, N_NEG), 0.8, 1.3)
    u = fc.inner_value(N)
    expr = fc.tpauc_kl(u, N_POS, lam=0.8, tau=1.3)
    u.value = w
    assert float(expr.value) == pytest.approx(value, rel=1e-10)
    assert np.allclose(fc.risk_weights(expr, w), pair_weights.reshape(-1), atol=1e-12)


def test_libauc_tpauc_cvar_threshold_form():
    """LibAUC's tpAUC_CVaR_loss objective minimized over its thresholds s_i, s' is fc.tpauc_cvar."""
    L = point(5, 12).reshape(3, 4)
    theta_0, theta_1 = 0.6, 0.3
    s, s0 = cp.Variable(3), cp.Variable()
    g = s + cp.sum(cp.pos(L - cp.reshape(s, (3, 1), order="C") @ np.ones((1, 4))), axis=1) / (theta_1 * 4)
    problem = cp.Problem(cp.Minimize(s0 + cp.sum(cp.pos(g - s0)) / (theta_0 * 3)))
    problem.solve(solver="CLARABEL")
    u = fc.inner_value(12)
    expr = fc.tpauc_cvar(u, 3, theta_0=theta_0, theta_1=theta_1)
    u.value = L.reshape(-1)
    assert float(expr.value) == pytest.approx(problem.value, rel=1e-7)
    q = fc.risk_weights(expr, L.reshape(-1))
    assert float(q @ L.reshape(-1)) == pytest.approx(float(expr.value), rel=1e-12)


def test_ends_and_relations():
    w = point(6)
    u = fc.inner_value(N)
    pairs = [
        (fc.top_k_mean(u, 1), w.max()),
        (fc.top_k_mean(u, N), w.mean()),
        (fc.kl_dro(u, 0.0), w.mean()),
        (fc.kl_dro(u, math.log(N)), w.max()),
        (fc.group_dro(u, SIZES, 0.0), w.max()),
        (fc.top_k_mean(u, 3) - fc.cvar(u, 0.5), 0.0),
        (fc.smooth_max(u, 0.3) - fc.entropic_risk(u, 0.3), 0.3 * math.log(N)),
        (fc.tpauc_cvar(u, N_POS, 1.0, 1.0), w.mean()),
    ]
    u.value = w
    for expr, expected in pairs:
        assert float(expr.value) == pytest.approx(expected, rel=1e-6, abs=1e-6)
    for lam in (0.05, 1.0, 20.0):
        smooth = float(fc.smooth_max(u, lam).value)
        assert w.max() <= smooth <= w.max() + lam * math.log(N) + 1e-12
        assert w.mean() - 1e-12 <= float(fc.entropic_risk(u, lam).value) <= w.max() + 1e-12
    # weights in closed form: softmax for the entropic risks, the top entries for the tails
    assert np.allclose(fc.risk_weights(fc.entropic_risk(u, 0.7), w), softmax(w / 0.7), atol=1e-15)
    assert np.allclose(fc.risk_weights(fc.smooth_max(u, 0.7), w), softmax(w / 0.7), atol=1e-15)
    top3 = np.isin(np.arange(N), np.argsort(w)[-3:]) / 3
    assert np.allclose(fc.risk_weights(fc.top_k_mean(u, 3), w), top3)
    assert np.allclose(fc.risk_weights(fc.cvar(u, 0.5), w), top3)
    # weights at the ends: uniform on the tied maximizers, the uniform mean
    tied = np.array([1.0, 3.0, 3.0, 0.0, -1.0, 2.0])
    assert np.allclose(fc.risk_weights(fc.kl_dro(u, 5.0), tied), [0, 0.5, 0.5, 0, 0, 0])
    assert np.allclose(fc.risk_weights(fc.chi2_dro(u, 5.0), tied), [0, 0.5, 0.5, 0, 0, 0])
    assert np.allclose(fc.risk_weights(fc.kl_dro(u, 0.0), tied), 1 / N)
    assert np.allclose(fc.risk_weights(fc.top_k_mean(u, 2), tied), [0, 0.5, 0.5, 0, 0, 0])
    assert np.allclose(fc.risk_weights(fc.top_k_mean(u, 1), tied), [0, 0.5, 0.5, 0, 0, 0])
    assert np.allclose(capped_weights(tied, 2.5), [0, 0.4, 0.4, 0, 0, 0.2])


def test_risk_weights_takes_problems_tensors_and_any_outer():
    A = torch.tensor(np.random.default_rng(7).standard_normal((N, 5)))
    problem = fc.CompositeProblem(fc.kl_dro(fc.inner_value(N), 0.3), lambda x, batch: A @ x, fc.Simplex(5))
    w = point(8)
    q = fc.risk_weights(problem, torch.tensor(w))
    assert np.allclose(q, sup_form("kl_dro", w)[1], atol=2e-5)
    u = fc.inner_value(N)
    assert np.allclose(fc.risk_weights(2.0 * cp.max(u), w), 2.0 * (w == w.max()), atol=1e-6)
    with pytest.raises(ModelError, match="u_value must be a finite vector of length 6"):
        fc.risk_weights(cp.max(u), np.ones(5))
    with pytest.raises(ModelError, match="one fc.inner_value placeholder alone"):
        fc.risk_weights(cp.max(u) + cp.norm(cp.Variable(2)), w)


# ---- parameters ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda u: fc.entropic_risk(u, 0.0), "entropic_risk lam must be a temperature > 0"),
        (lambda u: fc.smooth_max(u, -1.0), "smooth_max lam must be a temperature > 0"),
        (lambda u: fc.smooth_max(u, float("nan")), "smooth_max lam must be finite"),
        (lambda u: fc.kl_dro(u, -0.1), "kl_dro rho must be a radius >= 0"),
        (lambda u: fc.top_k_mean(u, 0), r"top_k_mean k must be an int in 1\.\.6"),
        (lambda u: fc.top_k_mean(u, 7), r"top_k_mean k must be an int in 1\.\.6"),
        (lambda u: fc.top_k_mean(u, 2.0), r"top_k_mean k must be an int"),
        (lambda u: fc.group_dro(u, SIZES, -1.0), "group_dro C must be >= 0"),
        (lambda u: fc.group_dro(u, np.ones(5), 1.0), "group_dro group_sizes needs one size per entry"),
        (lambda u: fc.group_dro(u, -SIZES, 1.0), "group_dro group_sizes must be finite and > 0"),
        (lambda u: fc.tpauc_cvar(u, 4), "tpauc_cvar n_pos must be an int dividing n = 6"),
        (lambda u: fc.tpauc_cvar(u, 2, theta_0=0.0), r"tpauc_cvar theta_0 must lie in \(0, 1\]"),
        (lambda u: fc.tpauc_cvar(u, 2, theta_1=1.5), r"tpauc_cvar theta_1 must lie in \(0, 1\]"),
        (lambda u: fc.tpauc_kl(u, 2, tau=0.0), "tpauc_kl tau must be a temperature > 0"),
        (lambda u: fc.tpauc_kl(u, 2, lam="a"), "tpauc_kl lam must be a number"),
        (lambda u: fc.kl_dro(cp.Variable((2, 3)), 0.1), "kl_dro needs a 1-D"),
    ],
)
def test_parameters_are_validated(make, match):
    with pytest.raises(ModelError, match=match):
        make(fc.inner_value(N))


# ---- end to end ----------------------------------------------------------------------------------


def composite(name: str) -> fc.CompositeProblem:
    rng = np.random.default_rng(11)
    A = torch.tensor(rng.standard_normal((N, 5)))
    b = torch.tensor(rng.standard_normal(N))
    return fc.CompositeProblem(RISKS[name](fc.inner_value(N)), lambda x, batch: A @ x - b, fc.Simplex(5))


@pytest.mark.parametrize("name", [n for n in RISKS if n not in ("cvar", "chi2_dro")])
def test_glmo_routes_and_hmsfw_run(name):
    problem = composite(name)
    rng = np.random.default_rng(12)
    z, V, y = rng.standard_normal(N), rng.standard_normal((N, 5)), np.full(5, 0.2)
    conic = fc.build_glmo(problem.outer, problem.domain, route="conic").solve(z, V, y)
    colgen = fc.build_glmo(problem.outer, problem.domain)  # auto: column generation on the simplex
    assert colgen.route == "colgen"
    answer = colgen.solve(z, V, y, tol=1e-6)
    assert answer.converged and answer.value == pytest.approx(conic.value, abs=1e-5)
    assert problem.domain.contains(answer.x, tol=1e-8)
    res = fc.solve(problem, "hmsfw", iters=5, progress=False)
    assert np.isfinite(problem.objective(res.x))
    assert problem.objective(res.x) <= problem.objective(problem.x0) + 1e-6


# ---- risks at their extremes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda u: fc.entropic_risk(u, 5e-324), r"entropic_risk lam must be at least 1e-150"),
        (lambda u: fc.smooth_max(u, 1e-320), r"smooth_max lam must be at least 1e-150"),
        (lambda u: fc.group_dro(u, "abcdef", 1.0), "group_dro group_sizes must be numbers"),
        (lambda u: fc.group_dro(u, [object()] * 6, 1.0), "group_dro group_sizes must be numbers"),
        (lambda u: fc.tv_dro(u, 1.5), r"tv_dro eps must lie in \[0, 1\]"),
    ],
)
def test_parameters_float64_cannot_carry_are_refused(make, match):
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        with pytest.raises(ModelError, match=match):
            make(fc.inner_value(N))


def _extremes(lam: float, w: np.ndarray) -> float:
    """lam log mean exp(w / lam) by its series about the mean, for lam far above the spread of w."""
    c = w - w.mean()
    return float(w.mean() + np.mean(c**2) / (2 * lam) + np.mean(c**3) / (6 * lam) / lam)


@pytest.mark.parametrize("lam", [1e6, 1e12, 1e16, 1e300])
def test_entropic_risk_at_a_large_temperature_is_the_mean_plus_the_variance_term(lam):
    u = fc.inner_value(3)
    w = np.array([0.2, 0.5, 0.9])
    F = fc.entropic_risk(u, lam)
    u.value = w
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        assert float(F.value) == pytest.approx(_extremes(lam, w), rel=1e-14)
        assert fc.model.calculus.closed_form(F).value_at(w) == pytest.approx(_extremes(lam, w), rel=1e-14)
        q = fc.risk_weights(F, w)
    assert np.allclose(q, softmax(w / lam), rtol=1e-14, atol=0)


@pytest.mark.parametrize("lam", [1e-150, 1e-30, 1e-3])
def test_small_temperatures_are_the_max_with_no_overflow(lam):
    u = fc.inner_value(4)
    w = np.array([0.2, 0.5, 0.9, -3e5])
    for F, shift in ((fc.entropic_risk(u, lam), -lam * math.log(4)), (fc.smooth_max(u, lam), 0.0)):
        u.value = w
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            value, q = float(F.value), fc.risk_weights(F, w)
        assert value == pytest.approx(0.9 + shift + lam * math.log1p(math.exp(-0.4 / lam)), rel=1e-15, abs=0)
        assert q[2] == pytest.approx(1.0, abs=1e-15) and np.all(q >= 0)


@pytest.mark.parametrize("rho", [1e-14, 1e-11, 1e-9])
@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_kl_dro_at_a_small_radius_is_the_mean_plus_the_deviation_term(rho, scale):
    u = fc.inner_value(3)
    w = scale * np.array([0.2, 0.5, 0.9])
    F = fc.kl_dro(u, rho)
    u.value = w
    value, q = float(F.value), fc.risk_weights(F, w)
    assert value == pytest.approx(w.mean() + math.sqrt(2 * rho * np.var(w)), rel=1e-8)
    assert float(q @ w) == pytest.approx(value, rel=1e-12)
    assert float(np.sum(q * np.log(3 * q))) == pytest.approx(rho, rel=1e-6)


def test_kl_dro_value_is_closed_form_on_the_data_that_failed(monkeypatch):
    """u in [-3.7, 1.0], 1,000 entries: the conic solve of F's value failed; the closed form and SCS agree."""
    from fullcomp import solvers

    w = np.random.default_rng(3).uniform(-3.7, 1.0, 1000)
    u = fc.inner_value(w.size)
    F = fc.kl_dro(u, 0.1)
    u.value = w
    monkeypatch.setattr(solvers, "solve", lambda *a, **k: (_ for _ in ()).throw(AssertionError("a conic solve")))
    value = float(F.value)
    monkeypatch.undo()
    q = cp.Variable(w.size, nonneg=True)
    sup = cp.Problem(cp.Maximize(q @ w), [cp.sum(q) == 1, cp.sum(cp.rel_entr(q, np.full(w.size, 1 / w.size))) <= 0.1])
    sup.solve(solver=cp.SCS, eps=1e-9)
    assert value == pytest.approx(sup.value, rel=1e-5)
    assert value == pytest.approx(kl_dual(w, 0.1), rel=1e-9)


@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0])
def test_tv_dro_is_the_total_variation_ball_sup(eps):
    u = fc.inner_value(N)
    F = fc.tv_dro(u, eps)
    w = point(21)
    u.value = w
    q = cp.Variable(N, nonneg=True)
    sup = cp.Problem(cp.Maximize(q @ w), [cp.sum(q) == 1, 0.5 * cp.norm1(q - 1 / N) <= eps])
    sup.solve(solver=cp.CLARABEL)
    assert float(F.value) == pytest.approx(sup.value, abs=1e-7)
    weights = fc.risk_weights(F, w)
    assert float(weights @ w) == pytest.approx(sup.value, abs=1e-7)
    assert 0.5 * np.abs(weights - 1 / N).sum() <= eps + 1e-12 and weights.sum() == pytest.approx(1.0)
    assert fc.model.calculus.named_risk(F) == ("tv_dro", {"eps": eps})


# ---- Wasserstein risks of linear models --------------------------------------------------------------


def _margin_data(n: int = 12, d: int = 3, seed: int = 31) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X, w = rng.standard_normal((n, d)), rng.standard_normal(d)
    return X, np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0), w


def _hinge(m: np.ndarray) -> np.ndarray:
    return np.maximum(1.0 - m, 0.0)


@pytest.mark.parametrize("p", [1.0, 2.0, math.inf])
def test_wasserstein_dro_is_attained_by_moving_one_sample(p):
    """Without label moves, F = mean(l) + eps ||w||_*: a distribution eps away attains it, moving one sample
    whose hinge is active by n eps along the direction where <w, .> reaches ||w||_* (the primal side)."""
    X, y, w = _margin_data()
    ball = fc.L2Ball(3, 10.0)
    u = fc.inner_value(X.shape[0])
    F = fc.wasserstein_dro(u, 0.05, ball.variable, norm=p)
    problem = fc.CompositeProblem(F, lambda x, batch: torch.relu(1 - torch.tensor(y) * (torch.tensor(X) @ x)), ball)
    value = problem.objective(torch.tensor(w))
    q = {1.0: math.inf, 2.0: 2.0, math.inf: 1.0}[p]
    assert value == pytest.approx(_hinge(y * (X @ w)).mean() + 0.05 * np.linalg.norm(w, q), rel=1e-12)
    # the primal worst case: sample i (active hinge) moved by n eps d, ||d||_p = 1, <w, d> = ||w||_q
    i = int(np.flatnonzero(y * (X @ w) < 1)[0])
    if p == 1.0:
        d = np.eye(3)[np.argmax(np.abs(w))] * np.sign(w[np.argmax(np.abs(w))])
    elif p == 2.0:
        d = w / np.linalg.norm(w)
    else:
        d = np.sign(w)
    moved = X.copy()
    moved[i] -= y[i] * X.shape[0] * 0.05 * d
    assert _hinge(y * (moved @ w)).mean() == pytest.approx(value, rel=1e-12)


def test_wasserstein_dro_with_a_label_cost_matches_its_one_dimensional_dual():
    """With label flips at cost kappa, F = min_{lam >= ||w||_2} lam eps + mean(max(l_i, l_i^flipped - lam kappa)),
    against a scan of the piecewise-linear function of lam over its breakpoints (numpy), and the GLMO's conic
    route against CVXPY solving the same problem."""
    X, y, w = _margin_data()
    n, eps, kappa = X.shape[0], 0.1, 0.7
    ball = fc.L2Ball(3, 2.0)
    u = fc.inner_value(2 * n)
    F = fc.wasserstein_dro(u, eps, ball.variable, label_cost=kappa)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    problem = fc.CompositeProblem(
        F, lambda x, batch: torch.cat([torch.relu(1 - yt * (Xt @ x)), torch.relu(1 + yt * (Xt @ x))]), ball
    )
    at, flipped = _hinge(y * (X @ w)), _hinge(-y * (X @ w))
    lo = np.linalg.norm(w)
    candidates = np.concatenate([[lo], (flipped - at) / kappa])
    candidates = candidates[candidates >= lo]
    reference = min(lam * eps + np.maximum(at, flipped - lam * kappa).mean() for lam in candidates)
    assert problem.objective(torch.tensor(w)) == pytest.approx(reference, rel=1e-6, abs=1e-7)
    with pytest.raises(ModelError, match="needs u of 2n losses"):
        fc.wasserstein_dro(fc.inner_value(5), eps, ball.variable, label_cost=kappa)
    with pytest.raises(ModelError, match="weights must be the CVXPY expression"):
        fc.wasserstein_dro(u, eps, np.ones(3))
    with pytest.raises(ModelError, match="norm must be p >= 1"):
        fc.wasserstein_dro(u, eps, ball.variable, norm=0.5)
    res = fc.hmsfw(problem, iters=4, progress=False)
    assert res.info["glmo_route"] == "conic" and math.isfinite(problem.objective(res.x))
