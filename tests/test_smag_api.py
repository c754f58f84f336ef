"""SMAG's interface: parameter containers, precision, seeds, the stepper, outputs, resumes, bad input."""

from __future__ import annotations

import math
import sys
import warnings

import pytest
import torch

import fullcomp as fc
from fullcomp.errors import DomainError, ModelError, OptionError, OracleError

F64 = torch.float64

# A small stochastic DWC problem on a linear model: phi = mean |X w + b - t| + ridge, psi = 0.3 mean |X w + b|.


def regression_sampler(generator):
    X = torch.randn(8, 3, generator=generator, dtype=F64)
    t = X @ torch.tensor([1.0, -2.0, 0.5], dtype=F64) + 0.1 * torch.randn(8, generator=generator, dtype=F64)
    return X, t


def tensor_model(x, X):
    return X @ x[:3] + x[3]


def dict_model(x, X):
    return X @ x["weight"][0] + x["bias"][0]


def module_model(x, X):
    return x(X)[:, 0]


def dwc_for(model):
    def phi(x, batch):
        X, t = batch
        return (model(x, X) - t).abs().mean()

    def psi(x, batch):
        X, _ = batch
        return 0.3 * model(x, X).abs().mean()

    return phi, psi


def linear_module():
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        module.weight.copy_(torch.tensor([[0.1, 0.2, 0.3]]))
        module.bias.fill_(0.4)
    return module


START = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
OPTS = dict(gamma=0.5, eta0=0.2, eta1=0.1, iters=60, seed=3, progress=False, dtype=F64)


def regression_problem(kind="tensor", **kwargs):
    if kind == "tensor":
        x0, model = START.clone(), tensor_model
    elif kind == "dict":
        x0, model = {"weight": START[:3].reshape(1, 3).clone(), "bias": START[3:].clone()}, dict_model
    else:
        x0, model = linear_module(), module_model
    phi, psi = dwc_for(model)
    return fc.DMaxProblem(phi, psi, x0=x0, sampler=regression_sampler, **kwargs)


def flat(x):
    if isinstance(x, torch.nn.Module):
        return torch.cat([p.detach().reshape(-1) for p in x.parameters()])
    if isinstance(x, dict):
        return torch.cat([x["weight"].reshape(-1), x["bias"].reshape(-1)])
    return x


def test_tensor_dict_and_module_parameters_follow_one_trajectory():
    problems = {kind: regression_problem(kind) for kind in ("tensor", "dict", "module")}
    user_module = problems["module"].x.module
    before = [p.detach().clone() for p in user_module.parameters()]
    results = {kind: fc.smag(problem, **OPTS) for kind, problem in problems.items()}
    ref = results["tensor"]
    assert isinstance(results["dict"].x_phi, dict) and set(results["dict"].x_phi) == {"weight", "bias"}
    module = results["module"].x
    assert isinstance(module, torch.nn.Linear)
    assert module is not results["module"].x_phi
    for kind in ("dict", "module"):
        for name in ("x", "x_phi", "x_psi"):
            assert torch.allclose(flat(getattr(results[kind], name)), getattr(ref, name), atol=1e-10)
    # The returned module predicts with the returned parameters; the user's module is untouched.
    X = torch.randn(4, 3, dtype=F64)
    assert torch.allclose(module(X)[:, 0], tensor_model(ref.x, X), atol=1e-10)
    assert all(torch.equal(p.detach(), q) for p, q in zip(user_module.parameters(), before))
    # The stationarity measure takes the point in the problem's container.
    data = regression_sampler(torch.Generator().manual_seed(9))
    by_tensor = fc.stationarity(problems["tensor"], ref.x, 0.5, data)
    by_module = fc.stationarity(problems["module"], module, 0.5, data)
    assert float(by_module) == pytest.approx(float(by_tensor), abs=1e-6)
    assert isinstance(by_module.prox_phi, torch.nn.Linear)


