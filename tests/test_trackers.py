"""Accelerated Jacobian trackers (STORM, Hessian-corrected), the theory schedules and the noise models."""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest
import torch
from torch.func import jacrev

import fullcomp as fc
from fullcomp.errors import OptionError
from fullcomp.schedules import Schedule, k_offset, theta_taylor
from fullcomp.trackers import hessian_contraction, hessian_corrected, polyak, segment_point, storm
from fullcomp_lab import noise

N, D = 3, 6
RNG = np.random.default_rng(11)
A = torch.tensor(RNG.standard_normal((N, D)))
B = torch.tensor(RNG.standard_normal(N))


def jacobian(f, x: torch.Tensor, batch=None) -> torch.Tensor:
    return jacrev(lambda v: f(v, batch))(x)


# ---------------------------------------------------------------- Hessian correction


def contractions(f, W: torch.Tensor, d: torch.Tensor, batches) -> torch.Tensor:
    """hessian_contraction at each row of W (with its own batch when ``batches`` is a tensor), vectorized."""
    if batches is None:
        return torch.func.vmap(lambda w: hessian_contraction(f, (D,), w, d, None))(W)
    return torch.func.vmap(lambda w, b: hessian_contraction(f, (D,), w, d, b))(W, batches)


def random_symmetric(n: int, d: int, g: torch.Generator) -> torch.Tensor:
    M = torch.randn(n, d, d, generator=g, dtype=torch.float64)
    return (M + M.transpose(1, 2)) / 2


