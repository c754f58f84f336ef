"""fc.Grouped: inner values declared as group means, their Jacobian taken group by group.

The values and the Jacobian must be the explicit per-group map's (the group means as a function of the flat
weights, differentiated by ``torch.autograd.functional.jacobian``), through ``fc.optim.HMSFW``'s closure and
through ``CompositeProblem`` + ``fc.solve``; one loss per group on its own sub-batch must cost one backward
pass of the batch, not one per group.
"""

from __future__ import annotations

import cvxpy as cp
import pytest
import torch
from torch.func import functional_call

import fullcomp as fc
from fullcomp.autodiff import dense
from fullcomp.errors import FullcompError, ModelError, OracleError
from fullcomp.oracles.jacobian import InnerOracle

PER_GROUP = 6
FORMS = ["rows", "parts"]


class RowCount(torch.autograd.Function):
    """The identity, counting the rows its backward passes carry: what a backward pass costs at the input."""

    rows = 0

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        RowCount.rows += grad.shape[0]
        return grad


class Counted(torch.nn.Module):
    def forward(self, x):
        return RowCount.apply(x)


def mlp(count: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    # The count sits after the first layer: the batch's inputs need no gradient, its activations do.
    counted = [Counted()] if count else []
    layers = [torch.nn.Flatten(), torch.nn.Linear(16, 5), *counted, torch.nn.Tanh(), torch.nn.Linear(5, 1)]
    return torch.nn.Sequential(*layers).double()


def cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 3, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(3 * 2 * 2, 1)
    ).double()


NETWORKS = {"mlp": mlp, "cnn": cnn}


