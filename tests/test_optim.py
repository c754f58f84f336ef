"""fc.optim: the composite methods as torch.optim optimizers take fc.solve's iterates on the same batches."""

from __future__ import annotations

import cvxpy as cp
import pytest
import torch
from torch.func import functional_call

import fullcomp as fc
from fullcomp.errors import OptionError

GROUPS, FEATURES = 4, 6


def network() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)).double()


def batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(count):
        X = torch.randn(GROUPS, 8, FEATURES, generator=gen, dtype=torch.float64)
        y = (torch.rand(GROUPS, 8, generator=gen) < 0.5).double()
        out.append((X, y))
    return out


def group_losses(model, batch) -> torch.Tensor:
    X, y = batch
    logits = model(X).squeeze(-1)
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none").mean(dim=1)


def flat_problem(model, domain, outer, current):
    """The same problem declared by hand on the flat parameter vector; every draw is ``current[0]``."""
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    x0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    def inner(v, batch):
        params = {n: part.view(s) for n, part, s in zip(names, v.split(sizes), shapes)}
        return group_losses(lambda X: functional_call(model, params, (X,)), batch)

    return fc.CompositeProblem(
        outer, inner, domain, sampler=lambda gen: current[0], x0=x0.numpy(), check_gradient=False
    )


@pytest.mark.parametrize(
    "optimizer, method, options",
    [
        (fc.optim.HMSFW, "hmsfw", {}),
        (fc.optim.HMSFW, "hmsfw", {"variant": "polyak", "tracker": "storm"}),
        (fc.optim.SCFW, "scfw", {}),
        (fc.optim.PSG, "psg", {}),
    ],
)
@pytest.mark.parametrize("risk", ["max", "cvar"])
def test_the_optimizer_in_a_loop_takes_the_iterates_of_solve(optimizer, method, options, risk):
    u = fc.inner_value(GROUPS)
    outer = cp.max(u) if risk == "max" else fc.cvar(u, 0.5)
    data = batches(6)
    model = network()
    size = sum(p.numel() for p in model.parameters())
    domain = fc.L2Ball(size, 10.0)
    # Every draw of update k is batch k, as the closure of the loop's step k; the set-up's is batch 0.
    current = [data[0]]
    solved = fc.solve(
        flat_problem(network(), domain, outer, current),
        method,
        iters=6,
        seed=0,
        progress=False,
        callback=lambda it: current.__setitem__(0, data[min(it.k + 1, len(data) - 1)]),
        **options,
    )
    opt = optimizer(model.parameters(), outer, domain, **options)
    for batch in data:
        opt.step(lambda batch=batch: group_losses(model, batch))
    point = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.allclose(point, solved.x, rtol=0, atol=1e-12)
    assert opt.weights is not None and opt.weights.sum() == pytest.approx(1.0)


def test_per_layer_domains_and_state_dict():
    u = fc.inner_value(GROUPS)
    model = network()
    groups = [{"params": [p], "domain": fc.L2Ball(p.numel(), 5.0)} for p in model.parameters()]
    opt = fc.optim.HMSFW(groups, fc.cvar(u, 0.5))
    data = batches(5)
    for batch in data[:3]:
        opt.step(lambda batch=batch: group_losses(model, batch))
    saved = opt.state_dict()
    assert saved["method"] == "hmsfw" and saved["stepper"]["k"] == 3
    for batch in data[3:]:
        opt.step(lambda batch=batch: group_losses(model, batch))
    straight = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    for p in model.parameters():
        assert float(p.detach().norm()) <= 5.0 + 1e-9  # each layer stays in its own ball
    # a fresh optimizer loaded with the state after 3 steps continues to the same point
    other = network()
    with torch.no_grad():
        for p, q in zip(other.parameters(), model.parameters()):
            p.copy_(q)
    resumed = fc.optim.HMSFW(
        [{"params": [p], "domain": g["domain"]} for p, g in zip(other.parameters(), groups)], fc.cvar(u, 0.5)
    )
    resumed.load_state_dict(saved)
    for batch in data[3:]:
        resumed.step(lambda batch=batch: group_losses(other, batch))
    assert torch.allclose(torch.cat([p.detach().reshape(-1) for p in other.parameters()]), straight, atol=1e-12)