def quadratic(x: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """f_i(x) = x^T Q_i x / 2: the Jacobian is linear in x, the Hessian constant."""
    return 0.5 * torch.einsum("i,nij,j->n", x, Q, x)


def test_hessian_correction_on_a_quadratic_is_exact_at_every_point():
    g = torch.Generator().manual_seed(0)
    Q = random_symmetric(N, D, g)
    y_prev, y = torch.randn(D, generator=g, dtype=torch.float64), torch.randn(D, generator=g, dtype=torch.float64)
    d = y - y_prev
    change = jacobian(quadratic, y, Q) - jacobian(quadratic, y_prev, Q)
    for alpha in (0.0, 0.3, 1.0):
        H = hessian_contraction(quadratic, (D,), y_prev + alpha * d, d, Q)
        assert H.shape == (N, D)
        assert torch.allclose(H, change, atol=1e-12)


@pytest.mark.parametrize("law", [(1.0, 1.0), (0.5, 0.5)])
def test_hessian_correction_is_unbiased_over_a_sampled_quadratic_family(law):
    # Sample maps x^T Q_xi x / 2 with E[Q_xi] = Q: E over xi' and alpha of weight * H(w; xi')[d] = J(y) - J(y_prev).
    g = torch.Generator().manual_seed(1)
    Q = random_symmetric(N, D, g)
    y_prev, y = torch.randn(D, generator=g, dtype=torch.float64), torch.randn(D, generator=g, dtype=torch.float64)
    d = y - y_prev
    change = jacobian(quadratic, y, Q) - jacobian(quadratic, y_prev, Q)
    draws = 2000
    Q_xi = Q + random_symmetric(draws * N, D, g).reshape(draws, N, D, D)  # unbiased sample Hessians
    alpha, weight = (torch.as_tensor(v) for v in segment_point(torch.rand(draws, generator=g).double().numpy(), law))
    draws = weight[:, None, None] * contractions(quadratic, y_prev[None] + alpha[:, None] * d, d, Q_xi)
    z = (draws.mean(0) - change) / (draws.std(0) / math.sqrt(len(draws)))
    assert z.abs().max() < 4.5  # 18 entries, each within a few standard errors


def cubic(x: torch.Tensor, batch=None) -> torch.Tensor:
    """f_i(x) = (a_i^T x)^3 / 6 + sin(a_i^T x): the Hessian changes along the segment."""
    t = A @ x
    return t**3 / 6 + torch.sin(t)


@pytest.mark.parametrize("law", [(1.0, 1.0), (0.5, 0.5), (1.0, 0.5)])
def test_hessian_correction_on_a_cubic_matches_only_in_expectation(law):
    g = torch.Generator().manual_seed(2)
    y_prev = 0.5 * torch.randn(D, generator=g, dtype=torch.float64)
    d = 0.5 * torch.randn(D, generator=g, dtype=torch.float64)
    change = jacobian(cubic, y_prev + d) - jacobian(cubic, y_prev)
    at_start = hessian_contraction(cubic, (D,), y_prev, d, None)
    assert (at_start - change).abs().max() > 1e-2  # one point of the segment is biased for a cubic
    alpha, weight = (torch.as_tensor(v) for v in segment_point(torch.rand(4000, generator=g).double().numpy(), law))
    draws = weight[:, None, None] * contractions(cubic, y_prev[None] + alpha[:, None] * d, d, None)
    z = (draws.mean(0) - change) / (draws.std(0) / math.sqrt(len(draws))).clamp_min(1e-12)
    assert z.abs().max() < 4.5


def test_segment_point_uniform_and_beta():
    assert segment_point(0.25) == (0.25, 1.0)
    alpha, weight = segment_point(0.5, (0.5, 0.5))  # the arcsine law: median 1/2, density 2/pi there
    assert alpha == pytest.approx(0.5)
    assert weight == pytest.approx(math.pi / 2)


def test_hessian_corrected_update_reads_like_the_formula():
    g = torch.Generator().manual_seed(3)
    V, J, H = (torch.randn(N, D, generator=g, dtype=torch.float64) for _ in range(3))
    beta = 0.3
    assert torch.allclose(hessian_corrected(V, J, H, beta), (1 - beta) * V + beta * J + (1 - beta) * H)
    assert torch.allclose(storm(V, J, H, beta), J + (1 - beta) * (V - H))


# ---------------------------------------------------------------- STORM


def smooth_map(x: torch.Tensor, batch=None) -> torch.Tensor:
    return torch.nn.functional.softplus(A @ x - B) + 0.1 * torch.cos(A @ x)


def affine_map(x: torch.Tensor, batch=None) -> torch.Tensor:
    return A @ x - B


@pytest.mark.parametrize("f", [affine_map, smooth_map], ids=["affine", "smooth"])
def test_storm_error_is_the_average_of_the_sample_noise_only(f):
    # With Jacobian noise G_k that does not depend on x, the same-sample difference J~(y_k) - J~(y_{k-1})
    # is the exact change of the Jacobian: STORM's error obeys e_k = (1 - beta) e_{k-1} + beta G_k with no
    # drift term, while Polyak's error also carries (1 - beta)(J(y_{k-1}) - J(y_k)) for a curved map.
    g = torch.Generator().manual_seed(4)
    beta = 0.2
    y = torch.randn(D, generator=g, dtype=torch.float64)
    G = 0.3 * torch.randn(N, D, generator=g, dtype=torch.float64)
    V_storm = V_polyak = jacobian(f, y) + G
    expected = G
    for _ in range(15):
        y_next = y + 0.5 * torch.randn(D, generator=g, dtype=torch.float64)
        G = 0.3 * torch.randn(N, D, generator=g, dtype=torch.float64)
        J_next, J_prev = jacobian(f, y_next) + G, jacobian(f, y) + G  # two evaluations, one sample
        V_storm, V_polyak = storm(V_storm, J_next, J_prev, beta), polyak(V_polyak, J_next, beta)
        expected = (1 - beta) * expected + beta * G
        y = y_next
        assert torch.allclose(V_storm - jacobian(f, y), expected, atol=1e-12)
    polyak_matches = torch.allclose(V_polyak - jacobian(f, y), expected, atol=1e-9)
    assert polyak_matches == (f is affine_map)


def value_noise_problem(f, reads=None):
    """Noise in the values only: every sample has the exact Jacobian, so STORM tracks it exactly."""
    noisy, sampler = noise.with_noise(f, None, n=N, d=D, value_noise=noise.Gaussian(0.2))
    return fc.CompositeProblem(cp.max(fc.inner_value(N)), noisy, fc.Simplex(D), sampler=sampler)


@pytest.mark.parametrize(
    "method, options",
    [("hmsfw", {"glmo": "conic"}), ("psg", {}), ("prox-linear", {})],
    ids=["hmsfw", "psg", "prox-linear"],
)
@pytest.mark.parametrize("f", [affine_map, smooth_map], ids=["affine", "smooth"])
def test_storm_has_zero_tracking_error_without_jacobian_noise(f, method, options):
    """Every method on the tracked model runs its trackers: the baselines move x their own way on the same V."""
    problem = value_noise_problem(f)
    errors = {}
    for tracker in ("storm", "polyak"):
        seen = []

        def record(it, seen=seen):
            y = it.state.y
            seen.append(float((it.state.V - jacobian(f, y)).abs().max()))

        fc.solve(problem, method, iters=12, tracker=tracker, seed=0, callback=record, progress=False, **options)
        errors[tracker] = max(seen)
    assert errors["storm"] < 1e-12
    if f is smooth_map:  # the Polyak tracker lags behind a moving Jacobian
        assert errors["polyak"] > 1e-3


# ---------------------------------------------------------------- end to end


def noisy_problem(domain=None):
    inner, sampler = noise.with_noise(
        smooth_map,
        None,
        n=N,
        d=D,
        value_noise=noise.StudentT.of_order(1.5, scale=0.05),
        jacobian_noise=noise.Gaussian(0.05),
    )
    return fc.CompositeProblem(
        cp.max(fc.inner_value(N)),
        inner,
        domain or fc.L1Ball(D, 1.0),
        sampler=sampler,
        full_batch=noise.noiseless(),
    )


QUADS = torch.tensor(RNG.standard_normal((N, D, D)))
QUADS = QUADS @ QUADS.transpose(1, 2) / D  # f_i(x) = x^T Q_i x / 2 + a_i^T x: J(y) = [Q_i y + a_i] exactly


def quadratic_map(x: torch.Tensor, batch=None) -> torch.Tensor:
    return 0.5 * torch.einsum("i,nij,j->n", x, QUADS, x) + A @ x


@pytest.mark.parametrize("variant", ["taylor", "polyak"])
@pytest.mark.parametrize("tracker", ["storm", "hessian"])
def test_corrected_trackers_follow_the_jacobian_of_a_quadratic_exactly(tracker, variant):
    # Noiseless samples of a quadratic map: the STORM and Hessian corrections add exactly J(y_{k+1}) - J(y_k),
    # so the tracked Jacobian is the true one at every iterate; Polyak averaging lags behind it.
    problem = fc.CompositeProblem(cp.max(fc.inner_value(N)), quadratic_map, fc.L1Ball(D, 1.0), sampler=lambda g: None)
    options = dict(iters=15, variant=variant, glmo="conic", seed=1, progress=False)
    res = fc.hmsfw(problem, tracker=tracker, hessian_point="uniform", **options)
    assert res.info["tracker"] == tracker
    assert (res.V - jacobian(quadratic_map, res.x)).abs().max() <= 1e-12
    lagging = fc.hmsfw(problem, tracker="polyak", **options)
    assert (lagging.V - jacobian(quadratic_map, lagging.x)).abs().max() > 1e-3


@pytest.mark.parametrize("point", ["beta", (1.0, 0.5)])
def test_hessian_points_off_the_uniform_law_run_and_improve_on_the_start(point):
    # Weighted by 1/density, such a correction is exact only on average; the run must still make progress.
    problem = noisy_problem()
    res = fc.hmsfw(problem, iters=15, tracker="hessian", hessian_point=point, glmo="conic", seed=1, progress=False)
    assert torch.isfinite(res.V).all() and problem.objective(res.x) < problem.objective(problem.x0)


K_HORIZON = 1000


@pytest.mark.parametrize(
    "schedule, tracker, formula",
    [
        # r_f = r_g = 2 in the HMSFW paper: Theorem 1 (Variant II) gamma = K^(-3/4), beta = K^(-1/2), rho = K^(-2/3).
        ("theorem1", "polyak", lambda k: (K_HORIZON**-0.75, K_HORIZON**-0.5, K_HORIZON ** (-2 / 3))),
        # Appendix I.4's constant parameters: gamma = K^(-3/4), beta = rho = K^(-1/2).
        ("constant", "polyak", lambda k: (K_HORIZON**-0.75, K_HORIZON**-0.5, K_HORIZON**-0.5)),
        # Theorem 3: gamma = beta = rho = K^(-2/3).
        ("theorem3", "storm", lambda k: (K_HORIZON ** (-2 / 3),) * 3),
        # Theorem 2, anytime: gamma_k = 2/(k+2), beta_{k+1} = (k+1+19)^(-2/3), rho_{k+1} = 2/(k+3).
        ("theorem2", "polyak", lambda k: (2 / (k + 2), (k + 20) ** (-2 / 3), 2 / (k + 3))),
        # Doubling over Theorem 3: epoch j (k + 1 in [2^j, 2^(j+1))) uses the horizon 2^j.
        (
            "doubling",
            "storm",
            lambda k: (
                (2 ** ((k + 1).bit_length() - 1)) ** (-2 / 3),
                (2 ** ((k + 2).bit_length() - 1)) ** (-2 / 3),
                (2 ** ((k + 2).bit_length() - 1)) ** (-2 / 3),
            ),
        ),
    ],
)
def test_theory_schedules_follow_their_theorems(schedule, tracker, formula):
    from fullcomp.schedules import resolve

    sched = resolve(schedule, iters=K_HORIZON, exact=False, tracker=tracker)
    for k in (0, 1, 2, 5, 30, 200, 999):
        assert sched.at(k) == pytest.approx(formula(k), rel=1e-12), k
    # The run steps with the schedule's gamma_k.
    res = fc.hmsfw(noisy_problem(), iters=6, schedule=schedule, tracker=tracker, glmo="conic", seed=0, progress=False)
    run_sched = resolve(schedule, iters=6, exact=False, tracker=tracker)
    assert [row["gamma"] for row in res.history.rows[:6]] == pytest.approx([run_sched.at(k)[0] for k in range(6)])
    assert res.info["schedule"].startswith(schedule)


# The structured path (the map reads x only at some entries) against the dense path, as in test_structured.
P, Q = 4, 5
READS = np.array([0, 3, 6, 7, 11, 12, 15, 19])
TARGET = torch.tensor(RNG.standard_normal(len(READS)))
GROUPS = [torch.tensor([0, 1, 2, 3]), torch.tensor([4, 5, 6, 7])]


def group_sampler(g: torch.Generator):
    return [m[torch.randint(len(m), (3,), generator=g)] for m in GROUPS]


def group_losses(values: torch.Tensor, batch) -> torch.Tensor:
    return torch.stack([torch.nn.functional.huber_loss(values[b], TARGET[b], delta=0.5) for b in batch])


@pytest.mark.parametrize("tracker", ["storm", "hessian"])
def test_structured_and_dense_paths_agree_for_new_trackers(tracker):
    X = fc.NuclearBall((P, Q), 2.0)
    dense = fc.CompositeProblem(
        cp.max(fc.inner_value(2)),
        lambda x, b: group_losses(x.reshape(-1)[torch.as_tensor(READS)], b),
        X,
        sampler=group_sampler,
    )
    structured = fc.CompositeProblem(cp.max(fc.inner_value(2)), group_losses, X, sampler=group_sampler, reads=READS)
    a = fc.hmsfw(dense, iters=8, tracker=tracker, seed=3, progress=False)
    b = fc.hmsfw(structured, iters=8, tracker=tracker, seed=3, progress=False)
    assert b.V.shape == (2, len(READS))  # the Jacobian is taken w.r.t. the read entries
    assert torch.allclose(a.x, b.x, atol=1e-7)


def _strip_time(history):
    return [{k: v for k, v in row.items() if k != "time"} for row in history]


def test_hessian_tracker_reproduces_and_resumes_from_a_checkpoint(tmp_path):
    problem = noisy_problem()
    options = dict(iters=12, tracker="hessian", hessian_point="beta", glmo="conic", seed=5, progress=False)
    full = fc.hmsfw(problem, **options)
    again = fc.hmsfw(problem, **options)
    assert torch.equal(full.x, again.x)
    ckpt = fc.Checkpoint(tmp_path / "run.pt", every=5)

    def interrupt(it):
        if it.k == 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fc.hmsfw(problem, checkpoint=ckpt, callback=interrupt, **options)
    resumed = fc.hmsfw(problem, checkpoint=ckpt, **options)
    assert resumed.info["resumed_from"] == 9  # the interrupted update is committed before the checkpoint
    assert torch.equal(resumed.x, full.x)
    assert _strip_time(resumed.history) == _strip_time(full.history)


# ---------------------------------------------------------------- schedules


def test_theorem1_formulas():
    K = 10_000
    s = Schedule.theorem1(K)  # Variant II at r_f = r_g = 2: gamma = K^(-3/4), beta = gamma^(2/3), rho = gamma^(8/9)
    assert s.rate == pytest.approx(0.25)
    assert s.at(5) == pytest.approx((1e-3, 1e-2, 10 ** (-8 / 3)))
    s = Schedule.theorem1(K, r_f=1.5, r_g=2.0, variant="polyak")  # q = 1/4, theta = 1/5
    assert s.rate == pytest.approx(0.2)
    gamma = K ** (-0.8)
    assert s.at(0) == pytest.approx((gamma, gamma ** (2 / 3), gamma**0.75))
    # The paper's examples: r_g = 2 and r_f = 3/2 keeps 1/4; r_f = 4/3 gives 4/19 (II) and 1/6 (I).
    assert Schedule.theorem1(K, r_f=1.5).rate == pytest.approx(0.25)
    assert Schedule.theorem1(K, r_f=4 / 3).rate == pytest.approx(4 / 19)
    assert Schedule.theorem1(K, r_f=4 / 3, variant="i").rate == pytest.approx(1 / 6)
    for r_f, r_g in [(1.2, 1.9), (1.4, 1.6), (1.1, 2.0), (2.0, 1.3)]:
        closed = min(
            (r_g - 1) / (3 * r_g - 2),
            (r_f - 1) * (3 * r_g - 2) / (7 * r_f * r_g - 4 * r_f - 5 * r_g + 3),
            (r_f - 1) / r_f,
        )
        assert theta_taylor(r_f, r_g, (r_g - 1) / (2 * r_g - 1)) == pytest.approx(closed)


def test_theorem2_theorem3_constant_and_doubling_formulas():
    assert k_offset(2.0) == 19  # smallest k >= 2 with 2 q k^(b-1) <= 1/2, q = b = 2/3
    s = Schedule.theorem2()
    assert s.rate == pytest.approx(1 / 3)
    assert s.at(0) == pytest.approx((1.0, 20 ** (-2 / 3), 2 / 3))
    paper, k21 = Schedule.paper(), Schedule.theorem2(k_g=21)
    assert all(paper.at(k) == pytest.approx(k21.at(k)) for k in range(50))
    assert Schedule.theorem2(r_f=1.5).rate == pytest.approx(1 / 3)  # Variant II keeps 1/3 at r_f = 3/2
    assert Schedule.theorem2(r_f=1.5, variant="i").rate == pytest.approx(0.25)
    t3 = Schedule.theorem3(1000)
    assert t3.rate == pytest.approx(1 / 3)
    assert t3.at(3) == pytest.approx((0.01, 0.01, 0.01))  # gamma = beta = rho = K^(-2/3)
    c = Schedule.constant(10_000)
    assert c.at(7) == pytest.approx((1e-3, 1e-2, 1e-2))
    c = Schedule.constant(10_000, r_f=1.5, r_g=2.0)  # separate orders: theta_0 = 1/4, gamma = rho = K^(-3/4)
    assert c.rate == pytest.approx(0.25)
    assert c.at(0) == pytest.approx((1e-3, 1e-2, 1e-3))
    d = Schedule.doubling()
    for k, K in [(0, 1), (1, 2), (2, 2), (3, 4), (6, 4), (7, 8), (100, 64)]:
        assert d.gamma(k) == pytest.approx(Schedule.theorem1(K).gamma(0))
    assert d.rate == pytest.approx(0.25)


@pytest.mark.parametrize("bad", [1.0, 2.5, 0.5, "2"])
@pytest.mark.parametrize("name", ["r_f", "r_g"])
def test_moment_orders_outside_1_2_are_rejected(bad, name):
    with pytest.raises(OptionError, match=name):
        Schedule.theorem1(100, **{name: bad})
    with pytest.raises(OptionError, match=name):
        fc.hmsfw(noisy_problem(), iters=3, schedule="theorem2", progress=False, **{name: bad})


def test_schedule_and_tracker_validation():
    problem = noisy_problem()
    for name in ("theorem1", "theorem3", "constant"):
        with pytest.raises(OptionError, match="iters"):
            fc.hmsfw(problem, seconds=1.0, schedule=name, progress=False)
        with pytest.raises(OptionError, match="iters"):
            getattr(Schedule, name)(None)
    with pytest.raises(OptionError, match="r_f"):
        fc.hmsfw(problem, iters=3, r_f=1.5, progress=False)  # the default schedule does not read r_f
    with pytest.raises(OptionError, match="tracker"):
        fc.hmsfw(problem, iters=3, tracker="adam", progress=False)
    with pytest.raises(OptionError, match="hessian_point"):
        fc.hmsfw(problem, iters=3, tracker="hessian", hessian_point=(2.0, 2.0), progress=False)
    with pytest.raises(OptionError, match="clip"):
        fc.hmsfw(problem, iters=3, tracker="storm", clip=1.0, progress=False)
    with pytest.raises(OptionError, match="base"):
        Schedule.doubling(base="theorem2")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.0, -0.5, 1.5])
