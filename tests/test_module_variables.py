"""A network as the variable: CompositeProblem(x0=module or dict of tensors), fc.layer_domains, fc.make_feasible.

The independent answer for the problem on a module is the same problem declared by hand: a map that cuts a flat
vector into the layers' tensors and calls ``torch.func.functional_call`` itself, with x0 the concatenated
parameters.  The methods see the same flat vector and the same numbers, so their iterates must agree bit for
bit.  The per-layer domains are checked against LPs and least-squares programs CVXPY solves over the blocks'
constraints, written here from the sets' definitions.
"""

from __future__ import annotations

import copy
import math

import cvxpy as cp
import numpy as np
import pytest
import torch
from torch.func import functional_call

import fullcomp as fc
from fullcomp.errors import DomainError, ModelError

GROUPS, PER_GROUP, FEATURES = 3, 8, 4


def make_data(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    X = torch.randn(GROUPS, 40, FEATURES, generator=g).to(dtype)
    y = (X[..., 0] + 0.5 * torch.randn(GROUPS, 40, generator=g).to(dtype) > 0).long()
    return X, y


def mlp(buffers: bool = False, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(FEATURES, 5), torch.nn.Tanh()]
    if buffers:
        norm = torch.nn.BatchNorm1d(5)
        norm.running_mean.copy_(torch.linspace(-0.3, 0.4, 5))
        norm.running_var.copy_(torch.linspace(0.5, 2.0, 5))
        layers.append(norm.eval())  # running statistics used, not updated
    layers.append(torch.nn.Linear(5, 2))
    net = torch.nn.Sequential(*layers).to(dtype)
    if buffers:
        net.register_buffer("temperature", torch.tensor([1.5], dtype=dtype))
    return net


def losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy of each group: logits (groups, m, 2), y (groups, m)."""
    per = torch.nn.functional.cross_entropy(logits.reshape(-1, 2), y.reshape(-1), reduction="none")
    return per.reshape(y.shape).mean(dim=1)


def declare(net: torch.nn.Module, kind: str, by_hand: bool, outer: str, **extra) -> fc.CompositeProblem:
    """The group-DRO problem on ``net``, declared on the module or by hand on its flattened parameters."""
    X, y = make_data(next(net.parameters()).dtype)
    scale = net.temperature if hasattr(net, "temperature") else None

    def sampler(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        i = torch.randint(0, X.shape[1], (GROUPS, PER_GROUP), generator=generator)
        return torch.gather(X, 1, i[..., None].expand(-1, -1, FEATURES)), torch.gather(y, 1, i)

    domain = fc.layer_domains(net, kind, factor=0.8)
    u = fc.inner_value(GROUPS)
    F = cp.max(u) if outer == "max" else cp.log_sum_exp(u)
    if not by_hand:

        def inner(model, batch):
            Xb, yb = batch
            logits = model(Xb.reshape(-1, FEATURES)).reshape(GROUPS, -1, 2)
            return losses(logits if scale is None else logits / scale, yb)

        return fc.CompositeProblem(F, inner, domain, sampler=sampler, x0=net, full_batch=(X, y), **extra)
    names = [name for name, _ in net.named_parameters()]
    shapes = [p.shape for _, p in net.named_parameters()]
    bounds = np.cumsum([0] + [p.numel() for _, p in net.named_parameters()]).tolist()
    buffers = dict(net.named_buffers())

    def inner_by_hand(v, batch):
        Xb, yb = batch
        tensors = {n: v[lo:hi].reshape(s) for n, s, lo, hi in zip(names, shapes, bounds[:-1], bounds[1:])}
        logits = functional_call(net, {**buffers, **tensors}, (Xb.reshape(-1, FEATURES),)).reshape(GROUPS, -1, 2)
        return losses(logits if scale is None else logits / scale, yb)

    x0 = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).clone()
    return fc.CompositeProblem(F, inner_by_hand, domain, sampler=sampler, x0=x0, full_batch=(X, y), **extra)


def trajectory(problem: fc.CompositeProblem, method: str, **options) -> tuple[list[torch.Tensor], fc.Result]:
    seen: list[torch.Tensor] = []

    def keep(it):
        seen.append(it.x.detach().clone())

    result = fc.solve(problem, method, iters=12, seed=7, progress=False, callback=keep, **options)
    return seen, result


CASES = {
    "hmsfw": ("l2", "max", {}),
    "psg": ("l1", "max", {}),
    "fw": ("l1", "lse", {"corrective": "vanilla"}),  # a Product is not flagged a polytope: no away steps
}


@pytest.mark.parametrize("buffers", [False, True], ids=["plain", "buffers"])
@pytest.mark.parametrize("method", list(CASES))
def test_module_and_hand_flattened_problems_have_identical_iterates(method: str, buffers: bool) -> None:
    kind, outer, options = CASES[method]
    net = mlp(buffers)
    fc.make_feasible(net, fc.layer_domains(net, kind, factor=0.8))
    state = copy.deepcopy(net.state_dict())
    on_module = declare(net, kind, by_hand=False, outer=outer)
    by_hand = declare(net, kind, by_hand=True, outer=outer)
    assert on_module.dtype == by_hand.dtype == torch.float32
    assert on_module.domain.shape == by_hand.domain.shape == (sum(p.numel() for p in net.parameters()),)
    np.testing.assert_array_equal(on_module.x0, by_hand.x0)

    seen, result = trajectory(on_module, method, **options)
    expected, reference = trajectory(by_hand, method, **options)
    assert len(seen) == len(expected) == 13
    for k, (a, b) in enumerate(zip(seen, expected)):
        assert torch.equal(a, b), f"{method}: the iterates differ at iteration {k}"
    assert torch.equal(result.x, reference.x)
    assert result.x.shape == on_module.domain.shape
    for row, other in zip(result.history, reference.history):
        assert row.get("objective_estimate") == other.get("objective_estimate")
    assert result.value == reference.value
    assert not torch.equal(result.x, torch.as_tensor(on_module.x0, dtype=result.x.dtype))  # it moved
    # The run leaves the module (parameters and buffers) as it was.
    for key, value in net.state_dict().items():
        assert torch.equal(value, state[key]), key


def test_result_by_name_and_into_a_module() -> None:
    net = mlp(buffers=True)
    fc.make_feasible(net, fc.layer_domains(net, "l2", factor=0.8))
    problem = declare(net, "l2", by_hand=False, outer="max")
    result = fc.solve(problem, "hmsfw", iters=5, seed=0, progress=False)

    named = problem.parameters(result.x)
    assert list(named) == [name for name, _ in net.named_parameters()]
    bounds = np.cumsum([0] + [p.numel() for p in net.parameters()])
    for (name, p), lo, hi in zip(net.named_parameters(), bounds[:-1], bounds[1:]):
        assert named[name].shape == p.shape and named[name].dtype == result.x.dtype
        assert torch.equal(named[name].reshape(-1), result.x[lo:hi])
    start = problem.parameters()  # the start point by default
    assert all(torch.equal(start[n], p.detach()) for n, p in net.named_parameters())

    trained = copy.deepcopy(net)
    assert problem.load_into(trained, result.x) is trained
    for name, p in trained.named_parameters():
        assert torch.equal(p.detach(), named[name]) and p.requires_grad
    assert torch.equal(trained[2].running_mean, net[2].running_mean)  # buffers left as they are
    # The loaded module computes what the problem does at result.x.
    X, y = make_data()
    with torch.no_grad():
        direct = float(losses(trained(X.reshape(-1, FEATURES)).reshape(GROUPS, -1, 2) / trained.temperature, y).max())
    assert problem.objective(result.x) == pytest.approx(direct, rel=1e-6)
    assert problem.objective(trained) == problem.objective(result.x)
    assert problem.objective(problem.parameters(result.x)) == problem.objective(result.x)

    other = torch.nn.Sequential(torch.nn.Linear(FEATURES, 6), torch.nn.Linear(6, 2))
    with pytest.raises(ModelError, match="0.weight"):
        problem.load_into(other, result.x)
    with pytest.raises(ModelError, match=r"shape \(5,\)"):
        problem.parameters(result.x[:5])
    tensor_problem = fc.CompositeProblem(cp.sum(fc.inner_value(1)), lambda x, b: x[:1] ** 2, fc.L2Ball(3))
    with pytest.raises(ModelError, match="module or a dict"):
        tensor_problem.parameters(torch.zeros(3))


def test_warm_starts_take_a_module_or_a_dict() -> None:
    net = mlp()
    fc.make_feasible(net, fc.layer_domains(net, "l2", factor=0.8))
    problem = declare(net, "l2", by_hand=False, outer="max")
    moved = copy.deepcopy(net)
    with torch.no_grad():
        for p in moved.parameters():
            p.mul_(0.5)
    flat = torch.cat([p.detach().reshape(-1) for p in moved.parameters()]).double().numpy()
    np.testing.assert_array_equal(problem.with_start(moved).x0, flat)
    np.testing.assert_array_equal(problem.with_start(dict(moved.named_parameters())).x0, flat)
    a = fc.solve(problem, "psg", iters=3, seed=0, progress=False, x0=moved)
    b = fc.solve(problem.with_start(flat), "psg", iters=3, seed=0, progress=False)
    assert torch.equal(a.x, b.x)
    with pytest.raises(DomainError, match="'0.weight' is outside"):
        problem.with_start({n: 100 * p for n, p in moved.named_parameters()})


def test_a_dict_of_tensors_is_a_variable_too() -> None:
    g = torch.Generator().manual_seed(0)
    A, b = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    start = {"w": torch.zeros(4, dtype=torch.float64), "c": torch.zeros((), dtype=torch.float64)}
    seen: list = []

    def inner(params, batch):
        seen.append(type(params))
        return A @ params["w"] + params["c"] - b

    domain = fc.Product({"w": fc.L1Ball(4, 2.0), "c": fc.Box(-1, 1, shape=(1,))})
    problem = fc.CompositeProblem(cp.norm(fc.inner_value(6), 1), inner, domain, x0=start)
    assert seen[0] is dict and problem.domain.shape == (5,)
    result = fc.solve(problem, "hmsfw", iters=30, seed=0, progress=False, exact=True)
    named = problem.parameters(result.x)
    assert named["w"].shape == (4,) and named["c"].shape == ()
    residual = A @ named["w"] + named["c"] - b
    assert result.value == pytest.approx(float(residual.abs().sum()), rel=1e-9)
    assert result.value < float(b.abs().sum())  # better than the start


def test_the_data_type_and_device_see_the_module() -> None:
    double = mlp(dtype=torch.float64)
    u = fc.inner_value(2)
    problem = fc.CompositeProblem(
        cp.max(u),
        lambda net, batch: net(torch.ones(1, FEATURES, dtype=torch.float64))[0],
        fc.layer_domains(double, factor=100.0),
        x0=double,
    )
    assert problem.dtype == torch.float64 and problem.device == torch.device("cpu")
    # Nothing but the parameters is floating: they decide the dtype.
    single = {"w": torch.zeros(3)}
    problem = fc.CompositeProblem(
        cp.max(fc.inner_value(3)), lambda p, batch: p["w"] ** 2, fc.Product({"w": fc.L2Ball(3)}), x0=single
    )
    assert problem.dtype == torch.float32
    X32 = torch.ones(2, FEATURES)
    with pytest.raises(ModelError, match="the module's parameters"):
        fc.CompositeProblem(
            cp.max(u), lambda net, batch: net(X32)[0], fc.layer_domains(double, factor=100.0), x0=double
        )


def test_declaration_errors_name_the_parameter() -> None:
    net = mlp()
    fc.make_feasible(net, fc.layer_domains(net, "l2", factor=0.8))
    u = fc.inner_value(2)
    X = torch.ones(3, FEATURES)

    def inner(model, batch):
        return model(X).mean(dim=0)

    def build(domain, map_=inner, **extra):
        return fc.CompositeProblem(cp.max(u), map_, domain, x0=net, **extra)

    blocks = dict(zip([n for n, _ in net.named_parameters()], fc.layer_domains(net).blocks))
    with pytest.raises(DomainError, match="no block for parameter '2.bias'"):
        build(fc.Product({k: v for k, v in blocks.items() if k != "2.bias"}))
    with pytest.raises(DomainError, match="block 'extra'"):
        build(fc.Product({**blocks, "extra": fc.L2Ball(1)}))
    with pytest.raises(DomainError, match="parameter '0.weight' comes where domain has block '2.bias'"):
        build(fc.Product(dict(reversed(list(blocks.items())))))
    with pytest.raises(DomainError, match=r"block '0.bias' has shape \(4,\).*'0.bias'.*\(5,\)"):
        build(fc.Product({**blocks, "0.bias": fc.L2Ball(4)}))
    with pytest.raises(DomainError, match=r"shape \(10,\)"):
        build(fc.L2Ball(10))
    build(fc.L2Ball(sum(p.numel() for p in net.parameters()), 100.0))  # any set over the flat vector
    with pytest.raises(DomainError, match="make_feasible.*'0.weight' is outside"):
        build(fc.layer_domains(net, "l2", factor=0.01))
    with pytest.raises(ModelError, match="reads="):
        build(fc.layer_domains(net), reads=np.arange(3))
    with pytest.raises(ModelError, match=r"inner\(net, batch\)"):
        build(fc.layer_domains(net), map_=lambda model: model(X).mean(dim=0))
    with pytest.raises(ModelError, match="shape"):
        build(fc.layer_domains(net), map_=lambda model, batch: model(X))
    with pytest.raises(ModelError, match="autodiff|differen|graph"):
        build(fc.layer_domains(net), map_=lambda model, batch: model(X).mean(dim=0).detach() + 0 * X.sum())


# ---- per-layer domains ----------------------------------------------------------------------------------


def inside(kind: str, part: np.ndarray, block, tol: float = 1e-9) -> bool:
    """Whether a block's part satisfies the set's definition (numpy, without the set's code)."""
    a = np.abs(part)
    if kind == "l2":
        return float(np.sqrt((part**2).sum())) <= block.radius + tol
    if kind == "l1":
        return float(a.sum()) <= block.radius + tol
    if kind == "linf":
        return bool(np.all(part <= block.upper.reshape(-1) + tol) and np.all(part >= block.lower.reshape(-1) - tol))
    return bool(a.max() <= block.radius + tol and a.sum() <= block.k * block.radius + tol)


def independent(kind: str, v, block) -> list:
    """The constraints of one block on a CVXPY vector, from the set's definition."""
    if kind == "l2":
        return [cp.norm(v, 2) <= block.radius]
    if kind == "l1":
        return [cp.norm(v, 1) <= block.radius]
    if kind == "linf":
        return [v <= block.upper.reshape(-1), v >= block.lower.reshape(-1)]
    plus, minus = cp.Variable(v.shape, nonneg=True), cp.Variable(v.shape, nonneg=True)
    return [v == plus - minus, plus + minus <= block.radius, cp.sum(plus + minus) <= block.k * block.radius]


def small_net() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).double()


@pytest.mark.parametrize("kind", ["l2", "l1", "linf", "k-sparse"])
def test_the_product_lmo_solves_the_lp_over_the_blocks(kind: str) -> None:
    net = small_net()
    domain = fc.layer_domains(net, kind, factor=2.0, k=0.3 if kind == "k-sparse" else None)
    assert domain.names == tuple(n for n, _ in net.named_parameters())
    rng = np.random.default_rng(0)
    v = cp.Variable(domain.size)
    d = cp.Parameter(domain.size)
    constraints = []
    for block, s in zip(domain.blocks, domain.slices):
        constraints += independent(kind, v[s], block)
    lp = cp.Problem(cp.Minimize(d @ v), constraints)
    for trial in range(4):
        direction = rng.standard_normal(domain.size)
        if trial == 3:
            direction[domain.slices[1]] = 0.0  # a block with a zero direction
        d.value = direction
        lp.solve(solver=cp.CLARABEL)
        point = domain.lmo(direction)
        assert point.shape == (domain.size,)
        assert direction @ point == pytest.approx(lp.value, rel=1e-6, abs=1e-7)
        assert all(inside(kind, point[s], b) for b, s in zip(domain.blocks, domain.slices))
        if kind == "l2" and trial < 3:  # a unique minimizer
            np.testing.assert_allclose(point, v.value, atol=1e-5)


@pytest.mark.parametrize("kind", ["l2", "l1"])
def test_make_feasible_is_the_projection_cvxpy_finds(kind: str) -> None:
    net = small_net()
    domain = fc.layer_domains(net, kind, factor=0.3)
    start = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy().copy()
    assert not domain.contains(start)
    v = cp.Variable(domain.size)
    constraints = []
    for block, s in zip(domain.blocks, domain.slices):
        constraints += independent(kind, v[s], block)
    cp.Problem(cp.Minimize(cp.sum_squares(v - start)), constraints).solve(solver=cp.CLARABEL)
    assert fc.make_feasible(net, domain) is net
    moved = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy()
    assert all(inside(kind, moved[s], b) for b, s in zip(domain.blocks, domain.slices))
    np.testing.assert_allclose(moved, v.value, atol=1e-6)
    again = copy.deepcopy(net)
    fc.make_feasible(again, domain)  # a feasible module stays where it is
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), net.parameters()))