def test_module_adversary_head_as_the_dual_block():
    """y0 an nn.Module (a linear adversary head): same trajectory as the same head as a dict."""
    lam = 1.0
    target = torch.tensor([2.0, -2.0], dtype=F64)

    def phi_module(x, head, batch):
        ridge = sum((p**2).sum() for p in head.params.values())
        return (x - target).abs().sum() + head(x[None, :])[0, 0] - lam / 2 * ridge

    def phi_dict(x, y, batch):
        ridge = (y["weight"] ** 2).sum() + (y["bias"] ** 2).sum()
        return (x - target).abs().sum() + x @ y["weight"][0] + y["bias"][0] - lam / 2 * ridge

    head = torch.nn.Linear(2, 1).double()
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[0.3, -0.2]]))
        head.bias.fill_(0.1)
    y_dict = {"weight": head.weight.detach().clone(), "bias": head.bias.detach().clone()}
    opts = dict(gamma=0.5, eta0=0.2, eta1=0.1, iters=100, progress=False, dtype=F64)
    a = fc.smag(fc.DMaxProblem(phi_module, x0=torch.zeros(2), y0=head), **opts)
    b = fc.smag(fc.DMaxProblem(phi_dict, x0=torch.zeros(2), y0=y_dict), **opts)
    assert isinstance(a.y, torch.nn.Linear)
    assert torch.allclose(a.x, b.x, atol=1e-12)
    assert torch.allclose(a.y.weight, b.y["weight"], atol=1e-12)
    # Phi(x) = |x - t|_1 + (||x||^2 + 1)/(2 lam) is least at x* = (1, -1), where y* = (x*, 1)/lam.
    assert torch.allclose(a.x_phi, torch.tensor([1.0, -1.0], dtype=F64), atol=0.02)
    assert torch.allclose(a.y.weight[0], torch.tensor([1.0, -1.0], dtype=F64), atol=0.05)
    assert float(a.y.bias.detach()[0]) == pytest.approx(1.0, abs=0.05)


def test_float32_and_float64_agree():
    r64 = fc.smag(regression_problem(), **OPTS)
    r32 = fc.smag(regression_problem(), **{**OPTS, "dtype": torch.float32})
    assert r32.x.dtype == torch.float32 and r64.x.dtype == F64
    assert torch.allclose(r32.x.double(), r64.x, atol=1e-4)
    assert r32.history[10]["phi_value"] == pytest.approx(r64.history[10]["phi_value"], rel=1e-5)


def test_seed_reproduces_and_distinguishes_runs():
    a = fc.smag(regression_problem(), **OPTS)
    b = fc.smag(regression_problem(), **OPTS)
    c = fc.smag(regression_problem(), **{**OPTS, "seed": 4})
    # The final row has no phi_value (a stochastic problem without full_batch): compare the others.
    assert (
        torch.equal(a.x, b.x)
        and a.history.column("phi_value")[:-1].tolist() == b.history.column("phi_value")[:-1].tolist()
    )
    assert not torch.equal(a.x, c.x)


def test_stepper_equals_smag():
    problem = regression_problem()
    res = fc.smag(problem, **OPTS)
    opt = fc.Stepper(problem, "smag", gamma=0.5, eta0=0.2, eta1=0.1, seed=3, dtype=F64)
    rows = [opt.step() for _ in range(OPTS["iters"])]
    outputs = opt.outputs
    assert torch.equal(opt.x, res.x) and torch.equal(outputs["x_phi"], res.x_phi)
    assert torch.equal(outputs["x_psi"], res.x_psi)
    assert [r["phi_value"] for r in rows] == res.history.column("phi_value")[:-1].tolist()
    # A user-drawn batch works the same way.
    opt2 = fc.Stepper(problem, "smag", gamma=0.5, eta0=0.2, eta1=0.1, dtype=F64)
    g = torch.Generator().manual_seed(3)
    for _ in range(OPTS["iters"]):
        opt2.step(regression_sampler(g))
    assert torch.equal(opt2.x, res.x)


def test_stepper_writes_into_a_module():
    problem = regression_problem("module")
    opt = fc.Stepper(problem, "smag", gamma=0.5, eta0=0.2, eta1=0.1, dtype=F64)
    for _ in range(5):
        opt.step()
    target = linear_module()
    opt.copy_to(target, which="x_phi")
    assert torch.equal(flat(target), opt.state.x_phi)


