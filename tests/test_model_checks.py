"""Checks a problem runs once at construction: its dtype, the callables' signatures, the inner map's autodiff."""

from __future__ import annotations

import functools

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp import autodiff
from fullcomp.errors import ModelError, OptionError
from fullcomp_lab import noise

F32, F64 = torch.float32, torch.float64
A32 = torch.randn(5, 20, generator=torch.Generator().manual_seed(0), dtype=F32)
A64 = A32.double()


def simplex_problem(inner, **kwargs):
    return fc.CompositeProblem(cp.max(fc.inner_value(5)), inner, fc.Simplex(20), **kwargs)


def ball_problem(inner, **kwargs):
    return fc.CompositeProblem(cp.max(fc.inner_value(5)), inner, fc.L2Ball(20), **kwargs)


# ---- dtype inference ------------------------------------------------------------------------------


def test_float32_data_in_the_closure():
    A = torch.randn(5, 20, dtype=F32)
    seen = []

    def inner(x, b):
        seen.append(x.dtype)
        return A @ x - 1

    problem = simplex_problem(inner)
    assert problem.dtype == F32 and set(seen) == {F32}
    value = problem.objective(problem.x0)
    assert seen[-1] == F32
    assert np.isclose(value, float((A @ torch.full((20,), 0.05)).max() - 1), atol=1e-5)


def test_float32_data_as_a_module_global():
    # A map written at module level reads its data as globals, not closure cells.
    problem = simplex_problem(lambda x, b: A32 @ x - 1)
    assert problem.dtype == F32
    assert simplex_problem(lambda x, b: torch.stack([A32[i] @ x for i in range(5)])).dtype == F32  # nested code


def test_a_zero_dimensional_flag_does_not_decide_the_dtype():
    # as in torch's type promotion: a 0-d float32 flag next to float64 data leaves the result float64
    problem = simplex_problem(lambda x, flag: A64 @ x * (1 + 0 * flag), sampler=lambda g: torch.tensor(0.0))
    assert problem.dtype == F64
    # with nothing else seen, the 0-d tensors decide
    assert simplex_problem(lambda x, t: x[:5] * t, sampler=lambda g: torch.tensor(2.0)).dtype == F32


def test_noisy_maps_pass_the_checks():
    noisy, sampler = noise.with_noise(
        lambda x, b: torch.log(1 + torch.exp(A64 @ x)),
        None,
        n=5,
        d=20,
        value_noise=noise.Gaussian(0.1),
        jacobian_noise=noise.StudentT(2.5, 0.1),
    )
    problem = simplex_problem(noisy, sampler=sampler, full_batch=noise.noiseless())
    assert problem.dtype == F64


def test_dtype_read_from_the_batch_full_batch_and_x0():
    def inner(x, b):
        return b["A"] @ x

    def sampler(g):
        return {"A": (torch.randn(5, 20, generator=g, dtype=F32),)[0]}

    assert simplex_problem(inner, sampler=sampler).dtype == F32
    nested = simplex_problem(lambda x, b: b[0][1] @ x, sampler=lambda g: [(0, A32)])
    assert nested.dtype == F32
    assert simplex_problem(lambda x, b: A32 @ x if b is None else b @ x, full_batch=A32).dtype == F32
    x0 = torch.full((20,), 0.05, dtype=F32)
    assert simplex_problem(lambda x, b: torch.stack([x.sum()] * 5), x0=x0).dtype == F32
    assert simplex_problem(lambda x, b: torch.stack([x.sum()] * 5)).dtype == F64  # nothing found


def test_dtype_read_from_modules_objects_partials_and_methods():
    lin = torch.nn.Linear(20, 5).float()
    assert simplex_problem(lambda x, b: lin(x)).dtype == F32

    class Map:
        def __init__(self):
            self.A = A32

        def __call__(self, x, b):
            return self.A @ x

        def method(self, x, b):
            return self.A @ x

    assert simplex_problem(Map()).dtype == F32
    assert simplex_problem(Map().method).dtype == F32
    assert simplex_problem(functools.partial(lambda A, x, b: A @ x, A32)).dtype == F32
    assert simplex_problem(functools.partial(lambda x, b, A: A @ x, A=A32)).dtype == F32

    def wrap(fn):
        return lambda x, b: fn(x, b) + 0.0  # data one function deeper

    assert simplex_problem(wrap(lambda x, b: A32 @ x)).dtype == F32