@pytest.mark.parametrize("kind", ["l2", "l1", "linf", "k-sparse"])
def test_rescaling_keeps_the_pattern_and_reaches_the_boundary(kind: str) -> None:
    net = small_net()
    domain = fc.layer_domains(net, kind, factor=0.2, k=2 if kind == "k-sparse" else None)
    before = [p.detach().clone().numpy() for p in net.parameters()]
    fc.make_feasible(net, domain, method="rescale")
    for block, p, old in zip(domain.blocks, net.parameters(), before):
        new = p.detach().numpy()
        assert block.contains(new, tol=1e-12)
        ratio = new[old != 0] / old[old != 0]
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)  # one factor per parameter
        assert 0 < ratio[0] <= 1
        if ratio[0] < 1:  # shrunk just onto the boundary
            assert not block.contains(new * (1 + 1e-6), tol=1e-12)


def test_radii_follow_the_initialization_norm() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.BatchNorm1d(30), torch.nn.Linear(30, 3))
    state, rng = copy.deepcopy(net.state_dict()), torch.random.get_rng_state()
    norms = fc.init_norms(net)
    assert norms == fc.init_norms(net)  # deterministic
    assert torch.equal(rng, torch.random.get_rng_state())  # the global generator is untouched
    assert all(torch.equal(v, state[k]) for k, v in net.state_dict().items())  # so is the module
    # Linear's default init is uniform on +-1/sqrt(fan_in): E||W||_2 ~ sqrt(size / (3 fan_in)).
    assert norms["0.weight"] == pytest.approx(math.sqrt(600 / 60), rel=0.02)
    assert norms["2.bias"] == pytest.approx(math.sqrt(3 / 90), rel=0.25)
    assert norms["1.weight"] == pytest.approx(math.sqrt(30)) and norms["1.bias"] == 0.0  # ones and zeros

    factor = 3.0
    l2 = fc.layer_domains(net, "l2", factor=factor)
    l1 = fc.layer_domains(net, "l1", factor=factor)
    linf = fc.layer_domains(net, "linf", factor=factor)
    ks = fc.layer_domains(net, "k-sparse", factor=factor, k=5)
    for i, (name, p) in enumerate(net.named_parameters()):
        a = norms[name] or 1.0  # a zero initialization counts as 1
        assert l2.blocks[i].radius == pytest.approx(factor * a) and l1.blocks[i].radius == pytest.approx(factor * a)
        assert linf.blocks[i].upper.max() == pytest.approx(factor * a / math.sqrt(p.numel()))
        assert ks.blocks[i].k == min(5, p.numel())
        assert ks.blocks[i].radius == pytest.approx(factor * a / math.sqrt(min(5, p.numel())))
        # Every kind has the l2 diameter 2 factor a.
        for domain in (l2, l1, linf, ks):
            assert domain.blocks[i].diameter == pytest.approx(2 * factor * a)
        assert l2.blocks[i].shape == tuple(p.shape)

    given = fc.layer_domains(net, "l1", radius={"0.weight": 0.25}, factor=factor)
    assert given.blocks[0].radius == 0.25 and given.blocks[1].radius == pytest.approx(factor * norms["0.bias"])
    assert all(b.radius == 2.0 for b in fc.layer_domains(net, "l2", radius=2.0).blocks)

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)
            self.gain = torch.nn.Parameter(torch.ones(2))

    with pytest.raises(DomainError, match="'gain'.*reset_parameters"):
        fc.layer_domains(Scaled())
    assert fc.layer_domains(Scaled(), radius={"gain": 1.0}).names == ("gain", "layer.weight", "layer.bias")
    with pytest.raises(DomainError, match="k="):
        fc.layer_domains(net, "k-sparse")
    with pytest.raises(DomainError, match="kind"):
        fc.layer_domains(net, "l3")
    with pytest.raises(DomainError, match="not parameters"):
        fc.layer_domains(net, radius={"nope": 1.0})