@pytest.mark.parametrize("name", ["gamma", "beta", "rho"])
def test_a_schedule_weight_outside_0_1_is_named_with_its_iteration(bad, name):
    weights = {"gamma": 0.5, "beta": 0.5, "rho": 0.5, name: lambda k: bad if k >= 4 else 0.5}
    schedule = Schedule(**weights)
    assert schedule.at(2) == (0.5, 0.5, 0.5)
    k = 4 if name == "gamma" else 3  # at(k) reads beta and rho at k + 1
    with pytest.raises(OptionError, match=rf"{name} = {bad} at k = {k}"):
        schedule.at(k)
    with pytest.raises(OptionError, match=rf"{name} = {bad}"):
        fc.hmsfw(noisy_problem(), iters=8, schedule=schedule, progress=False)


# ---------------------------------------------------------------- noise


def test_noise_laws_moments_and_reproducibility():
    assert noise.StudentT.of_order(1.5).df == pytest.approx(1.6)
    assert noise.Pareto.of_order(1.5, margin=0.25).finite_below == pytest.approx(1.75)
    assert noise.Gaussian(1.0).finite_below == math.inf
    for law in (noise.Gaussian(2.0), noise.StudentT(df=3.0, scale=2.0), noise.Pareto(tail=3.0, scale=2.0)):
        a = law.sample((40_000,), torch.Generator().manual_seed(0))
        b = law.sample((40_000,), torch.Generator().manual_seed(0))
        assert torch.equal(a, b)
        assert abs(float(a.mean())) < 0.1  # symmetric laws with finite variance: mean zero
    t = noise.StudentT(df=3.0, scale=2.0).sample((200_000,), torch.Generator().manual_seed(1))
    assert float(t.var()) == pytest.approx(4.0 * 3.0, rel=0.15)  # scale^2 df / (df - 2)
    p = noise.Pareto(tail=3.0, scale=2.0).sample((200_000,), torch.Generator().manual_seed(1))
    assert float(p.abs().min()) >= 2.0
    assert float((p.abs() > 4.0).float().mean()) == pytest.approx(0.5**3, rel=0.05)  # P(|X| > t) = (scale/t)^tail
    with pytest.raises(OptionError, match="df"):
        noise.StudentT(df=1.0)
    with pytest.raises(OptionError, match="tail"):
        noise.Pareto(tail=0.8)