def test_bad_domains_and_closures_are_refused():
    u = fc.inner_value(GROUPS)
    model = network()
    with pytest.raises(OptionError, match="domain"):
        fc.optim.HMSFW(model.parameters(), cp.max(u))
    with pytest.raises(OptionError, match="entries"):
        fc.optim.HMSFW(model.parameters(), cp.max(u), fc.L2Ball(3, 1.0))
    opt = fc.optim.HMSFW(model.parameters(), cp.max(u), fc.L2Ball(sum(p.numel() for p in model.parameters()), 0.01))
    with pytest.raises(OptionError, match="make_feasible"):
        opt.step(lambda: group_losses(model, batches(1)[0]))


def test_smag_in_a_loop_takes_the_iterates_of_solve():
    # A difference of two functions of a network's weights: phi the group losses' mean plus a square, psi a norm.
    data = batches(6)
    model = network()
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]

    def phi_of(net, batch):
        return group_losses(net, batch).mean() + 0.1 * sum((p**2).sum() for p in net.parameters())

    def psi_of(net, batch):
        return 0.05 * sum(p.abs().sum() for p in net.parameters())

    def on_flat(f):
        def g(x, batch):
            params = {n: part.view(s) for n, part, s in zip(names, x.split(sizes), shapes)}
            template = network()
            for p in template.parameters():
                p.requires_grad_(False)
            return f(_Bound(template, params), batch)

        return g

    current = [data[0]]
    x0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    problem = fc.DMaxProblem(on_flat(phi_of), on_flat(psi_of), x0=x0.clone(), sampler=lambda gen: current[0])
    options = {"gamma": 0.5, "eta0": 0.05, "eta1": 0.1}
    solved = fc.solve(
        problem,
        "smag",
        iters=6,
        seed=0,
        progress=False,
        callback=lambda it: current.__setitem__(0, data[min(it.k + 1, len(data) - 1)]),
        **options,
    )
    opt = fc.optim.SMAG(model.parameters(), psi=True, **options)
    for batch in data:
        opt.step(lambda batch=batch: (phi_of(model, batch), psi_of(model, batch)))
    point = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.allclose(point, solved.x, rtol=0, atol=1e-12)


class _Bound:
    """A module called with given parameters (functional_call), its ``parameters()`` those tensors."""

    def __init__(self, module, params):
        self.module, self.params = module, params

    def __call__(self, *args):
        return functional_call(self.module, self.params, args)

    def parameters(self):
        return iter(self.params.values())


def test_a_state_dict_loaded_into_a_running_optimizer_takes_effect_at_once():
    u = fc.inner_value(GROUPS)
    data = batches(6)
    size = sum(p.numel() for p in network().parameters())
    first, second = network(), network()
    a = fc.optim.HMSFW(first.parameters(), cp.max(u), fc.L2Ball(size, 10.0))
    b = fc.optim.HMSFW(second.parameters(), cp.max(u), fc.L2Ball(size, 10.0))
    for batch in data[:3]:
        a.step(lambda batch=batch: group_losses(first, batch))
    b.step(lambda: group_losses(second, data[5]))  # another state, already running
    b.load_state_dict(a.state_dict())
    assert torch.equal(torch.cat([p.reshape(-1) for p in second.parameters()]), a.stepper.x.reshape(-1))
    for batch in data[3:]:
        a.step(lambda batch=batch: group_losses(first, batch))
        b.step(lambda batch=batch: group_losses(second, batch))
    assert torch.equal(a.stepper.x, b.stepper.x)
    with pytest.raises(OptionError, match="smag"):
        b.load_state_dict({**a.state_dict(), "method": "smag"})