def test_buffers_follow_the_run_dtype() -> None:
    """A float32 module in a float64 problem: its parameters come from the float64 iterate, and its buffers
    (batch-norm statistics, a registered tensor) are cast to match, so the module runs in float64."""
    net = mlp(buffers=True)
    X, y = make_data(torch.float64)

    def inner(model, batch):
        logits = model(X.reshape(-1, FEATURES)).reshape(GROUPS, -1, 2)
        return losses(logits / model.params["temperature"], y)

    domain = fc.layer_domains(net, "l2", factor=100.0)
    problem = fc.CompositeProblem(cp.max(fc.inner_value(GROUPS)), inner, domain, x0=net, dtype=torch.float64)
    result = fc.solve(problem, "hmsfw", iters=4, seed=0, progress=False, exact=True)
    assert result.x.dtype == torch.float64
    reference = problem.load_into(copy.deepcopy(net).double(), result.x)
    with torch.no_grad():
        expected = losses(reference(X.reshape(-1, FEATURES)).reshape(GROUPS, -1, 2) / reference.temperature, y)
    assert problem.objective(result.x) == pytest.approx(float(expected.max()), rel=1e-12)
    assert next(net.parameters()).dtype == torch.float32 and net[2].running_mean.dtype == torch.float32


def test_the_sampled_estimate_stays_sound_on_a_network_where_the_taylor_one_drifts():
    # Four groups' BCE losses (each >= 0) of an MLP on l2 balls 20 times its initialization's norm: HMSFW's Taylor
    # tracker extrapolates the values along steps of a non-affine map and its estimate can fall below zero (-0.6
    # measured); F at the last fresh sample, recorded beside it, is a max of losses, so never negative, and it
    # follows the true objective within the batch's noise.
    torch.manual_seed(0)
    G, m, d = 4, 200, 10
    X = torch.randn(G, m, d, dtype=torch.float64)
    X[3] = X[3] * 0.5 + 1.0
    y = ((X @ torch.randn(d, dtype=torch.float64) + 0.3 * torch.randn(G, m, dtype=torch.float64)) > 0).double()
    model = torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()

    def inner(net, batch):
        Xb, yb = batch
        logits = net(Xb.reshape(-1, d)).reshape(G, -1)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, yb, reduction="none").mean(dim=1)

    def sampler(gen):
        i = torch.randint(0, m, (G, 16), generator=gen)
        return X.gather(1, i[..., None].expand(-1, -1, d)), y.gather(1, i)

    domain = fc.layer_domains(model, "l2", factor=20.0)
    problem = fc.CompositeProblem(
        cp.max(fc.inner_value(G)), inner, domain, sampler=sampler, x0=model, full_batch=(X, y)
    )
    result = fc.hmsfw(problem, iters=150, eval_every=25, seed=0, progress=False)
    rows = [row for row in result.history if "objective_sample" in row]
    assert [row["k"] for row in rows] == [0, 25, 50, 75, 100, 125, 150]
    assert all(row["objective_sample"] >= 0 for row in rows)
    errors = [abs(row["objective_sample"] - row["objective"]) for row in rows]
    assert sum(errors) / len(errors) < 0.2


