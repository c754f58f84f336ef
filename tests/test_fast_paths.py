"""The shortcuts the hot path takes agree with the general machinery they replace."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch
from torch.func import grad, jacrev

import fullcomp as fc
from fullcomp.autodiff import ROWS_BY_BACKWARD, rows_by_backward
from fullcomp.glmo import AffineGLMO, build_glmo
from fullcomp.oracles import InnerOracle


@pytest.mark.parametrize(
    "domain", [fc.L1Ball(12, 2.0), fc.Simplex(12), fc.L2Ball(12, 1.5), fc.NuclearBall((3, 4), 1.0)], ids=repr
)
@pytest.mark.parametrize("affine", ["sum", "weighted", "identity"])
def test_an_affine_outer_function_is_one_lmo_matching_the_conic_program(domain, affine):
    u = fc.inner_value(1 if affine == "identity" else 3)
    F = u[0] if affine == "identity" else cp.sum(u) if affine == "sum" else 2 * u[0] - u[1] + 0.5 * u[2] + 3.0
    rng = np.random.default_rng(0)
    z, V, y = rng.normal(size=u.size), rng.normal(size=(u.size, 12)), rng.normal(size=12)
    fast = build_glmo(F, domain)
    assert isinstance(fast, AffineGLMO) and fast.route == "affine"
    res = fast.solve(z, V, y)
    assert res.calls == 1 and res.converged and res.gap_bound == 0.0
    reference = build_glmo(F, domain, route="conic").solve(z, V, y)
    assert res.value == pytest.approx(reference.value, abs=1e-6 * max(1.0, abs(reference.value)))
    assert domain.contains(res.x, tol=1e-7)
    # The value is F at the model of the point returned, z + V (x - y), to rounding.
    u.value = z + V @ (res.x.reshape(-1) - y)
    assert res.value == pytest.approx(float(F.value), abs=1e-12)


@pytest.mark.parametrize("affine", ["weighted", "identity"])
def test_an_affine_outer_function_on_read_entries_matches_cvxpy(affine):
    """With ``reads=`` the model sees only some entries: the LMO over the matrix, priced on those entries."""
    from fullcomp.sets.atoms import Entries

    u = fc.inner_value(1 if affine == "identity" else 3)
    F = 2 * u[0] - u[1] + 0.5 * u[2] + 3.0 if affine == "weighted" else u[0]
    shape, m = (6, 7), 15
    domain = fc.NuclearBall(shape, 2.0)
    rng = np.random.default_rng(1)
    entries = Entries(np.sort(rng.choice(domain.size, m, replace=False)), shape)
    z, V, y = rng.normal(size=u.size), rng.normal(size=(u.size, m)), rng.normal(size=m)
    res = build_glmo(F, domain).solve(z, V, y, entries=entries)
    assert res.x.shape == (m,) and res.calls == 1
    x = cp.Variable(shape)
    read = cp.hstack([x[r, c] for r, c in zip(entries.rows, entries.cols)])
    a = np.array([2.0, -1.0, 0.5]) if affine == "weighted" else np.ones(1)
    b = 3.0 if affine == "weighted" else 0.0
    ref = cp.Problem(cp.Minimize(a @ (z + V @ (read - y)) + b), domain.cvxpy_constraints(x))
    ref.solve(solver="CLARABEL")
    assert res.value == pytest.approx(ref.value, abs=1e-6 * max(1.0, abs(ref.value)))
    assert res.value == pytest.approx(float(a @ (z + V @ (res.x - y)) + b), abs=1e-12)


def test_a_non_affine_outer_function_keeps_its_route():
    u = fc.inner_value(3)
    assert build_glmo(cp.max(u), fc.L1Ball(5, 1.0)).route == "colgen"
    with pytest.raises(fc.errors.ModelError, match="affine"):
        build_glmo(cp.max(u), fc.L1Ball(5, 1.0), route="affine")


@pytest.mark.parametrize("n", [1, 2, ROWS_BY_BACKWARD, ROWS_BY_BACKWARD + 3])
def test_jacobian_rows_by_backward_equal_jacrev(n):
    A = torch.randn(n, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(n))

    def inner(x, batch):
        return torch.tanh(A @ x) + (x**2).sum() * batch

    x = torch.randn(7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    value, jac = InnerOracle(inner, n, (7,), "cpu", torch.float64)(x, 0.5, 0)
    assert torch.allclose(jac, jacrev(lambda v: inner(v, 0.5))(x), rtol=1e-14, atol=1e-15)
    assert torch.allclose(value, inner(x, 0.5), rtol=0, atol=0)
    with torch.no_grad():  # a caller's no_grad does not reach the map's differentiation
        assert torch.equal(InnerOracle(inner, n, (7,), "cpu", torch.float64)(x, 0.5, 0)[1], jac)
    _, zero = rows_by_backward(lambda v: torch.ones(n, dtype=torch.float64), x)
    assert torch.equal(zero, torch.zeros(n, 7, dtype=torch.float64))


def test_dmax_gradients_by_backward_equal_torch_func():
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)).double()
    X = torch.randn(16, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def phi(net, y, batch):
        return (net(batch).squeeze(-1) ** 2).mean() * (1 + y.sum()) + y @ y

    problem = fc.DMaxProblem(phi, x0=model, y0=torch.ones(2, dtype=torch.float64), full_batch=X)
    from fullcomp.oracles.dmax import DMaxOracle
    from fullcomp.run import RunOptions

    run = RunOptions.resolve(problem, "test", {"iters": 1})
    oracle = DMaxOracle(problem, run, "test")
    start = oracle.start()
    s = oracle.gradients(0, X, phi_at=(start["x"], start["y"]))
    expected = grad(lambda v, y: phi(problem.x.view(v), y, X), argnums=(0, 1))(start["x"], start["y"])
    assert torch.allclose(s.phi_x, expected[0], rtol=1e-13, atol=1e-15)
    assert torch.allclose(s.phi_y, expected[1], rtol=1e-13, atol=1e-15)
    held = oracle.gradients(0, X, phi_at=(start["x"], 3 * start["y"]), held=("phi_y",))  # y a constant
    x_only = grad(lambda v: phi(problem.x.view(v), 3 * start["y"], X))(start["x"])
    assert held.phi_y is None and torch.allclose(held.phi_x, x_only, rtol=1e-13, atol=1e-15)
    assert float(held.phi) == float(phi(model, 3 * start["y"], X))


def test_one_leaf_difference_gradient_matches_torch_func():
    from torch.func import grad

    from fullcomp.oracles.dmax import DMaxOracle
    from fullcomp.run import RunOptions

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
    X = torch.randn(10, 3, dtype=torch.float64)

    def phi(net, batch):  # reads the model twice
        out = net(batch).squeeze(-1)
        return (out**2).mean() + net(batch[:3]).mean()

    def psi(net, batch):
        return torch.nn.functional.softplus(net(batch)).mean()

    problem = fc.DMaxProblem(phi, psi=psi, x0=model, full_batch=X)
    oracle = DMaxOracle(problem, RunOptions.resolve(problem, "test", {"iters": 1}), "test")
    x = oracle.start()["x"]
    value, other, g = oracle.difference(0, X, x)
    expected = grad(lambda v: phi(problem.x.view(v), X) - psi(problem.x.view(v), X))(x)
    assert torch.allclose(g, expected, rtol=1e-13, atol=1e-15)
    assert float(value) == float(phi(model, X)) and float(other) == float(psi(model, X))


def test_the_oracles_finite_check_sees_nan_and_inf_and_survives_an_overflowing_sum():
    from fullcomp.autodiff import all_finite

    value, jac = torch.ones(3), torch.ones(2, 4)
    assert all_finite(value, jac)
    for bad in (float("nan"), float("inf"), -float("inf")):
        jac[1, 2] = bad
        assert not all_finite(value, jac)
    assert not all_finite(torch.tensor([float("inf"), -float("inf")]))  # a total of NaN
    assert all_finite(torch.full((4,), 3e38, dtype=torch.float32))  # finite entries whose sum overflows


@pytest.mark.parametrize("with_x", [False, True])
@pytest.mark.parametrize("full_batch", [False, True])
def test_the_deterministic_method_reads_phi_off_its_exact_value(with_x, full_batch):
    """exact=True samples f on full_batch at every iterate, so the history's objective is F of that sample: the
    value a fresh evaluation gives, without evaluating the map once more at the first and the last row."""
    rng = np.random.default_rng(2)
    W, noise = torch.as_tensor(rng.normal(size=(3, 6))), torch.as_tensor(rng.normal(size=(8, 3, 6)))
    calls = []

    def inner(x, batch):
        calls.append(1)
        target = W if batch is None else W + batch.mean(0)
        return ((x - target) ** 2).sum(1)

    u, domain = fc.inner_value(3), fc.Simplex(6)
    F = cp.max(u) + (0.1 * cp.sum_squares(domain.variable) if with_x else 0)
    sampler = (lambda g: noise[torch.randint(8, (2,), generator=g)]) if full_batch else None
    problem = fc.CompositeProblem(F, inner, domain, sampler=sampler, full_batch=noise if full_batch else None)
    calls.clear()
    res = fc.hmsfw(problem, iters=7, exact=True, progress=False, eval_every=3)
    assert len(calls) == 8  # one sample at each of y_0 .. y_7, nothing else
    rows = [r for r in res.history.rows if "objective" in r]
    assert [r["k"] for r in rows] == [0, 3, 6, 7]
    assert rows[-1]["objective"] == pytest.approx(problem.objective(res.x.numpy()), rel=1e-13, abs=1e-13)
    # A schedule that keeps momentum in z makes it an estimate after the first step: the objective is evaluated
    # at k = 3, 6 and 7 (z_0 is still the sample at y_0).
    calls.clear()
    tracked = fc.hmsfw(problem, iters=7, exact=True, schedule="paper", progress=False, eval_every=3)
    assert len(calls) == 8 + 3
    last = tracked.history.rows[-1]
    assert last["objective"] == pytest.approx(problem.objective(tracked.x.numpy()), rel=1e-13, abs=1e-13)
    assert last["objective"] != last["objective_estimate"]


# ---- no compiler on the way to the first update ---------------------------------------------------

_FIRST_UPDATE = """
import json, sys
steps = []
def seen(step):
    steps.append([step, "torch._dynamo" in sys.modules])
