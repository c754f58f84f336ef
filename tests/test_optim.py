"""fc.optim: the composite methods as torch.optim optimizers take fc.solve's iterates on the same batches."""

from __future__ import annotations

import io

import cvxpy as cp
import pytest
import torch
from torch.func import functional_call

import fullcomp as fc
from fullcomp.errors import CheckpointError, ModelError, OptionError

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

    problem = fc.CompositeProblem(
        outer, inner, domain, sampler=lambda gen: current[0], x0=x0.numpy(), check_gradient=False
    )
    # fc.optim starts as from a default start (no warm-start line search: it would call the closure again)
    problem.warm_start = False
    return problem


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
    assert saved["state"]["method"] == "hmsfw" and saved["state"]["stepper"]["k"] == 3
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
    saved = a.state_dict()
    with pytest.raises(CheckpointError, match="smag"):
        b.load_state_dict({**saved, "state": {**saved["state"], "method": "smag"}})


# The failures a hostile user found (../shared/repros/guarantees3_repros.py): each is refused by name now.
A = torch.randn(4, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
X5 = torch.randn(20, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def vector(size: int = 10, dtype=torch.float64) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.zeros(size, dtype=dtype))


def l1_optimizer(w, **options):
    return fc.optim.HMSFW([w], cp.max(fc.inner_value(4)), domain=fc.L1Ball(w.numel(), 2.0), **options)


def test_a_closure_that_does_not_depend_on_the_parameters_is_refused():  # O5: nothing trained, silently
    net, other = torch.nn.Linear(5, 3).double(), torch.nn.Linear(5, 3).double()
    opt = fc.optim.HMSFW(net.parameters(), cp.max(fc.inner_value(3)), domain=fc.L2Ball(18, 10.0))
    with pytest.raises(ModelError, match="do not depend on the optimizer's parameters"):
        opt.step(lambda: other(X5).pow(2).mean(0))
    with pytest.raises(ModelError, match="carry no gradient"):  # O4b's kind: values without a graph
        opt.step(lambda: torch.ones(3, dtype=torch.float64))


def test_smag_refuses_a_pair_without_psi():  # O6: psi was dropped silently
    lin = torch.nn.Linear(5, 1).double()
    opt = fc.optim.SMAG(lin.parameters(), gamma=0.5, eta0=0.1, eta1=0.1)
    with pytest.raises(ModelError, match="psi=True"):
        opt.step(lambda: (lin(X5).pow(2).mean(), 10 * lin.weight.abs().sum()))
    both = fc.optim.SMAG(lin.parameters(), gamma=0.5, eta0=0.1, eta1=0.1, psi=True)
    with pytest.raises(ModelError, match="pair"):
        both.step(lambda: lin(X5).pow(2).mean())


def test_group_domains_are_checked_group_by_group():  # O12: swapped sizes passed the total's check
    net = torch.nn.Linear(8, 5).double()
    groups = [
        {"params": [net.bias], "domain": fc.L2Ball(40, 1.0)},
        {"params": [net.weight], "domain": fc.Box(-0.05, 0.05, shape=(5,))},
    ]
    with pytest.raises(OptionError, match="param group 0's domain must be a fullcomp set of its 5"):
        fc.optim.HMSFW(groups, cp.max(fc.inner_value(5)))


def test_a_group_domain_changed_after_the_first_step_is_refused():  # O25: the change was ignored
    net = torch.nn.Linear(5, 3).double()
    opt = fc.optim.HMSFW([{"params": list(net.parameters()), "domain": fc.L2Ball(18, 10.0)}], cp.max(fc.inner_value(3)))
    opt.param_groups[0]["domain"] = fc.L2Ball(18, 5.0)  # before the first step: the method starts on it
    opt.step(lambda: (net(X5) - 3).pow(2).mean(0))
    assert float(torch.cat([p.detach().reshape(-1) for p in net.parameters()]).norm()) <= 5.0 + 1e-9
    opt.param_groups[0]["domain"] = fc.L2Ball(18, 1e-3)
    with pytest.raises(OptionError, match=r"param_groups\[0\]\['domain'\] changed after the first step"):
        opt.step(lambda: (net(X5) - 3).pow(2).mean(0))


def test_a_state_from_a_bigger_ball_is_refused():  # O19: the iterate stayed outside the small ball
    u = fc.inner_value(3)
    big_net = torch.nn.Linear(5, 3).double()
    big = fc.optim.HMSFW(big_net.parameters(), cp.max(u), domain=fc.L2Ball(18, 30.0))
    for _ in range(3):
        big.step(lambda: (big_net(X5) - 3).pow(2).mean(0))
    net = torch.nn.Linear(5, 3).double()
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(0.1)
    before = [p.detach().clone() for p in net.parameters()]
    small = fc.optim.HMSFW(net.parameters(), cp.max(u), domain=fc.L2Ball(18, 1.0))
    with pytest.raises(CheckpointError, match=r"param_groups\[0\]\['domain'\]"):
        small.load_state_dict(big.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))  # nothing changed