def test_explicit_dtype_wins():
    def inner(x, b):
        return A64.to(x.dtype) @ x

    problem = simplex_problem(inner, dtype=F32)
    assert problem.dtype == F32
    with pytest.raises(OptionError, match=r"dtype=torch.float64 but the problem's data are torch.float32"):
        problem.check_run_dtype(F64)
    with pytest.raises(ModelError, match="dtype must be a torch floating dtype"):
        simplex_problem(inner, dtype=torch.int64)
    with pytest.raises(ModelError, match="dtype must be a torch floating dtype"):
        simplex_problem(inner, dtype="float32")


def test_mixed_dtypes_are_rejected_with_the_fix():
    with pytest.raises(ModelError, match=r"inner map's data are torch.float32 but x0 is torch.float64.*dtype="):
        simplex_problem(lambda x, b: A32 @ x - 1, x0=torch.full((20,), 0.05, dtype=F64))
    with pytest.raises(ModelError, match=r"float32.*float64.*tensor.to\(torch.float32\)"):
        simplex_problem(lambda x, b: A32 @ x + b, sampler=lambda g: torch.zeros(5, dtype=F64))
    b64 = torch.zeros(5, dtype=F64)
    with pytest.raises(ModelError, match=r"inner map.s data mix torch.float(32|64) and torch.float(32|64)"):
        simplex_problem(lambda x, b: A32 @ x + b64)
    # an explicit dtype settles it when the map converts its data itself
    assert simplex_problem(lambda x, b: A32.to(x) @ x + b64.to(x), dtype=F64).dtype == F64


def test_check_run_dtype():
    problem = simplex_problem(lambda x, b: A32 @ x)
    assert problem.check_run_dtype(F32) == F32
    with pytest.raises(
        OptionError,
        match=r"dtype=torch.float64 but the problem's data are torch.float32: pass "
        r"dtype=torch.float32 or build the data in float64",
    ):
        problem.check_run_dtype(F64)
    with pytest.raises(OptionError, match="dtype must be a torch floating dtype"):
        problem.check_run_dtype(torch.int32)
    free = simplex_problem(lambda x, b: torch.stack([x.sum(), x.max(), x.min(), x[0], x[1]]))
    assert free.dtype == F64
    assert free.check_run_dtype(F32) == F32 and free.check_run_dtype(F64) == F64
    assert simplex_problem(lambda x, b: A64 @ x).check_run_dtype(F64) == F64


def test_objective_evaluates_in_the_problem_dtype():
    seen = []

    def inner(x, b):
        seen.append(x.dtype)
        return A64 @ x

    problem = simplex_problem(inner)
    problem.objective(np.full(20, 0.05))
    assert problem.dtype == F64 and seen[-1] == F64


