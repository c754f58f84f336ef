"""The dual route of the GLMO over products of l2 balls, against CVXPY's primal program and column generation."""

from __future__ import annotations

from collections.abc import Callable

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp.errors import ModelError, SolverError
from fullcomp.glmo import dual as dual_module
from fullcomp.glmo.dual import AUTO_OUTPUTS, DualBallGLMO
from fullcomp.sets.atoms import DenseAtom, Entries

RISKS: dict[str, Callable[[cp.Expression], cp.Expression]] = {
    "max": cp.max,
    "cvar": lambda u: fc.cvar(u, 0.5),
    "kl": lambda u: fc.kl_dro(u, 0.2),
    "chi2": lambda u: fc.chi2_dro(u, 0.5),
    "log-sum-exp": cp.log_sum_exp,
    "sum-squares": cp.sum_squares,  # its optimum may lie inside a ball: no ball binds, V^T q = 0
}


def instance(seed: int) -> tuple[fc.Set, np.ndarray, np.ndarray, np.ndarray]:
    """A product of 1 to 4 l2 balls (one ball alone for the first seeds of each size), m in 2..6, d <= 300."""
    rng = np.random.default_rng(seed)
    m, k = int(rng.integers(2, 7)), int(rng.integers(1, 5))
    sizes = [int(s) for s in rng.integers(1, 80, size=k)]
    balls = [fc.L2Ball(s, float(r)) for s, r in zip(sizes, rng.uniform(0.2, 3.0, size=k))]
    domain = balls[0] if k == 1 else fc.Product(*balls)
    d = sum(sizes)
    z = rng.standard_normal(m)
    V = rng.standard_normal((m, d)) * rng.uniform(0.1, 2.0, size=(m, 1))
    y = np.asarray(domain.project(rng.standard_normal(d)), dtype=np.float64).reshape(-1)
    return domain, z, V, y


def cvxpy_optimum(F: Callable, domain: fc.Set, z: np.ndarray, V: np.ndarray, y: np.ndarray) -> float:
    """The GLMO's optimum from its primal program over x, solved by Clarabel: an answer independent of the route."""
    x = cp.Variable(V.shape[1])
    problem = cp.Problem(cp.Minimize(F(z + V @ (x - y))), domain.cvxpy_constraints(x))
    problem.solve(solver=cp.CLARABEL)
    return float(problem.value)


def model_value(glmo: fc.glmo.GLMO, z: np.ndarray, V: np.ndarray, y: np.ndarray, x: np.ndarray) -> float:
    """F at the model's u for x, by the product with V (the route reads V x off the Gram matrices)."""
    return glmo.outer.value(z + V @ (np.asarray(x, dtype=np.float64).reshape(-1) - y))


@pytest.mark.parametrize("risk", list(RISKS))
@pytest.mark.parametrize("seed", range(4))
def test_the_dual_route_reaches_cvxpys_optimum_with_a_small_certified_gap(risk: str, seed: int) -> None:
    F = RISKS[risk]
    domain, z, V, y = instance(seed)
    glmo = fc.build_glmo(F(fc.inner_value(len(z))), domain)
    assert glmo.route == "dual"
    res = glmo.solve(z, V, y)
    optimum = cvxpy_optimum(F, domain, z, V, y)
    scale = max(1.0, abs(optimum))
    assert domain.contains(res.x, tol=1e-9)
    assert res.value == pytest.approx(model_value(glmo, z, V, y, res.x), abs=1e-9 * scale)  # the value of its own x
    assert abs(res.value - optimum) <= 1e-6 * scale
    assert 0.0 <= res.gap_bound <= 1e-6 * scale and res.converged
    assert res.value - res.gap_bound <= optimum + 1e-7 * scale  # the certificate's bound is below the optimum