def test_a_tampered_point_is_refused():  # O21a: an edited iterate was loaded outside the domain
    w = vector()
    opt = l1_optimizer(w)
    opt.step(lambda: (A @ w - 0.5) ** 2)
    saved = opt.state_dict()
    saved["state"]["x"] = saved["state"]["x"] + 5.0
    with pytest.raises(CheckpointError, match="not in this optimizer's domain"):
        l1_optimizer(vector()).load_state_dict(saved)


def test_a_state_of_another_kind_is_refused():  # O27: ignored, the run restarted at k = 0
    problem = fc.CompositeProblem(
        cp.max(fc.inner_value(4)), lambda x, b: (A @ x - 0.5) ** 2, fc.L1Ball(10, 2.0), check_gradient=False
    )
    stepper = fc.Stepper(problem, "hmsfw")
    stepper.step()
    opt = l1_optimizer(vector())
    for foreign in (stepper.state_dict(), {"method": "hmsfw"}):
        with pytest.raises(CheckpointError, match="not an fc.optim state_dict"):
            opt.load_state_dict(foreign)


def _frozen():
    w = vector()
    w.requires_grad_(False)
    return w


@pytest.mark.parametrize(
    "case, build, error, match",
    [
        ("O4", lambda: l1_optimizer(_frozen()), OptionError, "requires_grad=False"),
        ("O4b", lambda: fc.optim.SMAG([_frozen()], gamma=0.5, eta0=0.1, eta1=0.1), OptionError, "requires_grad"),
        (
            "O10",
            lambda: (
                lambda w: fc.optim.HMSFW(
                    [{"params": [w], "domain": fc.L1Ball(10, 2.0)}, {"params": [w], "domain": fc.L1Ball(10, 2.0)}],
                    cp.max(fc.inner_value(4)),
                )
            )(vector()),
            OptionError,
            "more than one parameter group",
        ),
        ("O13 typo", lambda: l1_optimizer(vector(), varaint="x"), OptionError, "varaint"),
        (
            "O13 concave F",
            lambda: fc.optim.HMSFW([vector()], cp.min(fc.inner_value(4)), fc.L1Ball(10, 2.0)),
            ModelError,
            "concave",
        ),
        ("O23", lambda: l1_optimizer(vector(dtype=torch.float16), dtype=torch.float32), OptionError, "float16"),
        ("lr > 1", lambda: l1_optimizer(vector(), lr=1.5), OptionError, r"lr in \(0, 1\]"),
        ("shared", lambda: l1_optimizer(vector(), checkpoint="x.ckpt"), OptionError, "checkpoint"),
    ],
)
def test_bad_arguments_fail_at_construction(case, build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_bad_steps_are_fullcomp_errors():
    w = vector()
    opt = l1_optimizer(w)
    with pytest.raises(OptionError, match="closure"):  # O8: a raw TypeError
        opt.step()
    opt.step(lambda: (A @ w - 0.5) ** 2)
    with pytest.raises(ModelError, match="ZeroDivisionError") as caught:  # O7: the user's error, named theirs
        opt.step(lambda: 1 / 0)
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    w.data = w.data.float()  # O22: the optimizer kept running in float64
    with pytest.raises(OptionError, match="float32"):
        opt.step(lambda: (A.float() @ w - 0.5) ** 2)


def test_a_state_of_another_problem_or_size_is_refused():  # O18, O20
    w = vector()
    opt = l1_optimizer(w)
    opt.step(lambda: (A @ w - 0.5) ** 2)
    saved = opt.state_dict()
    with pytest.raises(CheckpointError, match="outer"):
        fc.optim.HMSFW([vector()], fc.cvar(fc.inner_value(4), 0.9), domain=fc.L1Ball(10, 2.0)).load_state_dict(saved)
    with pytest.raises(CheckpointError, match="seed"):
        l1_optimizer(vector(), seed=5).load_state_dict(saved)
    with pytest.raises(CheckpointError, match=r"param_groups\[0\]\['sizes'\]"):
        l1_optimizer(vector(9)).load_state_dict(saved)
    with pytest.raises(CheckpointError, match="tracker"):
        l1_optimizer(vector(), tracker="storm").load_state_dict(saved)


def test_a_state_loaded_before_the_first_step_moves_the_parameters_at_once():  # O16
    w = vector()
    opt = l1_optimizer(w)
    for _ in range(3):
        opt.step(lambda: (A @ w - 0.5) ** 2)
    v = vector()
    l1_optimizer(v).load_state_dict(opt.state_dict())
    assert torch.equal(v, w)


def test_torch_layout_param_groups_and_add_param_group():  # O24, and torch's rules
    w, v = vector(), vector(2)
    opt = l1_optimizer(w, variant="polyak")
    opt.add_param_group({"params": [v], "domain": fc.L2Ball(2, 1.0)})
    assert [g["lr"] for g in opt.param_groups] == [1.0, 1.0]
    assert opt.param_groups[1]["variant"] == "polyak" and opt.param_groups[1]["domain"].size == 2
    opt.zero_grad()  # harmless: the optimizer reads no .grad
    opt.step(lambda: (A @ w) ** 2 + v.sum())
    assert float(v.detach().norm()) <= 1.0 + 1e-9 and float(w.detach().abs().sum()) <= 2.0 + 1e-9
    saved = opt.state_dict()
    assert set(saved) == {"state", "param_groups"}
    assert [g["params"] for g in saved["param_groups"]] == [list(range(0, 1)), list(range(1, 2))]
    with pytest.raises(OptionError, match="after the first step"):
        opt.add_param_group({"params": [vector(3)], "domain": fc.L2Ball(3, 1.0)})
    with pytest.raises(OptionError, match="domain= covers all"):
        fc.optim.HMSFW(
            [{"params": [vector()]}, {"params": [vector(2)]}], cp.max(fc.inner_value(4)), fc.L1Ball(12, 2.0)
        ).add_param_group({"params": [vector(3)], "domain": fc.L2Ball(3, 1.0)})


def test_an_lr_scheduler_scales_the_frank_wolfe_step():  # O9: StepLR raised KeyError: 'lr'
    w = vector()
    opt = l1_optimizer(w)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    gammas = []
    for _ in range(4):
        gammas.append(opt.step(lambda: (A @ w - 0.5) ** 2)["gamma"])
        scheduler.step()
    # gamma_k = 2/(k+2) (the paper's schedule, from the default start) times lr = 0.5^k
    assert gammas == pytest.approx([2 / (k + 2) * 0.5**k for k in range(4)], rel=1e-12)
    opt.param_groups[0]["lr"] = 2.0
    with pytest.raises(OptionError, match="lr in"):
        opt.step(lambda: (A @ w - 0.5) ** 2)


def test_a_method_without_a_step_size_refuses_an_lr_change():
    w = vector()
    opt = fc.optim.PSG([w], cp.max(fc.inner_value(4)), domain=fc.L1Ball(10, 2.0))
    scheduler = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    opt.step(lambda: (A @ w - 0.5) ** 2)
    scheduler.step()
    with pytest.raises(OptionError, match="no step size that lr scales"):
        opt.step(lambda: (A @ w - 0.5) ** 2)


def test_smag_lr_scales_eta0_and_eta1():
    lin = torch.nn.Linear(5, 1).double()
    opt = fc.optim.SMAG(lin.parameters(), gamma=0.5, eta0=0.1, eta1=0.2, lr=0.5)
    opt.step(lambda: lin(X5).pow(2).mean())
    assert (opt.stepper.hyperparameters["eta0"], opt.stepper.hyperparameters["eta1"]) == (0.05, 0.1)
    opt.param_groups[0]["lr"] = 0.25
    opt.step(lambda: lin(X5).pow(2).mean())
    assert opt.stepper.hyperparameters["eta1"] == 0.05


def test_the_first_step_calls_the_closure_twice():  # was 15: a probe, the first sample, a line search
    model = network()
    size = sum(p.numel() for p in model.parameters())
    opt = fc.optim.HMSFW(model.parameters(), cp.max(fc.inner_value(GROUPS)), fc.L2Ball(size, 10.0))
    batch, calls = batches(1)[0], []

    def closure():
        calls.append(1)
        return group_losses(model, batch)

    opt.step(closure)
    assert len(calls) <= 2
    calls.clear()
    opt.step(closure)
    assert len(calls) == 1


def test_a_loop_resumes_bit_identically_from_the_two_state_dicts():
    u, data = fc.inner_value(GROUPS), batches(8)
    size = sum(p.numel() for p in network().parameters())

    def build(model):
        opt = fc.optim.HMSFW(model.parameters(), fc.cvar(u, 0.5), fc.L2Ball(size, 10.0), lr=0.8)
        return opt, torch.optim.lr_scheduler.StepLR(opt, 2, gamma=0.9)

    def run(model, opt, scheduler, part):
        for batch in part:
            opt.step(lambda batch=batch: group_losses(model, batch))
            scheduler.step()

    straight = network()
    run(straight, *build(straight), data)

    first = network()
    opt, scheduler = build(first)
    run(first, opt, scheduler, data[:3])
    buffer = io.BytesIO()
    torch.save({"model": first.state_dict(), "opt": opt.state_dict(), "sched": scheduler.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)  # plain data and tensors: torch.load's safe default reads it

    torch.manual_seed(123)  # the resuming process: another initialization, overwritten by the checkpoint
    second = torch.nn.Sequential(torch.nn.Linear(FEATURES, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)).double()
    second.load_state_dict(saved["model"])
    opt, scheduler = build(second)
    opt.load_state_dict(saved["opt"])
    scheduler.load_state_dict(saved["sched"])
    run(second, opt, scheduler, data[3:])
    for a, b in zip(straight.parameters(), second.parameters()):
        assert torch.equal(a, b)


def test_the_parameters_hold_the_iterate_after_each_step_whatever_the_closure_did():
    # The step skips writing its iterate where the parameters still hold it from the closure's sample; a
    # closure that changes a parameter in place (a clamp, a rescaling) must not leave that change behind.
    model = network()
    size = sum(p.numel() for p in model.parameters())
    opt = fc.optim.HMSFW(model.parameters(), cp.max(fc.inner_value(GROUPS)), fc.L2Ball(size, 10.0))

    def closure(batch, rescale):
        if rescale:
            with torch.no_grad():
                model[0].weight.mul_(0.5)
        return group_losses(model, batch)

    for k, batch in enumerate(batches(4)):
        opt.step(lambda batch=batch, k=k: closure(batch, k % 2 == 1))
        point = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        assert torch.equal(point, opt.stepper.x.reshape(-1))