def test_separate_samplers_for_phi_and_psi():
    seen = []

    def phi(x, batch):
        seen.append(("phi", batch.shape))
        return (x - batch).abs().sum()

    def psi(x, batch):
        seen.append(("psi", batch.shape))
        return 0.5 * (x - batch.mean(0)).abs().sum()

    s_phi = lambda g: torch.randn(2, generator=g, dtype=F64)  # noqa: E731
    s_psi = lambda g: torch.randn(5, 2, generator=g, dtype=F64)  # noqa: E731
    problem = fc.DMaxProblem(phi, psi, x0=torch.zeros(2), sampler=(s_phi, s_psi))
    assert problem.separate_samplers
    res = fc.smag(problem, gamma=0.5, eta0=0.1, eta1=0.1, iters=20, seed=0, progress=False, dtype=F64)
    assert ("phi", (2,)) in seen and ("psi", (5, 2)) in seen and ("phi", (5, 2)) not in seen
    opt = fc.Stepper(problem, "smag", gamma=0.5, eta0=0.1, eta1=0.1, dtype=F64)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        b = s_phi(g)  # the order smag draws in: phi's batch, then psi's
        opt.step(b, s_psi(g))
    assert torch.equal(opt.x, res.x)
    same = fc.DMaxProblem(phi, psi, x0=torch.zeros(2), sampler=s_phi, psi_sampler=s_psi)
    assert torch.equal(fc.smag(same, gamma=0.5, eta0=0.1, eta1=0.1, iters=20, progress=False, dtype=F64).x, res.x)


def test_random_output_is_a_replayable_iterate():
    problem = regression_problem()
    res = fc.smag(problem, **{**OPTS, "output": "random"})
    last = fc.smag(problem, **OPTS)
    t = res.info["output_index"]
    assert 1 <= t <= OPTS["iters"]
    assert res.history.column("phi_value").tolist() == last.history.column("phi_value").tolist()
    opt = fc.Stepper(problem, "smag", gamma=0.5, eta0=0.2, eta1=0.1, seed=3, dtype=F64)
    for _ in range(t - 1):
        opt.step()
    assert torch.equal(res.x, opt.x)  # x_{t-bar - 1}
    opt.step()
    assert torch.equal(res.x_phi, opt.outputs["x_phi"]) and torch.equal(res.x_psi, opt.outputs["x_psi"])


def test_random_output_index_is_uniform():
    OutputRule = sys.modules["fullcomp.algorithms.smag"].OutputRule
    T, runs = 4, 4000
    counts = [0] * (T + 1)
    for seed in range(runs):
        rule, kept = OutputRule(seed), None
        for k in range(T):
            kept = k + 1 if rule.keep(k) else kept
        counts[kept] += 1
    # Each of 1..T has probability 1/4: 1000 expected, standard deviation about 27.
    assert counts[0] == 0 and all(abs(c - runs / T) < 120 for c in counts[1:])


def test_checkpoint_resume_matches_uninterrupted(tmp_path):
    problem = regression_problem()
    ckpt = fc.Checkpoint(tmp_path / "run.pt", every=10)
    fc.smag(problem, **{**OPTS, "iters": 30, "checkpoint": ckpt, "output": "random"})
    resumed = fc.smag(problem, **{**OPTS, "checkpoint": ckpt, "output": "random"})
    full = fc.smag(problem, **{**OPTS, "output": "random"})
    assert resumed.info["resumed_from"] == 30
    assert torch.equal(resumed.x, full.x) and torch.equal(resumed.x_phi, full.x_phi)
    assert resumed.info["output_index"] == full.info["output_index"]


def test_time_budget_and_callback():
    seen = []

    def callback(it):
        seen.append((it.k, type(it.x)))
        return {"x_norm": float(flat(it.x).norm())}

    res = fc.smag(
        regression_problem("module"), **{**OPTS, "iters": None, "seconds": 0.05, "callback": callback, "eval_every": 5}
    )
    assert res.info["stopped"] == "seconds" and res.info["iterations"] >= 1
    assert all(k % 5 == 0 or k == res.info["iterations"] for k, _ in seen)
    assert all(kind is torch.nn.Linear for _, kind in seen)
    assert "x_norm" in res.history[0]