def test_rank_deficient_and_zero_blocks() -> None:
    """A block V does not read (G_b = 0) and a block of rank one: the recovery divides only by kept eigenvalues."""
    rng = np.random.default_rng(7)
    m = 4
    domain = fc.Product(fc.L2Ball(30, 1.0), fc.L2Ball(20, 0.5), fc.L2Ball(25, 2.0))
    V = rng.standard_normal((m, 75))
    V[:, 30:50] = 0.0
    V[:, 50:] = np.outer(rng.standard_normal(m), rng.standard_normal(25))
    z, y = rng.standard_normal(m), np.zeros(75)
    res = fc.build_glmo(cp.max(fc.inner_value(m)), domain).solve(z, V, y)
    optimum = cvxpy_optimum(cp.max, domain, z, V, y)
    assert abs(res.value - optimum) <= 1e-6 * max(1.0, abs(optimum)) and domain.contains(res.x, tol=1e-9)
    assert np.all(res.x[30:50] == 0.0)


@pytest.mark.parametrize("products", ["torch", "numpy"])
def test_blocks_wider_than_a_gram_chunk_give_the_optimum(products: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of several chunks and a remainder: by torch their Gram matrices are summed chunk by chunk on the
    CPU; a V this small goes through numpy by default."""
    monkeypatch.setattr(dual_module, "NUMPY_SIZE", 0 if products == "torch" else 1 << 16)
    rng = np.random.default_rng(5)
    chunk = dual_module.GRAM_CHUNK
    domain = fc.Product(fc.L2Ball(3 * chunk + 7, 1.0), fc.L2Ball(3, 0.5), fc.L2Ball(2 * chunk, 2.0))
    V = rng.standard_normal((5, domain.size))
    z, y = rng.standard_normal(5), np.zeros(domain.size)
    glmo = fc.build_glmo(cp.max(fc.inner_value(5)), domain)
    grams, Vy = glmo._grams(torch.from_numpy(V), torch.from_numpy(y))
    want = np.stack([V[:, s] @ V[:, s].T for s in domain.slices])
    np.testing.assert_allclose(grams, want, rtol=1e-12, atol=1e-9)
    res = glmo.solve(z, V, y)
    optimum = cvxpy_optimum(cp.max, domain, z, V, y)
    assert abs(res.value - optimum) <= 1e-6 * max(1.0, abs(optimum)) and res.converged
    # float32 tensors: x comes back as a float32 tensor, the value within the float32 Gram matrices' rounding
    res32 = glmo.solve(z, torch.tensor(V, dtype=torch.float32), torch.tensor(y, dtype=torch.float32))
    assert isinstance(res32.x, torch.Tensor) and res32.x.dtype == torch.float32
    assert abs(res32.value - optimum) <= 1e-4 * max(1.0, abs(optimum))
    assert domain.contains(res32.x.double().numpy(), tol=1e-5)


def test_float32_tensors_stay_float32_and_give_the_optimum() -> None:
    domain, z, V, y = instance(11)
    glmo = fc.build_glmo(cp.max(fc.inner_value(len(z))), domain)
    V32, y32 = torch.tensor(V, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    res = glmo.solve(z, V32, y32)
    assert isinstance(res.x, torch.Tensor) and res.x.dtype == torch.float32
    optimum = cvxpy_optimum(cp.max, domain, z, V32.double().numpy(), y32.double().numpy())
    scale = max(1.0, abs(optimum))
    # The Gram matrices round in float32: about 1e-6 of the value, not the float64 solvers' 1e-8.
    assert abs(res.value - optimum) <= 1e-5 * scale
    assert domain.contains(res.x.double().numpy().reshape(domain.shape), tol=1e-6)


def test_the_route_is_chosen_for_products_of_l2_balls_only() -> None:
    u = fc.inner_value(3)
    balls = fc.Product(fc.L2Ball(4, 1.0), fc.L2Ball(2, 2.0))
    assert fc.build_glmo(cp.max(u), balls).route == "dual"
    assert fc.build_glmo(cp.max(u), fc.L2Ball((2, 3), 1.0)).route == "dual"
    assert fc.build_glmo(cp.max(u), fc.Product(fc.L2Ball(4, 1.0), fc.L1Ball(2, 1.0))).route == "colgen"
    assert fc.build_glmo(cp.max(u), fc.L1Ball(6, 1.0)).route == "colgen"
    assert fc.build_glmo(cp.sum(u), balls).route == "affine"  # an affine F is one LMO
    many = fc.inner_value(AUTO_OUTPUTS + 1)  # the program grows as m^2 a block: column generation's master less
    assert fc.build_glmo(cp.max(many), balls).route == "colgen"
    assert fc.build_glmo(cp.max(many), balls, route="dual").route == "dual"
    reads_x = cp.max(u) + cp.sum_squares(balls.variable)
    assert fc.build_glmo(reads_x, balls).route == "conic"
    assert fc.build_glmo(cp.max(u), balls, route="colgen").route == "colgen"
    with pytest.raises(ModelError, match="route='dual' needs an fc.L2Ball or an fc.Product of fc.L2Ball"):
        fc.build_glmo(cp.max(u), fc.L1Ball(6, 1.0), route="dual")
    with pytest.raises(ModelError, match="route='dual' needs an outer function of the placeholder only"):
        fc.build_glmo(reads_x, balls, route="dual")


def test_it_agrees_with_column_generation_within_the_certificates() -> None:
    domain, z, V, y = instance(5)
    F = cp.max(fc.inner_value(len(z)))
    a = fc.build_glmo(F, domain, route="dual").solve(z, V, y)
    b = fc.build_glmo(F, domain, route="colgen").solve(z, V, y, tol=1e-9)
    assert abs(a.value - b.value) <= a.gap_bound + b.gap_bound + 1e-8 * max(1.0, abs(a.value))


def balls_problem(dtype: torch.dtype = torch.float64) -> fc.CompositeProblem:
    """max of four softplus group losses of a 2-layer map over one l2 ball per layer; noisy samples."""
    gen = torch.Generator().manual_seed(0)
    A, B = torch.randn(4, 6, generator=gen, dtype=torch.float64), torch.randn(6, generator=gen, dtype=torch.float64)
    A, B = A.to(dtype), B.to(dtype)
    domain = fc.Product({"w": fc.L2Ball(6, 1.5), "b": fc.L2Ball(4, 0.5)})

    def inner(x, noise):
        w, b = x[:6], x[6:]
        return torch.nn.functional.softplus(A @ w + b - 0.5 * (B @ w)) + noise

    def sampler(gen):
        return (0.05 * torch.randn(4, generator=gen, dtype=torch.float64)).to(dtype)

    return fc.CompositeProblem(outer=cp.max(fc.inner_value(4)), inner=inner, domain=domain, sampler=sampler)


def test_hmsfw_by_the_dual_route_follows_column_generations_trajectory() -> None:
    """Same seed, same samples: the two routes' GLMO answers differ within their certificates, so every row's
    estimates stay within the largest certified gap.  tests/test_distributed.py allows a hundredth of it to one
    route on two layouts, where the answers differ by rounding only; two routes return two different points of
    the certified level set (here 0.15 of the largest gap apart, measured), as tests/test_pinned.py allows for
    a GLMO's iterates."""
    runs = {}
    for route in ("dual", "colgen"):
        seen: list[np.ndarray] = []
        res = fc.solve(
            balls_problem(),
            "hmsfw",
            iters=8,
            seed=3,
            glmo=route,
            glmo_tol=1e-10,
            progress=False,
            callback=lambda it, seen=seen: seen.append(it.x.detach().double().numpy().reshape(-1).copy()),
        )
        assert res.info["glmo_route"] == route
        runs[route] = (np.stack(seen), res.history)
    (x_dual, h_dual), (x_colgen, h_colgen) = runs["dual"], runs["colgen"]
    largest = max(np.max(h_dual.column("glmo_gap")), np.max(h_colgen.column("glmo_gap")), 1e-10)
    bound = largest + 1e4 * np.finfo(np.float64).eps
    for key in ("objective_estimate", "gap_estimate"):
        assert np.abs(np.asarray(h_dual.column(key)) - np.asarray(h_colgen.column(key))).max() <= bound, key
    # On a ball the model grows quadratically away from its minimizer, so answers within a gap eps of the
    # optimum lie within about sqrt(eps) of each other (2e-5 measured, for gaps up to 5e-9).
    assert np.abs(x_dual - x_colgen).max() <= np.sqrt(largest) * np.abs(x_colgen).max()


def test_on_entries_it_is_column_generation() -> None:
    """A model reading some entries goes to column generation (the Gram matrices need every column of a block)."""
    domain, z, V, y = instance(2)
    F = cp.max(fc.inner_value(len(z)))
    dual = fc.build_glmo(F, domain)
    entries = Entries.all(domain.shape)
    start = DenseAtom(y.reshape(domain.shape))
    a = dual.solve(z, V, y, tol=1e-9, entries=entries, start=start)
    b = fc.build_glmo(F, domain, route="colgen").solve(z, V, y, tol=1e-9, entries=entries, start=start)
    assert a.value == pytest.approx(b.value, abs=1e-12) and a.calls == b.calls
    assert dual.state_dict()["colgen"] is not None


def test_hmsfw_hands_the_dual_route_the_tracked_float32_jacobian_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """No float64 copy of V or y on the way in, and the point comes back in the run's dtype."""
    seen = []
    solve = DualBallGLMO._solve

    def spy(self, z, V, y, request):
        seen.append((type(V), V.dtype, type(y), y.dtype))
        return solve(self, z, V, y, request)

    monkeypatch.setattr(DualBallGLMO, "_solve", spy)
    res = fc.solve(balls_problem(torch.float32), "hmsfw", iters=4, seed=0, dtype=torch.float32, progress=False)
    assert res.info["glmo_route"] == "dual" and len(seen) >= 4
    assert set(seen) == {(torch.Tensor, torch.float32, torch.Tensor, torch.float32)}
    assert res.x.dtype == torch.float32 and balls_problem().domain.contains(res.x.double().numpy(), tol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_dual_route_gives_the_cpu_answer_on_the_device() -> None:
    domain, z, V, y = instance(3)
    glmo = fc.build_glmo(cp.max(fc.inner_value(len(z))), domain)
    cpu = glmo.solve(z, torch.tensor(V), torch.tensor(y))
    gpu = glmo.solve(z, torch.tensor(V, device="cuda"), torch.tensor(y, device="cuda"))
    assert gpu.x.device.type == "cuda" and gpu.x.dtype == torch.float64
    assert abs(gpu.value - cpu.value) <= 1e-8 * max(1.0, abs(cpu.value))
    assert torch.allclose(gpu.x.cpu(), cpu.x, rtol=0, atol=1e-6)


def test_where_clarabel_fails_column_generation_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    domain, z, V, y = instance(4)
    glmo = fc.build_glmo(cp.max(fc.inner_value(len(z))), domain)

    def fails(*args):
        raise SolverError("Clarabel reports MaxIterations")

    monkeypatch.setattr(glmo, "_solve_program", fails)
    res = glmo.solve(z, V, y, tol=1e-9)
    optimum = cvxpy_optimum(cp.max, domain, z, V, y)
    assert res.calls > 1 and abs(res.value - optimum) <= 1e-6 * max(1.0, abs(optimum))


def test_a_run_by_the_dual_route_resumes_from_its_checkpoint_exactly(tmp_path) -> None:
    full = fc.hmsfw(balls_problem(), iters=12, seed=7, progress=False)
    assert full.info["glmo_route"] == "dual"
    checkpoint = fc.Checkpoint(tmp_path / "run.pt", every=4)

    def interrupt(it):
        if it.k == 9:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fc.hmsfw(balls_problem(), iters=12, seed=7, progress=False, checkpoint=checkpoint, callback=interrupt)
    resumed = fc.hmsfw(balls_problem(), iters=12, seed=7, progress=False, checkpoint=checkpoint)
    assert resumed.info["resumed_from"] > 0 and torch.equal(resumed.x, full.x)
    assert np.array_equal(resumed.history.column("glmo_gap"), full.history.column("glmo_gap"))


def test_where_cvxpy_lays_f_out_unreadably_auto_takes_column_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(self, outer):
        raise KeyError("var_id_to_col")

    monkeypatch.setattr(dual_module.ConicMaster, "__init__", unreadable)
    balls = fc.Product(fc.L2Ball(4, 1.0), fc.L2Ball(2, 2.0))
    with pytest.warns(RuntimeWarning, match="cannot compile its master"):  # column generation's own fallback
        assert fc.build_glmo(cp.max(fc.inner_value(3)), balls).route == "colgen"
    with pytest.raises(ModelError, match="route='dual' cannot read F's conic form"):
        fc.build_glmo(cp.max(fc.inner_value(3)), balls, route="dual")