# The module-variable failures a hostile user found (../shared/repros/guarantees3_repros.py, M1, M2, M5, M7).
X20 = torch.randn(20, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def test_batchnorm_statistics_are_in_the_checkpoint(tmp_path):  # M1: eval-mode outputs differed after a resume
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)).double()

    def problem(net):
        return fc.CompositeProblem(
            cp.max(fc.inner_value(2)),
            lambda n, b: n(X20 + b).pow(2).mean(0),
            fc.L2Ball(82, 20.0),
            x0=net,
            sampler=lambda g: 0.1 * torch.randn(20, 5, generator=g, dtype=torch.float64),
        )

    straight = make()
    fc.hmsfw(problem(straight), iters=8, progress=False)
    path = str(tmp_path / "bn.ckpt")
    fc.hmsfw(
        problem(make()), iters=8, progress=False, checkpoint=path, callback=lambda it: False if it.k == 4 else None
    )
    resumed = make()  # the resuming process's module
    fc.hmsfw(problem(resumed), iters=8, progress=False, checkpoint=path)
    for key, buffer in straight[1].named_buffers():
        assert torch.equal(buffer, dict(resumed[1].named_buffers())[key]), key


def test_a_steppers_state_holds_the_buffers():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.BatchNorm1d(3)).double()
    problem = fc.CompositeProblem(
        cp.max(fc.inner_value(3)), lambda n, b: n(X20).pow(2).mean(0), fc.L2Ball(24, 20.0), x0=net
    )
    stepper = fc.Stepper(problem, "hmsfw")
    stepper.step()
    saved = stepper.state_dict()
    mean = net[1].running_mean.clone()
    stepper.step()
    assert not torch.equal(net[1].running_mean, mean)
    stepper.load_state_dict(saved)
    assert torch.equal(net[1].running_mean, mean)