def test_dmax_dtype():
    X32 = torch.randn(6, 3, dtype=F32)
    p32 = fc.DMaxProblem(lambda x, b: ((X32 @ x) ** 2).mean(), x0=torch.ones(3, dtype=F32))
    assert p32.dtype == F32 and p32.check_run_dtype(F32) == F32 and p32.check_run_dtype(None) == F32
    pattern = r"dtype=torch.float64 but the problem's data are torch.float32: pass dtype=torch.float32 or build"
    with pytest.raises(OptionError, match=pattern) as info:
        p32.check_run_dtype(F64)
    assert info.value.__cause__ is not None
    X64 = X32.double()
    p64 = fc.DMaxProblem(
        lambda x, y, b: (X64 @ x) @ y - (y**2).sum(), x0=torch.ones(3, dtype=F64), y0=torch.zeros(6, dtype=F64)
    )
    assert p64.dtype == F64 and p64.check_run_dtype(F64) == F64
    with pytest.raises(OptionError, match=r"dtype=torch.float32 but the problem's data are torch.float64"):
        p64.check_run_dtype(F32)
    module = torch.nn.Linear(3, 1).double()
    assert fc.DMaxProblem(lambda x, b: (x(X64) ** 2).mean(), x0=module).dtype == F64
    # x0 = torch.zeros(3) is float32 by default, but phi's data are float64: the problem's dtype is theirs
    mixed = fc.DMaxProblem(lambda x, b: ((X64 @ x) ** 2).mean(), x0=torch.zeros(3))
    assert mixed.dtype == F64
    with pytest.raises(OptionError, match="data are torch.float64"):
        mixed.check_run_dtype(F32)
    # data passed in batches are cast by the run: x0's dtype is the default, any run dtype goes
    batched = fc.DMaxProblem(
        lambda x, b: ((b @ x) ** 2).mean(), x0=torch.ones(3, dtype=F32), sampler=lambda g: torch.randn(6, 3, dtype=F64)
    )
    assert batched.dtype == F32 and batched.check_run_dtype(F64) == F64
    free = fc.DMaxProblem(lambda x, b: (x**2).sum(), x0=[1.0, 2.0])
    assert free.dtype == F64 and free.check_run_dtype(F32) == F32
    with pytest.raises(OptionError, match="dtype must be a torch floating dtype"):
        free.check_run_dtype(torch.int64)


# ---- signatures -----------------------------------------------------------------------------------


def test_inner_and_sampler_with_the_wrong_signature():
    with pytest.raises(
        ModelError,
        match=r"inner must have the signature inner\(x, batch\) -> Tensor of shape "
        r"\(n,\)",
    ) as info:
        ball_problem(lambda x: x.sum())
    assert isinstance(info.value.__cause__, TypeError)
    with pytest.raises(ModelError, match=r"sampler must have the signature sampler\(generator\) -> batch") as info:
        ball_problem(lambda x, b: A64 @ x, sampler=lambda: 0)
    assert isinstance(info.value.__cause__, TypeError)

    def inner(x, batch, scale):
        return A64 @ x * scale

    with pytest.raises(ModelError, match=r"inner must have the signature"):
        ball_problem(inner)
    # defaults, *args and keyword-only arguments with defaults are fine
    ball_problem(lambda x, batch, scale=2.0: A64 @ x * scale)
    ball_problem(lambda *args: A64 @ args[0])


def test_a_type_error_inside_the_map_is_the_users_own():
    def inner(x, batch):
        return A64 @ x + "oops"

    with pytest.raises(TypeError) as info:
        ball_problem(inner)
    assert not isinstance(info.value, ModelError)

    def sampler(g):
        return torch.randn(5, generator=g, dtype=F64) + "oops"

    with pytest.raises(TypeError) as info:
        ball_problem(lambda x, b: A64 @ x, sampler=sampler)
    assert not isinstance(info.value, ModelError)


def test_the_call_site_fallback_when_no_signature_is_known(monkeypatch):
    def no_signature(fn):
        raise ValueError("no signature found")

    monkeypatch.setattr(autodiff.inspect, "signature", no_signature)
    with pytest.raises(ModelError, match=r"inner must have the signature") as info:
        ball_problem(lambda x: x.sum())
    assert isinstance(info.value.__cause__, TypeError)

    def inner(x, batch):
        return A64 @ x + "oops"

    with pytest.raises(TypeError) as info:
        ball_problem(inner)
    assert not isinstance(info.value, ModelError)


