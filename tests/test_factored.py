"""A sampled group Jacobian kept as its layers' factors (fullcomp.layerwise.FactoredJacobian): its Gram
matrices, products and points against the written-out array and each group's own autograd gradient, the dual
GLMO on it against CVXPY, and fc.optim.SCFW on it against the same loop on the array."""

from __future__ import annotations

import copy
import functools
import io

import cvxpy as cp
import numpy as np
import pytest
import torch
from test_layerwise import Shared  # a wide Linear layer called twice, then a one-output head (written out)

import fullcomp as fc
from fullcomp.algorithms.iterate import DenseIterate
from fullcomp.autodiff import dense
from fullcomp.glmo import dual
from fullcomp.glmo.dual import BlockPoint, DualBallGLMO
from fullcomp.layerwise import DenseColumns, FactoredJacobian, FactoredPoint, LayerGradients, RowFactors
from fullcomp.oracles import tracked
from fullcomp.trackers import Revision

M = 3
ROWS = 9  # fewer than the wide layers' inputs and outputs: their weight gradients are kept as factors


class Mixed(torch.nn.Module):
    """A convolution (written out), a Linear layer on (rows, steps, features) and a bias-free wide layer."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(2, 3, 3, padding=1)
        self.steps = torch.nn.Linear(3, 40)
        self.wide = torch.nn.Linear(40 * 4, 16, bias=False)
        self.head = torch.nn.Linear(16, 1)

    def forward(self, X):
        h = torch.tanh(self.steps(torch.tanh(self.conv(X)).transpose(1, 2)))
        return self.head(torch.tanh(self.wide(h.reshape(X.shape[0], -1))))


NETWORKS = {
    "mlp": (lambda: torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)), (20,)),
    "shared": (
        functools.partial(Shared, 24),
        (24,),
    ),  # its two calls' rows make one factor of 2 x 9 rows, fewer than its 24 features
    "mixed": (Mixed, (2, 4)),  # the steps layer has 9 x 4 rows, more than its 3 inputs: written out
}


def sample(name: str, order: str = "shuffled"):
    """A network's group Jacobian at its parameters, as LayerJacobian, with its losses and parameters."""
    torch.manual_seed(0)
    build, shape = NETWORKS[name]
    net = build().double()
    X = torch.randn(ROWS, *shape, dtype=torch.float64)
    groups = torch.arange(ROWS) % M
    if order == "shuffled":
        groups = groups[torch.randperm(ROWS, generator=torch.Generator().manual_seed(1))]
    params = list(net.parameters())
    layers = LayerGradients(params)
    with layers.capture():
        losses = torch.nn.functional.softplus(net(X).reshape(ROWS))
    jac = layers.jacobian(fc.Grouped(losses, groups, M), torch.float64)
    assert jac is not None
    reference = []
    for g in range(M):
        again = torch.nn.functional.softplus(net(X[groups == g]).reshape(-1)).mean()
        grads = torch.autograd.grad(again, params)
        reference.append(torch.cat([d.reshape(-1) for d in grads]))
    return jac, torch.stack(reference), params


