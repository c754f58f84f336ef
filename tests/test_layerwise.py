"""fullcomp.layerwise: the group gradients of per-row losses from one backward pass, against each group's own
gradient by torch.autograd.grad, and the cases where the path must step aside."""

from __future__ import annotations

import copy
import io

import cvxpy as cp
import pytest
import torch

import fullcomp as fc
from fullcomp.layerwise import LayerGradients

M = 3


def reference(losses: torch.Tensor, groups: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    """Each group's mean loss differentiated on its own: the independent answer."""
    rows = []
    for g in range(M):
        grads = torch.autograd.grad(losses[groups == g].mean(), params, retain_graph=True, allow_unused=True)
        rows.append(torch.cat([(torch.zeros_like(p) if d is None else d).reshape(-1) for p, d in zip(params, grads)]))
    return torch.stack(rows)


def layerwise(net: torch.nn.Module, forward, X: torch.Tensor, groups: torch.Tensor):
    params = list(net.parameters())
    layers = LayerGradients(params)
    with layers.capture():
        losses = forward(net, X)
    jac = layers.jacobian(fc.Grouped(losses, groups, M), torch.float64)
    return jac, layers, forward(net, X), params


def groups_of(rows: int) -> torch.Tensor:
    groups = torch.arange(rows) % M
    groups[:2] = 0  # unequal sizes, rows not in group order
    return groups[torch.randperm(rows, generator=torch.Generator().manual_seed(1))]


def flat_losses(net: torch.nn.Module, X: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softplus(net(X).reshape(X.shape[0], -1).sum(1))


class Shared(torch.nn.Module):
    """One Linear layer called twice in the forward pass."""

    def __init__(self, width: int = 5):
        super().__init__()
        self.a, self.b = torch.nn.Linear(width, width), torch.nn.Linear(width, 1)

    def forward(self, X):
        return self.b(torch.tanh(self.a(torch.tanh(self.a(X)))))


class Sequence(torch.nn.Module):
    """A Linear layer on (rows, steps, features) inputs and a Conv1d."""

    def __init__(self):
        super().__init__()
        self.conv, self.head = torch.nn.Conv1d(4, 3, 3, padding=1), torch.nn.Linear(3, 2)

    def forward(self, X):
        return self.head(torch.tanh(self.conv(X)).transpose(1, 2))


NETWORKS = {
    "mlp": (lambda: torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)), (6,)),
    "cnn": (
        lambda: torch.nn.Sequential(
            torch.nn.Conv2d(2, 4, 3, stride=2, padding=1),
            torch.nn.Tanh(),
            torch.nn.Conv2d(4, 3, 3, dilation=2),
            torch.nn.Flatten(),
            torch.nn.Linear(3 * 2 * 2, 1),
        ),
        (2, 12, 12),
    ),
    "shared": (Shared, (5,)),
    "sequence": (Sequence, (4, 7)),
    "no-bias": (
        lambda: torch.nn.Sequential(torch.nn.Linear(6, 4, bias=False), torch.nn.Tanh(), torch.nn.Linear(4, 1)),
        (6,),
    ),
}


@pytest.mark.parametrize("order", ["shuffled", "sorted", "balanced"])
@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_group_gradients_match_each_groups_own(name, order):
    torch.manual_seed(0)
    build, shape = NETWORKS[name]
    net = build().double()
    rows = 5 * M if order == "balanced" else 17
    X = torch.randn(rows, *shape, dtype=torch.float64)
    groups = groups_of(rows)
    if order == "sorted":  # each group's rows already together: read in place
        groups = groups.sort().values
    if order == "balanced":  # groups of one size, in order: one batched product a layer
        groups = torch.arange(rows) // (rows // M)
    jac, layers, losses, params = layerwise(net, flat_losses, X, groups)
    assert jac is not None and layers.enabled and jac.equal == (order == "balanced")
    want = reference(losses, groups, params)
    torch.testing.assert_close(jac.dense(), want, rtol=1e-10, atol=1e-12)
    # The Polyak tracker's blend, written from the factors into another buffer: (1 - w) V + w J.
    previous = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    out = torch.full_like(previous, float("nan"))
    assert jac.blend(previous, 0.3, out) is out
    torch.testing.assert_close(out, torch.lerp(previous, want, 0.3), rtol=1e-10, atol=1e-12)
    assert jac.blend(previous, 0.3, previous) is previous  # in place, as fc.optim's loop blends
    torch.testing.assert_close(previous, out, rtol=1e-12, atol=1e-14)
    assert jac.finite() and jac.shape == tuple(want.shape)
    # J theta at the parameters of the forward pass, from the layers' outputs (the tracker's V y recursion)
    theta = torch.cat([p.detach().reshape(-1) for p in params])
    torch.testing.assert_close(jac.at_sample(), want @ theta, rtol=1e-10, atol=1e-12)