def test_dmax_callables_with_the_wrong_signature():
    x0, y0 = torch.ones(2, dtype=F64), torch.zeros(2, dtype=F64)
    with pytest.raises(ModelError, match=r"phi must have the signature phi\(x, y, batch\)") as info:
        fc.DMaxProblem(lambda x, b: (x**2).sum(), x0=x0, y0=y0)
    assert isinstance(info.value.__cause__, TypeError)
    with pytest.raises(ModelError, match=r"phi must have the signature phi\(x, batch\)"):
        fc.DMaxProblem(lambda x, y, b: (x**2).sum(), x0=x0)
    with pytest.raises(ModelError, match=r"psi must have the signature psi\(x, batch\)"):
        fc.DMaxProblem(lambda x, b: (x**2).sum(), lambda x: x.sum(), x0=x0)
    with pytest.raises(ModelError, match=r"psi must have the signature psi\(x, z, batch\)"):
        fc.DMaxProblem(lambda x, b: (x**2).sum(), lambda x, b: x.sum(), x0=x0, z0=y0)
    with pytest.raises(ModelError, match=r"sampler must have the signature sampler\(generator\) -> batch") as info:
        fc.DMaxProblem(lambda x, b: (x**2).sum(), x0=x0, sampler=lambda: 0)
    assert isinstance(info.value.__cause__, TypeError)
    with pytest.raises(ModelError, match=r"psi_sampler must have the signature psi_sampler\(generator\)"):
        fc.DMaxProblem(
            lambda x, b: (x**2).sum(), lambda x, b: x.sum(), x0=x0, sampler=lambda g: 0, psi_sampler=lambda: 0
        )
    # a TypeError raised inside phi keeps the existing report
    with pytest.raises(ModelError, match=r"phi\(x, batch\) raised TypeError"):
        fc.DMaxProblem(lambda x, b: x + "oops", x0=x0)


# ---- the autodiff check ---------------------------------------------------------------------------


def detached_item(x, b):
    return (A64 @ x) * float((x @ x).item()) + (x**2).sum()


def through_numpy(x, b):
    return A64 @ torch.as_tensor(np.asarray(x.detach()))


def detached(x, b):
    return A64 @ x.detach() + (x**2).sum()


@pytest.mark.parametrize("inner", [detached_item, detached])
@pytest.mark.parametrize("make", [ball_problem, simplex_problem])
def test_a_map_breaking_the_graph_is_caught(make, inner):
    with pytest.raises(
        ModelError,
        match=r"Jacobian of inner\(x, batch\) from torch autodiff disagrees with finite "
        r"differences \(directional derivative .* vs .*\).*\.item\(\).*check_gradient=False",
    ):
        make(inner)
    make(inner, check_gradient=False)


def test_a_map_through_numpy_is_caught():
    pattern = r"torch.func.*\.item\(\), float\(\.\.\.\), numpy.*check_gradient=False"
    with pytest.raises(ModelError, match=pattern) as info:
        ball_problem(through_numpy)
    assert info.value.__cause__ is not None
    ball_problem(through_numpy, check_gradient=False)


def test_a_float32_map_breaking_the_graph_is_caught():
    with pytest.raises(ModelError, match="disagrees with finite differences"):
        simplex_problem(lambda x, b: A32 @ x.detach() + (x**2).sum())


def test_check_gradient_must_be_a_bool():
    with pytest.raises(ModelError, match="check_gradient must be True or False"):
        ball_problem(lambda x, b: A64 @ x, check_gradient="yes")


def smooth_maps(A):
    return [
        lambda x, b: A @ x - 1,
        lambda x, b: torch.log(1 + torch.exp(A @ x)),
        lambda x, b: torch.nn.functional.softplus(3 * (A @ x)) + (x**2).sum(),
        lambda x, b: torch.tanh(A @ x) * (x @ x) + torch.sin(A @ x),
        lambda x, b: (A @ x) ** 3 / 10 + torch.exp(-((A @ x) ** 2)),
    ]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("k", range(5))
@pytest.mark.parametrize("make", [ball_problem, simplex_problem])
def test_smooth_maps_pass(make, dtype, k):
    A = A64.to(dtype)
    problem = make(smooth_maps(A)[k])
    assert problem.dtype == dtype