def batches(count: int, m: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Group-balanced batches: (m, PER_GROUP, 1, 4, 4) images and their labels."""
    gen = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(m, PER_GROUP, 1, 4, 4, generator=gen, dtype=torch.float64),
            (torch.rand(m, PER_GROUP, generator=gen) < 0.5).double(),
        )
        for _ in range(count)
    ]


def row_losses(net, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.binary_cross_entropy_with_logits(net(X).reshape(-1), y.reshape(-1), reduction="none")


def grouped(net, batch, form: str) -> fc.Grouped:
    """The batch's group losses as fc.Grouped: rows shuffled with their group index, or one sub-batch each."""
    X, y = batch
    m = X.shape[0]
    if form == "parts":
        return fc.Grouped([row_losses(net, X[g], y[g]) for g in range(m)])
    order = torch.randperm(m * PER_GROUP, generator=torch.Generator().manual_seed(5)).to(X.device)
    groups = torch.arange(m, device=X.device).repeat_interleave(PER_GROUP)[order]
    return fc.Grouped(row_losses(net, X.reshape(-1, 1, 4, 4)[order], y.reshape(-1)[order]), groups, m)


def group_means(net, batch) -> torch.Tensor:
    """The explicit per-group map: each group's mean loss on its own rows."""
    X, y = batch
    return torch.stack([row_losses(net, X[g], y[g]).mean() for g in range(X.shape[0])])


def flat_of(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def reference(model: torch.nn.Module, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The group means and their Jacobian in the flat weights, by torch.autograd.functional.jacobian."""
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for p in model.parameters()]
    sizes = [p.numel() for p in model.parameters()]

    def of_flat(v: torch.Tensor) -> torch.Tensor:
        params = {n: part.view(s) for n, part, s in zip(names, v.split(sizes), shapes)}
        return group_means(lambda X: functional_call(model, params, (X,)), batch)

    v = flat_of(model)
    return of_flat(v).detach(), torch.autograd.functional.jacobian(of_flat, v)


@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("form, m", [("rows", 3), ("rows", 6), ("parts", 3), ("parts", 6)])
def test_the_oracle_takes_the_per_group_maps_values_and_jacobian(network: str, form: str, m: int) -> None:
    # m = 6 > ROWS_BY_BACKWARD: the per-row form's rows are vmapped there, one by one at m = 3.
    model = NETWORKS[network]()
    domain = fc.layer_domains(model, "l2", factor=3.0)
    fc.make_feasible(model, domain)
    batch = batches(1, m)[0]
    problem = fc.CompositeProblem(
        cp.max(fc.inner_value(m)), lambda net, b: grouped(net, b, form), domain, sampler=lambda g: batch, x0=model
    )
    oracle = InnerOracle(problem.inner_declared, m, (domain.size,), "cpu", torch.float64)
    value, jac = oracle(flat_of(model), batch, 0)
    want_value, want_jac = reference(model, batch)
    assert jac.shape == want_jac.shape == (m, domain.size)
    assert torch.allclose(value, want_value, rtol=0, atol=1e-12)
    assert torch.allclose(jac, want_jac, rtol=0, atol=1e-12)
    assert float(want_jac.abs().max()) > 1e-3  # a Jacobian of zeros would agree with anything
    # Everything that only evaluates the map sees the tensor of the group means.
    assert torch.allclose(problem.inner(flat_of(model), batch), want_value, rtol=0, atol=1e-12)


@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("form, m", [("rows", 4), ("rows", 6), ("parts", 4), ("parts", 6)])
def test_hmsfw_closure_steps_see_the_per_group_maps_values_and_jacobian(network: str, form: str, m: int) -> None:
    model = NETWORKS[network]()
    domain = fc.layer_domains(model, "l2", factor=3.0)
    fc.make_feasible(model, domain)
    # SCFW's tracked Jacobian is the last sample's, taken at the point the step wrote into the weights.
    opt = fc.optim.SCFW(model.parameters(), cp.max(fc.inner_value(m)), domain)
    for batch in batches(3, m):
        opt.step(lambda batch=batch: grouped(model, batch, form))
        state = opt.stepper.state
        want_value, want_jac = reference(model, batch)
        assert torch.equal(state.y.reshape(-1), flat_of(model))
        assert torch.allclose(state.sample, want_value, rtol=0, atol=1e-12)
        assert torch.allclose(dense(state.V), want_jac, rtol=0, atol=1e-12)  # as layer factors, where they fit


@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("form", FORMS)
def test_grouped_optimizer_and_solve_take_the_per_group_maps_iterates(network: str, form: str) -> None:
    m = 4
    data = batches(5, m)
    outer = fc.cvar(fc.inner_value(m), 0.5)

    def run_solve(inner) -> torch.Tensor:
        model = NETWORKS[network]()
        domain = fc.layer_domains(model, "l2", factor=3.0)
        fc.make_feasible(model, domain)
        current = [data[0]]
        problem = fc.CompositeProblem(outer, inner, domain, sampler=lambda g: current[0], x0=model)
        result = fc.solve(
            problem,
            "hmsfw",
            iters=4,
            seed=0,
            glmo="colgen",  # certified by discrete pricing; the dual route solves to Clarabel's tolerance
            progress=False,
            callback=lambda it: current.__setitem__(0, data[min(it.k + 1, len(data) - 1)]),
        )
        return torch.as_tensor(result.x).reshape(-1)

    def run_optim(closure_of) -> torch.Tensor:
        model = NETWORKS[network]()
        domain = fc.layer_domains(model, "l2", factor=3.0)
        fc.make_feasible(model, domain)
        opt = fc.optim.HMSFW(model.parameters(), outer, domain, glmo="colgen")
        for batch in data:
            opt.step(lambda batch=batch: closure_of(model, batch))
        return flat_of(model)

    explicit = run_solve(group_means)
    assert torch.allclose(run_solve(lambda net, b: grouped(net, b, form)), explicit, rtol=0, atol=1e-12)
    assert torch.allclose(run_optim(lambda net, b: grouped(net, b, form)), run_optim(group_means), atol=1e-12)
    start = NETWORKS[network]()
    fc.make_feasible(start, fc.layer_domains(start, "l2", factor=3.0))
    assert float((explicit - flat_of(start)).abs().max()) > 1e-3  # the runs moved


def rows_backpropagated(closure, model: torch.nn.Module, m: int) -> int:
    """The rows the backward passes of one update's Jacobian carry through the network's first layer."""
    domain = fc.L2Ball(sum(p.numel() for p in model.parameters()), 100.0)
    opt = fc.optim.SCFW(model.parameters(), cp.max(fc.inner_value(m)), domain)
    data = batches(2, m)
    opt.step(lambda: closure(model, data[0]))
    RowCount.rows = 0
    opt.step(lambda: closure(model, data[1]))
    return RowCount.rows


def test_grouped_forms_cost_one_backward_pass_of_the_batch() -> None:
    m = 4
    batch_rows = m * PER_GROUP
    per_sub_batch = rows_backpropagated(lambda net, b: grouped(net, b, "parts"), mlp(count=True), m)
    assert per_sub_batch == batch_rows  # each group's pass runs through its own rows only
    # Per-row losses of one forward pass through row-wise layers: one pass, the groups' gradients taken layer
    # by layer (fullcomp.layerwise).  The same values as one tensor: m passes over the whole batch.
    assert rows_backpropagated(lambda net, b: grouped(net, b, "rows"), mlp(count=True), m) == batch_rows
    assert rows_backpropagated(group_means, mlp(count=True), m) == m * batch_rows


def test_the_values_are_the_group_means() -> None:
    losses = torch.tensor([1.0, 2.0, 3.0, 10.0, 4.0], dtype=torch.float64)
    out = fc.Grouped(losses, torch.tensor([0, 0, 1, 2, 1]), 3)
    assert out.values().tolist() == [1.5, 3.5, 10.0]
    assert fc.Grouped([losses[:2], losses[2:]]).values().tolist() == [1.5, 17.0 / 3]


BAD = [
    (lambda: fc.Grouped(torch.ones(4), torch.tensor([0, 1, 2, 3]), 3), ModelError, r"groups holds 3, outside 0\.\.2"),
    (lambda: fc.Grouped(torch.ones(4), torch.tensor([0, -1, 1, 1]), 2), ModelError, "groups holds -1"),
    (lambda: fc.Grouped(torch.ones(4), torch.tensor([0.0, 1.0, 0.0, 1.0]), 2), ModelError, "groups must be an integer"),
    (lambda: fc.Grouped(torch.ones(4), torch.tensor([True, False] * 2), 2), ModelError, "groups must be an integer"),
    (lambda: fc.Grouped(torch.ones(4), [0, 1, 0, 1], 2), ModelError, "groups must be an integer tensor"),
    (lambda: fc.Grouped(torch.ones(4), torch.tensor([0, 1, 0]), 2), ModelError, "groups has shape"),
    (lambda: fc.Grouped(torch.ones(2, 2), torch.tensor([0, 1, 0, 1]), 2), ModelError, "losses must be the 1-D"),
    (lambda: fc.Grouped(torch.ones(4, dtype=torch.long), torch.tensor([0, 1, 0, 1]), 2), ModelError, "losses"),
    (lambda: fc.Grouped(torch.ones(4), torch.tensor([0, 1, 0, 1])), ModelError, "give m="),
    (lambda: fc.Grouped(torch.ones(4), torch.tensor([0, 1, 0, 1]), 0), ModelError, "m must be a positive int"),
    (lambda: fc.Grouped(torch.ones(4), torch.tensor([0, 1, 0, 1]), True), ModelError, "m must be a positive int"),
    (lambda: fc.Grouped(torch.ones(4), torch.tensor([0, 1, 0, 1]), 2.0), ModelError, "m must be a positive int"),
    (lambda: fc.Grouped(torch.ones(4)), ModelError, "losses must be a non-empty list"),
    (lambda: fc.Grouped([]), ModelError, "losses must be a non-empty list"),
    (lambda: fc.Grouped([torch.ones(3), 2.0]), ModelError, r"losses\[1\] must be a floating"),
    (lambda: fc.Grouped([torch.ones(3), torch.ones(2, dtype=torch.long)]), ModelError, r"losses\[1\]"),
    (lambda: fc.Grouped([torch.ones(3), torch.ones(2)], m=3), ModelError, "m=3 but losses holds 2"),
    (lambda: fc.Grouped(torch.ones(4), torch.tensor([0, 2, 0, 2]), 3), OracleError, r"group\(s\) \[1\] have no rows"),
    (lambda: fc.Grouped([torch.ones(3), torch.ones(0)]), OracleError, "group 1 has no rows"),
]


@pytest.mark.parametrize("make, error, message", BAD)
def test_bad_arguments_are_refused_naming_them(make, error, message) -> None:
    with pytest.raises(error, match=message) as caught:
        make()
    assert isinstance(caught.value, FullcompError)


def test_a_grouped_map_of_the_wrong_length_is_refused() -> None:
    model = mlp()
    domain = fc.layer_domains(model, "l2", factor=3.0)
    fc.make_feasible(model, domain)
    batch = batches(1, 3)[0]
    with pytest.raises(ModelError, match=r"shape \(3,\).*fc.inner_value\(4\)"):
        fc.CompositeProblem(
            cp.max(fc.inner_value(4)),
            lambda net, b: grouped(net, b, "parts"),
            domain,
            sampler=lambda g: batch,
            x0=model,
        )
    opt = fc.optim.HMSFW(model.parameters(), cp.max(fc.inner_value(4)), domain)
    with pytest.raises(FullcompError, match=r"\(3,\)"):
        opt.step(lambda: grouped(model, batch, "rows"))


@pytest.mark.parametrize("form", FORMS)
def test_deterministic_frank_wolfe_takes_the_per_group_maps_iterates(form: str) -> None:
    # fw differentiates the map through its own oracle, on the full batch.
    m = 3
    batch = batches(1, m)[0]

    def run(inner) -> torch.Tensor:
        model = mlp()
        # l1 blocks: their GLMO is column generation, whose discrete pricing the Jacobians' last-bit rounding
        # does not move (the l2 blocks' dual route solves to Clarabel's tolerance, far above 1e-12)
        domain = fc.layer_domains(model, "l1", factor=3.0)
        fc.make_feasible(model, domain)
        problem = fc.CompositeProblem(
            cp.max(fc.inner_value(m)), inner, domain, sampler=lambda g: batch, x0=model, full_batch=batch
        )
        return torch.as_tensor(fc.solve(problem, "fw", iters=4, corrective="vanilla", progress=False).x).reshape(-1)

    explicit = run(group_means)
    assert torch.allclose(run(lambda net, b: grouped(net, b, form)), explicit, rtol=0, atol=1e-12)


def test_smag_refuses_a_grouped_closure() -> None:
    # SMAG's closure returns phi (or phi and psi), one value: m group means would be taken for phi silently.
    model = mlp()
    opt = fc.optim.SMAG(model.parameters(), gamma=0.5, eta0=0.1, eta1=0.1)
    batch = batches(1, 3)[0]
    with pytest.raises(ModelError, match="SMAG's closure returns phi"):
        opt.step(lambda: grouped(model, batch, "parts"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("form", FORMS)
def test_the_cuda_run_takes_the_cpu_runs_iterates(form: str) -> None:
    m = 4
    data = batches(3, m)

    def run(device: str) -> torch.Tensor:
        model = cnn().to(device)
        domain = fc.layer_domains(model, "l2", factor=3.0)
        fc.make_feasible(model, domain)
        opt = fc.optim.HMSFW(model.parameters(), cp.max(fc.inner_value(m)), domain)
        for X, y in data:
            batch = (X.to(device), y.to(device))
            opt.step(lambda batch=batch: grouped(model, batch, form))
        return flat_of(model).cpu()

    assert torch.allclose(run("cuda"), run("cpu"), rtol=0, atol=1e-9)