def test_the_product_at_the_sample_leaves_out_a_bias_that_is_not_optimized():
    """A layer's output holds its bias; where the bias is not one of the params, J has no columns for it."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv1d(2, 3, 3), torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(9, 1))
    net = net.double()
    params = [net[0].weight, net[3].weight]  # both biases fixed
    X = torch.randn(12, 2, 5, dtype=torch.float64)
    groups = groups_of(12)
    layers = LayerGradients(params)
    with layers.capture():
        losses = flat_losses(net, X)
    jac = layers.jacobian(fc.Grouped(losses, groups, M), torch.float64)
    assert jac is not None
    want = reference(flat_losses(net, X), groups, params)
    theta = torch.cat([p.detach().reshape(-1) for p in params])
    torch.testing.assert_close(jac.at_sample(), want @ theta, rtol=1e-10, atol=1e-12)


def test_a_parameter_outside_the_layers_takes_the_caller_path():
    net = torch.nn.Linear(4, 1).double()
    scale = torch.nn.Parameter(torch.tensor(2.0, dtype=torch.float64))
    params = [*net.parameters(), scale]
    layers = LayerGradients(params)
    X = torch.randn(9, 4, dtype=torch.float64)
    with layers.capture():
        losses = (scale * net(X)).reshape(-1) ** 2
    assert layers.jacobian(fc.Grouped(losses, groups_of(9), M), torch.float64) is None
    assert not layers.enabled


@pytest.mark.parametrize(
    "mixing",
    [
        lambda: torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 1)),
        lambda: torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(inplace=True), torch.nn.Linear(5, 1)),
        lambda: torch.nn.Sequential(
            torch.nn.Unflatten(1, (1, 4)),
            torch.nn.Conv1d(1, 2, 3, padding=1, padding_mode="reflect"),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 1),
        ),
        lambda: torch.nn.Sequential(
            torch.nn.Unflatten(1, (1, 4)),
            torch.nn.Conv1d(1, 2, 3, padding="same"),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 1),
        ),
    ],
    ids=["batch-norm", "in-place-relu", "reflect-padding", "same-padding"],
)
def test_layers_it_cannot_read_row_by_row_take_the_caller_path(mixing):
    torch.manual_seed(0)
    net = mixing().double()
    jac, layers, _, _ = layerwise(net, flat_losses, torch.randn(12, 4, dtype=torch.float64), groups_of(12))
    assert jac is None and not layers.enabled


def test_rows_mixed_without_parameters_are_detected():
    torch.manual_seed(0)
    first, last = torch.nn.Linear(4, 5).double(), torch.nn.Linear(5, 1).double()
    net = torch.nn.ModuleList([first, last])

    def centred(net, X):
        h = first(X)
        return last(h - h.mean(0)).reshape(-1) ** 2

    jac, layers, _, _ = layerwise(net, centred, torch.randn(12, 4, dtype=torch.float64), groups_of(12))
    assert jac is None and not layers.enabled


def test_one_loss_per_group_is_left_to_its_sub_batches():
    net = torch.nn.Linear(4, 1).double()
    layers = LayerGradients(list(net.parameters()))
    X = torch.randn(6, 4, dtype=torch.float64)
    with layers.capture():
        out = fc.Grouped([net(X[:3]).reshape(-1), net(X[3:]).reshape(-1)])
    assert layers.jacobian(out, torch.float64) is None
    assert layers.enabled  # the next batch may use the per-row form


@pytest.mark.parametrize("mixing", [False, True], ids=["row-wise", "batch-norm"])
def test_optimizer_takes_the_same_steps_as_with_the_group_means(mixing):
    """fc.optim.HMSFW on the per-row form (layer by layer, or the caller's passes for a batch norm) takes the
    iterates of the same optimizer on the tensor of group means."""
    torch.manual_seed(0)
    hidden = [torch.nn.BatchNorm1d(5)] if mixing else []
    initial = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), *hidden, torch.nn.Linear(5, 1)).double()
    domain = fc.layer_domains(initial, "l2", factor=2.0)
    fc.make_feasible(initial, domain)
    X, y = torch.randn(5, 24, 4, dtype=torch.float64), torch.rand(5, 24, dtype=torch.float64)
    groups = groups_of(24)
    points = []
    for form in ("rows", "means"):
        net = copy.deepcopy(initial)
        opt = fc.optim.HMSFW(net.parameters(), cp.max(fc.inner_value(M)), domain)

        def closure(net=net, k=0, form=form):
            losses = (net(X[k]).reshape(-1) - y[k]) ** 2
            out = fc.Grouped(losses, groups, M)
            return out if form == "rows" else out.values()

        for k in range(5):
            opt.step(lambda k=k, net=net: closure(net, k))
        points.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
    # the GLMO is certified to its tolerance, not to the last bit: iterates agree to it
    torch.testing.assert_close(points[0], points[1], rtol=1e-6, atol=1e-8)


def test_a_loop_on_the_per_row_form_resumes_bit_for_bit():
    """fc.optim blends the layer factors into its tracked Jacobian in place: a loop saved after 3 steps and
    resumed in a fresh model and optimizer ends where the uninterrupted loop ends."""
    torch.manual_seed(0)
    initial = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1)).double()
    domain = fc.layer_domains(initial, "l2", factor=2.0)
    fc.make_feasible(initial, domain)
    X, y = torch.randn(6, 3 * M, 4, dtype=torch.float64), torch.rand(6, 3 * M, dtype=torch.float64)
    groups = torch.arange(3 * M) // 3  # balanced: one batched product a layer

    def run(net, opt, ks):
        for k in ks:
            opt.step(lambda k=k: fc.Grouped((net(X[k]).reshape(-1) - y[k]) ** 2, groups, M))
        return torch.cat([p.detach().reshape(-1) for p in net.parameters()])

    net = copy.deepcopy(initial)
    opt = fc.optim.HMSFW(net.parameters(), cp.max(fc.inner_value(M)), domain)
    run(net, opt, range(3))
    buffer = io.BytesIO()
    torch.save({"model": net.state_dict(), "opt": opt.state_dict()}, buffer)
    straight = run(net, opt, range(3, 6))
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    other = copy.deepcopy(initial)
    other.load_state_dict(saved["model"])
    resumed = fc.optim.HMSFW(other.parameters(), cp.max(fc.inner_value(M)), domain)
    resumed.load_state_dict(saved["opt"])
    assert torch.equal(run(other, resumed, range(3, 6)), straight)