@pytest.mark.parametrize("dtype", [F32, F64])
def test_large_smooth_and_kinked_maps_pass(dtype):
    g = torch.Generator().manual_seed(1)
    A = torch.randn(200, 3000, generator=g, dtype=F64).to(dtype)
    u = fc.inner_value(200)
    for inner in (
        lambda x, b: torch.log(1 + torch.exp(A @ x)),
        lambda x, b: torch.relu(A @ x - 0.01),
        lambda x, b: torch.abs(A @ x) + torch.maximum(A @ x, -(A @ x) / 2),
    ):
        for domain in (fc.Simplex(3000), fc.L2Ball(3000, 50.0), fc.L1Ball(3000)):
            assert fc.CompositeProblem(cp.max(u), inner, domain).dtype == dtype


@pytest.mark.parametrize("dtype", [F32, F64])
def test_matrix_completion_on_the_reads_path_passes(dtype):
    rng = np.random.default_rng(3)
    P, Q, groups, observed = 40, 50, 4, 600
    reads = np.sort(rng.choice(P * Q, observed, replace=False))
    ratings = torch.tensor(rng.integers(1, 6, observed), dtype=dtype)
    members = [torch.tensor(np.flatnonzero(rng.integers(0, groups, observed) == g)) for g in range(groups)]

    def sampler(gen):
        return [m[torch.randint(len(m), (64,), generator=gen)] for m in members]

    def losses(values, batch):
        return torch.stack([torch.nn.functional.huber_loss(values[b], ratings[b], delta=1.0) for b in batch])

    for radius in (1.0, 300.0):
        problem = fc.CompositeProblem(
            cp.max(fc.inner_value(groups)), losses, fc.NuclearBall((P, Q), radius), sampler=sampler, reads=reads
        )
        assert problem.dtype == dtype
    with pytest.raises(ModelError, match="disagrees with finite differences"):
        fc.CompositeProblem(
            cp.max(fc.inner_value(groups)),
            lambda v, b: losses(v, b) * float(v.sum().item()),
            fc.NuclearBall((P, Q), 300.0),
            sampler=sampler,
            reads=reads,
        )


def test_maps_only_defined_near_the_start_and_random_maps_are_not_flagged():
    # log is defined on the open simplex only: perturbing a vertex start leaves it (non-finite values are skipped)
    x0 = np.zeros(20)
    x0[0] = 1.0
    for inner in (lambda x, b: torch.log(A64.abs() @ x + 1e-3), lambda x, b: torch.sqrt(x[:5])):
        problem = simplex_problem(inner, x0=x0)
        assert problem.n == 5 and np.isfinite(problem.objective(x0))
    # a map with its own randomness cannot be checked by differences; it is not flagged
    assert simplex_problem(lambda x, b: A64 @ x + torch.randn(5, dtype=F64)).n == 5


def test_the_check_is_deterministic_and_leaves_the_global_generator_alone():
    torch.manual_seed(7)
    before = torch.rand(3)
    torch.manual_seed(7)
    simplex_problem(lambda x, b: torch.log(1 + torch.exp(A64 @ x)))
    assert torch.equal(torch.rand(3), before)
    messages = set()
    for _ in range(2):
        with pytest.raises(ModelError) as info:
            ball_problem(detached_item)
        messages.add(str(info.value))
    assert len(messages) == 1


def test_a_map_failing_under_forward_mode_falls_back_to_reverse_mode():
    class NoJvp(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x.exp()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output)

        @staticmethod
        def backward(ctx, grad):
            (out,) = ctx.saved_tensors
            return grad * out

    inner = lambda x, b: NoJvp.apply(A64 @ x)  # noqa: E731
    with pytest.raises(Exception):  # noqa: B017  (torch.func has no forward mode for it)
        torch.func.jvp(lambda x: inner(x, None), (torch.ones(20, dtype=F64),), (torch.ones(20, dtype=F64),))
    assert ball_problem(inner).dtype == F64


def test_outer_value_names_the_placeholder_size():
    from fullcomp.model.composite import Outer

    outer = Outer(cp.max(fc.inner_value(7)), fc.L2Ball(3))
    assert outer.value(np.arange(7.0)) == 6.0
    with pytest.raises(fc.errors.ModelError, match="placeholder holds 7 values, got an array of shape \\(3,\\)"):
        outer.value(np.zeros(3))