# -- bad input -----------------------------------------------------------------------------------------


def quadratic(x, batch):
    return (x**2).sum()


@pytest.mark.parametrize("name", ["gamma", "eta0", "eta1"])
@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, "0.1", True, None])
def test_step_sizes_must_be_positive(name, value):
    problem = fc.DMaxProblem(quadratic, x0=torch.ones(2))
    opts = {"gamma": 1.0, "eta0": 0.1, "eta1": 0.1, name: value}
    with pytest.raises(OptionError, match=name):
        fc.smag(problem, iters=5, progress=False, **opts)
    with pytest.raises(OptionError, match=name):
        fc.Stepper(problem, "smag", **opts)


def test_eta1_above_gamma_over_two_warns():
    problem = fc.DMaxProblem(quadratic, x0=torch.ones(2))
    with pytest.warns(UserWarning, match="eta1") as record:
        fc.smag(problem, gamma=0.5, eta0=0.1, eta1=0.3, iters=2, progress=False)
    with pytest.warns(UserWarning, match="eta1") as record_stepper:
        fc.Stepper(problem, "smag", gamma=0.5, eta0=0.1, eta1=0.3)
    assert record[0].filename == record_stepper[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fc.smag(problem, gamma=0.5, eta0=0.1, eta1=0.25, iters=2, progress=False)


def test_non_scalar_phi_is_rejected_at_construction_and_mid_run():
    with pytest.raises(ModelError, match="shape \\(2,\\).*scalar"):
        fc.DMaxProblem(lambda x, batch: x**2, x0=torch.ones(2))
    calls = [0]

    def phi(x, batch):
        if not torch.is_grad_enabled():  # construction and the recorded objective: evaluations, not iterations
            return (x**2).sum()
        calls[0] += 1
        return x**2 if calls[0] > 3 else (x**2).sum()  # iteration k is gradient call k + 1

    problem = fc.DMaxProblem(phi, x0=torch.ones(2))
    with pytest.raises(OracleError, match="iteration 3") as info:
        fc.smag(problem, gamma=1.0, eta0=0.1, eta1=0.1, iters=10, progress=False)
    assert info.value.result.info["iterations"] == 3
    assert info.value.result.status == "error"


def test_non_finite_value_stops_with_the_last_finite_state():
    calls = [0]

    def phi(x, batch):
        out = (x**2).sum()
        if not torch.is_grad_enabled():  # construction and the recorded objective: evaluations, not iterations
            return out
        calls[0] += 1
        return out * math.nan if calls[0] == 6 else out  # iteration k is gradient call k + 1

    problem = fc.DMaxProblem(phi, x0=torch.ones(2))
    with pytest.raises(OracleError, match="phi returned a non-finite value \\(nan\\) at iteration 5") as info:
        fc.smag(problem, gamma=1.0, eta0=0.1, eta1=0.1, iters=10, progress=False, dtype=F64)
    result = info.value.result
    # The five finite rows, then the closing row of the last finite state (k = 5, recorded outside optimizer time).
    assert result.status == "error" and result.info["iterations"] == 5 and len(result.history) == 6
    assert result.history.column("k").tolist() == [0, 1, 2, 3, 4, 5]
    last = result.history[-1]
    assert all(math.isfinite(last[key]) for key in ("phi_value", "objective_estimate", "objective"))
    assert last["objective"] == pytest.approx(float((result.x_phi**2).sum()))
    assert torch.isfinite(result.x).all() and torch.isfinite(result.x_phi).all()
    # That state is the one after five good iterations.
    calls[0] = 100
    opt = fc.Stepper(problem, "smag", gamma=1.0, eta0=0.1, eta1=0.1, dtype=F64)
    for _ in range(5):
        opt.step()
    assert torch.equal(result.x, opt.x)


def test_non_finite_gradient_is_caught():
    problem = fc.DMaxProblem(lambda x, batch: torch.sqrt(x.abs()).sum(), x0=torch.tensor([1.0, 0.0]))
    with pytest.raises(OracleError, match="x-gradient of phi or psi is non-finite at iteration 0"):
        fc.smag(problem, gamma=1.0, eta0=0.1, eta1=0.1, iters=3, progress=False)


def test_dual_shape_must_match_its_set():
    def phi(x, y, batch):
        return (x**2).sum() + y.sum() - (y**2).sum()

    with pytest.raises(DomainError, match="y0 has shape \\(3,\\) but Y has shape \\(2,\\)"):
        fc.DMaxProblem(phi, x0=torch.ones(2), y0=torch.zeros(3), Y=fc.L2Ball(2, 1.0))
    with pytest.raises(DomainError, match="Z"):
        psi = lambda x, z, b: z.sum() - (z**2).sum()  # noqa: E731
        fc.DMaxProblem(phi, psi, x0=torch.ones(2), z0=torch.zeros(2), Z=fc.Box(0, 1, shape=(3,)))
    with pytest.raises(DomainError, match="fullcomp set"):
        fc.DMaxProblem(phi, x0=torch.ones(2), y0=torch.zeros(2), Y="ball")
    with pytest.raises(ModelError, match="y0"):
        fc.DMaxProblem(quadratic, x0=torch.ones(2), Y=fc.L2Ball(2, 1.0))


def test_missing_sampler_for_a_stochastic_function():
    def phi(x, batch):
        X, t = batch
        return ((X @ x - t) ** 2).mean()

    with pytest.raises(ModelError, match="sampler"):
        fc.DMaxProblem(phi, x0=torch.ones(2))
    problem = fc.DMaxProblem(phi, x0=torch.ones(2), sampler=lambda g: (torch.randn(4, 2, generator=g), torch.zeros(4)))
    with pytest.raises(ModelError, match="full_batch"):
        fc.stationarity(problem, torch.ones(2), 1.0)


def test_module_parameters_must_be_floating_point():
    class Counts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2, dtype=torch.long), requires_grad=False)

    with pytest.raises(ModelError, match="floating"):
        fc.DMaxProblem(lambda x, batch: torch.tensor(0.0), x0=Counts())