def test_with_noise_is_additive_in_value_and_jacobian():
    center = torch.linspace(-1, 1, D, dtype=torch.float64)
    inner, sampler = noise.with_noise(
        smooth_map,
        lambda g: None,
        n=N,
        d=D,
        value_noise=noise.Pareto(tail=1.8),
        jacobian_noise=noise.StudentT(df=2.5),
        center=center,
    )
    batch = sampler(torch.Generator().manual_seed(0))
    x = torch.randn(D, dtype=torch.float64)
    assert torch.allclose(jacobian(inner, x, batch), jacobian(smooth_map, x) + batch.jacobian)
    assert torch.allclose(inner(x, batch), smooth_map(x) + batch.value + batch.jacobian @ (x - center))
    assert torch.allclose(inner(center, batch), smooth_map(center) + batch.value)
    assert torch.equal(inner(x, noise.noiseless()), smooth_map(x))


@pytest.mark.parametrize("tracker", ["storm", "hessian"])
@pytest.mark.parametrize("method", ["psg", "prox-linear"])
def test_the_baselines_corrected_trackers_follow_the_jacobian_of_a_quadratic_exactly(method, tracker):
    """The projection baselines on the same tracked model: their V is the true Jacobian at every iterate."""
    problem = fc.CompositeProblem(cp.max(fc.inner_value(N)), quadratic_map, fc.L1Ball(D, 1.0), sampler=lambda g: None)
    res = fc.solve(problem, method, tracker=tracker, iters=15, seed=1, progress=False)
    assert res.info["tracker"] == tracker
    assert (res.V - jacobian(quadratic_map, res.x)).abs().max() <= 1e-12
    lagging = fc.solve(problem, method, iters=15, seed=1, progress=False)
    assert (lagging.V - jacobian(quadratic_map, lagging.x)).abs().max() > 1e-3


def test_the_tracked_model_names_a_tracker_it_does_not_have():
    from fullcomp.errors import OptionError

    problem = value_noise_problem(affine_map)
    for bad in ({"tracker": "stormy"}, {"variant": "adam"}, {"layout": "sparse"}):
        with pytest.raises(OptionError, match=next(iter(bad))):
            fc.TrackedModel(problem, "cpu", torch.float64, torch.Generator(), **bad)
    for old, new in (("jacobian", "tracker"), ("value", "variant")):
        with pytest.raises(OptionError, match=f"'{old}'.*'{new}'"):
            fc.TrackedModel(problem, "cpu", torch.float64, torch.Generator(), **{old: "polyak"})
    with pytest.raises(OptionError, match="feed"):  # its batches and its Hessian point from one generator
        fc.TrackedModel(problem, "cpu", torch.float64, torch.Generator(), feed=fc.run.Feed(torch.Generator()))