def flat(params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def param_slices(params: list[torch.Tensor]) -> list[slice]:
    bounds = np.cumsum([0, *(p.numel() for p in params)])
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


@pytest.mark.parametrize("order", ["shuffled", "sorted"])
@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_the_factors_give_the_array_its_gram_matrices_products_and_points(name: str, order: str) -> None:
    jac, want, params = sample(name, order)
    at = flat(params)
    V = jac.factored(at)
    kinds = [type(piece) for piece in V.pieces]
    assert RowFactors in kinds and DenseColumns in kinds
    assert V.shape == tuple(want.shape) and V.finite()
    torch.testing.assert_close(V.dense(), want, rtol=1e-10, atol=1e-12)  # each group's own gradient
    slices = param_slices(params)
    torch.testing.assert_close(V.grams(slices), torch.stack([want[:, s] @ want[:, s].T for s in slices]))
    # J w by one product a layer, at the sampled point (and a copy of it) as anywhere else
    torch.testing.assert_close(V @ at, want @ at, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(V @ at.clone(), want @ at, rtol=1e-10, atol=1e-12)
    w = torch.randn(at.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(V @ w, want @ w, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(V.norm(), torch.linalg.norm(want))
    # two blocks, the first of every parameter but the last: x_b = V_b^T a_b, and y + gamma (x - y)
    blocks = [slice(0, slices[-1].start), slices[-1]]
    a = torch.randn(2, M, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    x = torch.cat([want[:, s].T @ a_b for s, a_b in zip(blocks, a)])
    point = FactoredPoint(V, a, blocks, tuple(at.shape))
    torch.testing.assert_close(point.dense(), x, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(point.lerp(w, 0.3), torch.lerp(w, x, 0.3), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(V.grams(blocks)[0], want[:, blocks[0]] @ want[:, blocks[0]].T)
    # a block that splits a parameter cannot be read from the factors
    assert V.grams([slice(0, 1), slice(1, at.numel())]) is None


def cvxpy_optimum(F, domain: fc.Set, z: np.ndarray, V: np.ndarray, y: np.ndarray) -> float:
    x = cp.Variable(V.shape[1])
    problem = cp.Problem(cp.Minimize(F(z + V @ (x - y))), domain.cvxpy_constraints(x))
    problem.solve(solver=cp.CLARABEL)
    return float(problem.value)


@pytest.mark.parametrize("risk", ["max", "cvar"])
def test_the_dual_glmo_on_the_factors_reaches_cvxpys_optimum(risk: str) -> None:
    jac, want, params = sample("mlp")
    at = flat(params)
    V = jac.factored(at)
    domain = fc.Product(*(fc.L2Ball(p.numel(), 0.5 + i) for i, p in enumerate(params)))
    F = cp.max if risk == "max" else (lambda u: fc.cvar(u, 0.5))
    glmo = fc.build_glmo(F(fc.inner_value(M)), domain)
    assert isinstance(glmo, DualBallGLMO) and glmo.takes_factored
    z = np.array([0.3, -0.2, 0.1])
    res = glmo.solve(z, V, at)
    assert isinstance(res.x, FactoredPoint)  # never written out by the GLMO
    x = res.x.dense().numpy()
    optimum = cvxpy_optimum(F, domain, z, want.numpy(), at.numpy())
    assert domain.contains(x, tol=1e-9)
    assert res.value == pytest.approx(glmo.outer.value(z + want.numpy() @ (x - at.numpy())), abs=1e-9)
    assert abs(res.value - optimum) <= 1e-6 * max(1.0, abs(optimum))
    assert 0.0 <= res.gap_bound <= 1e-6 and res.converged
    dense = glmo.solve(z, want, at)  # the same call on the array, to the certificate's accuracy
    assert abs(dense.value - res.value) <= 1e-6
    np.testing.assert_allclose(x, dense.x.numpy(), atol=1e-6)
    # blocks that split a parameter: the array is written out and the answer is the same
    split = fc.Product(fc.L2Ball(5, 1.0), fc.L2Ball(at.numel() - 5, 2.0))
    glmo = fc.build_glmo(cp.max(fc.inner_value(M)), split)
    res, dense = glmo.solve(z, V, at), glmo.solve(z, want, at)
    assert torch.is_tensor(res.x) and abs(res.value - dense.value) <= 1e-6


def loop(method, initial, domain, steps, factored=True, resume_at=None, monkeypatch=None, **options):
    """fc.optim's loop on balanced groups; with ``resume_at``, saved there by torch.save and resumed in a fresh
    model and optimizer.  The parameters at the end, and the types of the tracked V along the way."""
    if monkeypatch is not None and not factored:
        monkeypatch.setattr(DualBallGLMO, "takes_factored", False)
    gen = torch.Generator().manual_seed(5)
    features = initial[0].in_features
    X = torch.randn(steps, 3 * 8, features, dtype=torch.float64, generator=gen)
    y = torch.rand(steps, 3 * 8, generator=gen)
    groups = torch.arange(3 * 8) // 8
    net = copy.deepcopy(initial)
    opt = method(net.parameters(), cp.max(fc.inner_value(M)), domain, **options)
    kinds = []
    for k in range(steps):
        if k == resume_at:
            buffer = io.BytesIO()
            torch.save({"model": net.state_dict(), "opt": opt.state_dict()}, buffer)
            buffer.seek(0)
            saved = torch.load(buffer, weights_only=True)
            net = copy.deepcopy(initial)
            net.load_state_dict(saved["model"])
            opt = method(net.parameters(), cp.max(fc.inner_value(M)), domain, **options)
            opt.load_state_dict(saved["opt"])
        opt.step(lambda k=k, net=net: fc.Grouped((net(X[k]).reshape(-1) - y[k]) ** 2, groups, M))
        kinds.append(type(opt.stepper.state.V))
    return flat(list(net.parameters())), kinds


@pytest.fixture
def wide():
    torch.manual_seed(0)
    initial = torch.nn.Sequential(torch.nn.Linear(40, 30), torch.nn.Tanh(), torch.nn.Linear(30, 1)).double()
    domain = fc.layer_domains(initial, "l2", factor=2.0)
    fc.make_feasible(initial, domain)
    return initial, domain


def test_scfw_keeps_each_sample_as_factors_and_takes_the_arrays_steps(wide, monkeypatch) -> None:
    initial, domain = wide
    factored, kinds = loop(fc.optim.SCFW, initial, domain, 6)
    assert kinds == [FactoredJacobian] * 6
    dense, kinds = loop(fc.optim.SCFW, initial, domain, 6, factored=False, monkeypatch=monkeypatch)
    assert kinds == [torch.Tensor] * 6
    # the GLMO is certified to its tolerance, not to the last bit: iterates agree to it
    torch.testing.assert_close(factored, dense, rtol=1e-6, atol=1e-8)
    monkeypatch.setattr(tracked, "IMAGE_SIZE", 0)  # V y from the layers' outputs, handed to the GLMO
    monkeypatch.setattr(DualBallGLMO, "takes_factored", True)
    imaged, kinds = loop(fc.optim.SCFW, initial, domain, 6)
    assert kinds == [FactoredJacobian] * 6
    torch.testing.assert_close(imaged, factored, rtol=1e-6, atol=1e-8)


def test_scfw_on_factors_resumes_bit_for_bit(wide) -> None:
    initial, domain = wide
    straight, _ = loop(fc.optim.SCFW, initial, domain, 6)
    resumed, kinds = loop(fc.optim.SCFW, initial, domain, 6, resume_at=3)
    assert kinds[-1] is FactoredJacobian and torch.equal(resumed, straight)


def test_a_tracker_that_keeps_part_of_a_factored_sample_writes_it_out(wide, monkeypatch) -> None:
    """beta = 1 at the first two steps (the samples kept as factors), then 1/2: the Polyak tracker blends the
    written-out sample; rho = 1/2 from the second step, where the Taylor tracker's product with a factored V is
    a product a layer.  (A step k reads beta and rho at k + 1.)"""
    initial, domain = wide

    def schedule(k: int) -> tuple[float, float, float]:
        return 2.0 / (k + 2), 1.0 if k < 3 else 0.5, 1.0 if k < 2 else 0.5

    options = {"schedule": schedule}
    factored, kinds = loop(fc.optim.HMSFW, initial, domain, 5, **options)
    assert kinds == [FactoredJacobian, FactoredJacobian, torch.Tensor, torch.Tensor, torch.Tensor]
    dense, _ = loop(fc.optim.HMSFW, initial, domain, 5, factored=False, monkeypatch=monkeypatch, **options)
    torch.testing.assert_close(factored, dense, rtol=1e-6, atol=1e-8)


def test_a_network_without_a_wide_linear_layer_keeps_the_array(monkeypatch) -> None:
    """No weight gradient of lower rank than its shape (a convolution, a one-output head): nothing to gain."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(40, 2), torch.nn.Tanh(), torch.nn.Linear(2, 1)).double()
    domain = fc.layer_domains(net, "l2", factor=2.0)
    fc.make_feasible(net, domain)
    _, kinds = loop(fc.optim.SCFW, net, domain, 2)
    assert kinds == [torch.Tensor] * 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_factors_give_the_cpu_answer_on_the_device() -> None:
    jac, want, params = sample("mlp")
    torch.manual_seed(0)  # the network and batch of sample("mlp"), on the device
    build, shape = NETWORKS["mlp"]
    gpu = build().double().cuda()
    X = torch.randn(ROWS, *shape, dtype=torch.float64).cuda()
    assert torch.equal(flat(list(gpu.parameters())).cpu(), flat(params))
    groups = (torch.arange(ROWS) % M)[torch.randperm(ROWS, generator=torch.Generator().manual_seed(1))].cuda()
    layers = LayerGradients(list(gpu.parameters()))
    with layers.capture():
        losses = torch.nn.functional.softplus(gpu(X).reshape(ROWS))
    V = layers.jacobian(fc.Grouped(losses, groups, M), torch.float64).factored(flat(list(gpu.parameters())))
    assert V is not None and V.at.device.type == "cuda"
    torch.testing.assert_close(V.dense().cpu(), want, rtol=1e-10, atol=1e-12)
    domain = fc.Product(*(fc.L2Ball(p.numel(), 1.0) for p in params))
    glmo = fc.build_glmo(cp.max(fc.inner_value(M)), domain)
    z = np.array([0.3, -0.2, 0.1])
    res, cpu = glmo.solve(z, V, V.at), glmo.solve(z, want, flat(params))
    x = res.x.dense()
    assert x.device.type == "cuda" and abs(res.value - cpu.value) <= 1e-8
    torch.testing.assert_close(x.cpu(), cpu.x, rtol=0, atol=1e-6)


def test_a_layer_called_on_more_rows_than_its_features_is_written_out() -> None:
    """Called twice on 9 rows, a 12 x 12 layer's gradient has rank up to 12: its 18 rows' factors cost more."""
    torch.manual_seed(0)
    net = torch.nn.Linear(12, 12).double()
    X = torch.randn(ROWS, 12, dtype=torch.float64)
    groups = torch.arange(ROWS) % M
    layers = LayerGradients(list(net.parameters()))
    with layers.capture():
        losses = torch.nn.functional.softplus(net(torch.tanh(net(X))).sum(1))
    jac = layers.jacobian(fc.Grouped(losses, groups, M), torch.float64)
    assert jac is not None and jac.factored(flat(list(net.parameters()))) is None


def test_the_tracker_keeps_v_y_by_its_recursion_and_the_step_forms_the_point(wide, monkeypatch) -> None:
    """HMSFW's V_k y_k kept by (1 - beta)(V_{k-1} y_{k-1} + gamma (u - z)) + beta J y_k against the product itself
    at every step, and the whole loop against the one where the GLMO makes its own pass and writes x."""
    initial, domain = wide
    straight, _ = loop(fc.optim.HMSFW, initial, domain, 6)
    monkeypatch.setattr(tracked, "IMAGE_SIZE", 0)  # the recursion and the point by the step on a small network
    monkeypatch.setattr(dual, "NUMPY_SIZE", 0)
    forms = []
    move = DenseIterate.move
    monkeypatch.setattr(DenseIterate, "move", lambda self, y, *a: forms.append(type(a[1].x)) or move(self, y, *a))
    gen = torch.Generator().manual_seed(5)
    X, y = torch.randn(6, 24, 40, dtype=torch.float64, generator=gen), torch.rand(6, 24, generator=gen)
    net = copy.deepcopy(initial)
    opt = fc.optim.HMSFW(net.parameters(), cp.max(fc.inner_value(M)), domain)
    for k in range(6):
        opt.step(lambda k=k: fc.Grouped((net(X[k]).reshape(-1) - y[k]) ** 2, torch.arange(24) // 8, M))
        state = opt.stepper.state
        assert state.revision.image is not None
        torch.testing.assert_close(state.revision.image, dense(state.V) @ state.y, rtol=1e-9, atol=1e-12)
    assert forms and set(forms) == {BlockPoint}
    recursed, _ = loop(fc.optim.HMSFW, initial, domain, 6)
    torch.testing.assert_close(recursed, straight, rtol=1e-6, atol=1e-8)  # to the GLMO's certified accuracy
    resumed, _ = loop(fc.optim.HMSFW, initial, domain, 6, resume_at=3)  # the kept V y is the checkpoint's
    assert torch.equal(resumed, recursed)


def test_the_dual_glmo_takes_the_trackers_v_y_and_gives_its_point_to_the_step(monkeypatch) -> None:
    gen = torch.Generator().manual_seed(0)
    V, y = torch.randn(M, 50, dtype=torch.float64, generator=gen), torch.randn(50, dtype=torch.float64, generator=gen)
    y = y / (2 * torch.linalg.norm(y))
    z = np.array([0.3, -0.2, 0.1])
    domain = fc.Product(fc.L2Ball(20, 1.0), fc.L2Ball(30, 0.5))
    glmo = fc.build_glmo(cp.max(fc.inner_value(M)), domain)
    written = glmo.solve(z, V, y)
    assert torch.is_tensor(written.x)  # lazy_point is off: a caller of the GLMO itself gets the array
    monkeypatch.setattr(dual, "NUMPY_SIZE", 0)
    glmo.lazy_point = True
    lazy = glmo.solve(z, V, y, revision=Revision(0, image=(V @ y).double()))
    assert isinstance(lazy.x, BlockPoint) and abs(lazy.value - written.value) <= 1e-7  # Clarabel's accuracy
    x = lazy.x.dense()  # the same program up to V y's rounding: the same point to the solver's accuracy
    torch.testing.assert_close(x, written.x, rtol=0, atol=1e-7)
    torch.testing.assert_close(lazy.x.lerp(y, 0.3), torch.lerp(y, x, 0.3), rtol=0, atol=1e-12)
    np.testing.assert_allclose(lazy.inner, z + (V @ (x - y)).numpy(), rtol=0, atol=1e-9)
    # the tracker's V y is what the program reads: a wrong one moves the answer
    off = glmo.solve(z, V, y, revision=Revision(0, image=(V @ y).double() + 1.0))
    assert abs(off.value - (written.value - 1.0)) <= 1e-6