def test_other_malformed_declarations():
    with pytest.raises(ModelError, match="x0 is required"):
        fc.DMaxProblem(quadratic)
    with pytest.raises(ModelError, match="phi must be a callable"):
        fc.DMaxProblem("phi", x0=torch.ones(2))
    with pytest.raises(ModelError, match="psi is None"):
        fc.DMaxProblem(quadratic, x0=torch.ones(2), z0=torch.zeros(1))
    with pytest.raises(ModelError, match="psi_sampler"):
        fc.DMaxProblem(quadratic, x0=torch.ones(2), sampler=lambda g: None, psi_sampler=lambda g: None)
    with pytest.raises(ModelError, match="psi\\(x, batch\\) raised"):
        fc.DMaxProblem(quadratic, lambda x, batch: x[5], x0=torch.ones(2))
    with pytest.raises(ModelError, match="non-finite"):
        fc.DMaxProblem(lambda x, batch: x.sum() / 0.0, x0=torch.ones(2))
    with pytest.raises(ModelError, match="DMaxProblem"):
        fc.smag("problem", gamma=1.0, eta0=0.1, eta1=0.1, iters=1)
    problem = fc.DMaxProblem(quadratic, x0=torch.ones(2))
    with pytest.raises(OptionError, match="output"):
        fc.smag(problem, gamma=1.0, eta0=0.1, eta1=0.1, iters=1, output="best")
    with pytest.raises(OptionError, match="dtype"):
        fc.smag(problem, gamma=1.0, eta0=0.1, eta1=0.1, iters=1, dtype=torch.int64)
    with pytest.raises(OptionError, match="device"):
        fc.smag(problem, gamma=1.0, eta0=0.1, eta1=0.1, iters=1, device="nope")
    with pytest.raises(OptionError, match="seed"):
        fc.smag(problem, gamma=1.0, eta0=0.1, eta1=0.1, iters=1, seed=1.5)
    with pytest.raises(OptionError, match="budget"):
        fc.smag(problem, gamma=1.0, eta0=0.1, eta1=0.1)
    with pytest.raises(OptionError, match="weak_convexity"):
        fc.stationarity(problem, torch.ones(2), 1.0, weak_convexity=1.0)