import cvxpy as cp, torch, fullcomp as fc
seen("import fullcomp")
W = torch.rand(5, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
def group_losses(x, noise): return ((x - W) ** 2).sum(dim=1) + noise @ x
def sampler(gen): return 0.1 * torch.randn(5, 20, generator=gen, dtype=torch.float64)
u = fc.inner_value(5)
problem = fc.CompositeProblem(outer=fc.cvar(u, 0.4), inner=group_losses, domain=fc.Simplex(20), sampler=sampler)
seen("building the README's problem (its gradient check)")
fc.hmsfw(problem, iters=1, seed=0, progress=False)
seen("its first update")
V = torch.rand(50, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
wide = fc.CompositeProblem(cp.max(fc.inner_value(50)), lambda x, b: (x - V).pow(2).sum(1), fc.Simplex(20))
fc.hmsfw(wide, iters=1, seed=0, progress=False)
seen("a map of 50 outputs, built and updated")
net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
X = torch.randn(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
def phi(model, y, batch): return (model(batch).squeeze(-1) ** 2).mean() * (1 + y.sum()) - y @ y
dmax = fc.DMaxProblem(phi, x0=net, y0=torch.zeros(2, dtype=torch.float64), Y=fc.L2Ball(2, 1.0), full_batch=X)
res = fc.smag(dmax, iters=1, gamma=0.1, eta0=0.1, eta1=0.1, seed=0, progress=False)
fc.stationarity(dmax, res.x, 0.1, max_iter=5)
seen("a DMax problem's first update and its stationarity measure")
print(json.dumps(steps))
"""


def test_the_first_update_imports_no_compiler():
    """torch.func's grad, vjp and jacrev, and forward mode, import torch._dynamo on their first call: 1 to 2 s of a
    fresh process whose first update of the README's problem otherwise takes 0.03 s.  No step up to a first
    update may pay it (a fresh interpreter, so no earlier test has paid it already; no clock is read)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FIRST_UPDATE], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(steps) == 5
    assert [step for step, imported in steps if imported] == []


@pytest.mark.parametrize("n", [ROWS_BY_BACKWARD + 1, 7, 50])
def test_batched_rows_equal_jacrev_to_the_bit(n):
    """Above ROWS_BY_BACKWARD outputs the backward passes run as one (vmap over the engine): jacrev's Jacobian,
    so runs keep their trajectories, for maps reading x through broadcasts, products and selections."""
    from fullcomp.autodiff import jacobian

    gen = torch.Generator().manual_seed(n)
    A = torch.randn(4 * n, 30, dtype=torch.float64, generator=gen)
    W = torch.randn(n, 30, dtype=torch.float64, generator=gen)
    maps = [
        lambda x: ((x - W) ** 2).sum(dim=1) + W @ x,
        lambda x: ((A @ x - 1) ** 2).reshape(n, 4).mean(1),
        lambda x: torch.stack([torch.tanh(A[4 * i : 4 * i + 4] @ x).abs().max() for i in range(n)]),
        lambda x: (
            torch.nn.functional.huber_loss(x.index_select(0, torch.arange(4 * n) % 30), A[:, 0], reduction="none")
            .reshape(n, 4)
            .mean(1)
        ),
        lambda x: (A.float() @ x.float()).reshape(n, 4).logsumexp(1).double(),
    ]
    x = torch.randn(30, dtype=torch.float64, generator=gen)
    for f in maps:
        value, jac, batched = jacobian(f, x)
        assert batched
        assert torch.equal(jac, jacrev(f)(x)) and torch.equal(value, f(x))


def test_a_backward_pass_vmap_refuses_gets_its_rows_one_at_a_time():
    """A map whose backward pass reads a value (.item()) cannot be vmapped: its rows come from a loop, the same
    Jacobian, and the oracle keeps to the loop for the rest of the run."""

    class ReadsItsGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.exp()

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x.exp() * float(grad.abs().sum().item() >= 0)

    A = torch.randn(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def f(v):
        return ReadsItsGradient.apply(A @ v)

    oracle = InnerOracle(lambda v, b: f(v), 6, (5,), "cpu", torch.float64)
    assert oracle._batched
    _, jac = oracle(x, None, 0)
    assert not oracle._batched
    assert torch.equal(jac, rows_by_backward(f, x)[1])
    assert torch.allclose(jac, torch.exp(A @ x)[:, None] * A, rtol=1e-14, atol=0)
    assert torch.equal(oracle(x, None, 1)[1], jac)