def test_a_frozen_parameter_is_refused():  # M2: it was trained anyway
    net = torch.nn.Linear(5, 2).double()
    net.weight.requires_grad_(False)
    with pytest.raises(ModelError, match="'weight' has requires_grad=False"):
        fc.CompositeProblem(
            cp.max(fc.inner_value(2)), lambda n, b: (n(X20) - 1).pow(2).mean(0), fc.L2Ball(12, 5.0), x0=net
        )


def test_dropout_in_training_mode_is_named_in_a_warning():  # M7: unrepeatable runs, silently
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 2)).double()

    def declare():
        return fc.CompositeProblem(
            cp.max(fc.inner_value(2)), lambda n, b: (n(X20) - 1).pow(2).mean(0), fc.L2Ball(66, 9.0), x0=net
        )

    with pytest.warns(UserWarning, match=r"dropout in training mode: 1 \(p=0.3\)"):
        declare()
    net.eval()  # no draws: the runs repeat, and nothing is said
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        problem = declare()
    first, second = (fc.hmsfw(problem, iters=3, seed=0, progress=False) for _ in range(2))
    assert torch.equal(first.x, second.x)


def test_data_of_another_dtype_than_the_variable_are_named():  # M5: a raw RuntimeError from torch
    net = torch.nn.Linear(5, 2).half()
    with pytest.raises(ModelError, match="The variable is torch.float32"):
        fc.CompositeProblem(
            cp.max(fc.inner_value(2)),
            lambda n, b: n(X20).pow(2).mean(0),
            fc.L2Ball(12, 5.0),
            x0=net,
            dtype=torch.float32,
        )


@pytest.mark.parametrize("factor", [np.float32(3.0), np.float64(3.0), np.int64(3), torch.tensor(3.0), torch.tensor(3)])
def test_any_real_scalar_is_a_factor(factor) -> None:
    net = torch.nn.Linear(3, 2)
    expected = fc.layer_domains(net, factor=3.0).blocks[0].radius
    assert fc.layer_domains(net, "l2", factor=factor).blocks[0].radius == expected


@pytest.mark.parametrize(
    "factor", [torch.tensor([3.0]), torch.tensor(3.0 + 1j), torch.tensor(True), np.float32("nan"), -1.0, "3", True]
)
def test_a_factor_that_is_not_a_positive_real_scalar_is_named(factor) -> None:
    with pytest.raises(DomainError, match="factor must be a positive number"):
        fc.layer_domains(torch.nn.Linear(3, 2), factor=factor)


def test_a_lazy_layer_names_itself_and_the_forward_pass_that_fixes_it() -> None:
    net = torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    for call in (lambda: fc.layer_domains(net), lambda: fc.init_norms(net)):
        with pytest.raises(ModelError, match=r"'weight' of layer '0' \(LazyLinear\) is not initialized.*forward pass"):
            call()
    net(torch.zeros(2, 4))  # the forward pass materializes the parameters
    assert fc.layer_domains(net).names == ("0.weight", "0.bias", "2.weight", "2.bias")


def test_init_norms_leaves_numpy_python_and_torch_random_states_alone() -> None:
    import random

    class Drawing(torch.nn.Linear):
        def reset_parameters(self):
            super().reset_parameters()
            np.random.rand()
            random.random()

    net = Drawing(3, 2)  # its constructor draws too: the states are read after it
    numpy_state, python_state, torch_state = np.random.get_state(), random.getstate(), torch.random.get_rng_state()
    first = fc.init_norms(net)
    after = np.random.get_state()
    assert after[2] == numpy_state[2] and np.array_equal(after[1], numpy_state[1])  # position and key
    assert random.getstate() == python_state and torch.equal(torch.random.get_rng_state(), torch_state)
    np.random.rand(7)
    assert fc.init_norms(net) == first  # the draws do not depend on the global states either
