"""One small problem of each kind and the required hyperparameters of every registered method.

Shared by tests/test_contract.py and the subprocess it kills, so both build identical problems.
"""

from __future__ import annotations

import cvxpy as cp
import torch

import fullcomp as fc


def composite(dtype: torch.dtype = torch.float64, scale: float = 1.0, nan_after: int | None = None, device="cpu"):
    """max of four softplus group losses over an l1 ball; noisy samples, exact full_batch."""
    A = torch.randn(4, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    A = A.to(device=device, dtype=dtype) * scale
    calls = [0]

    def inner(x, noise):
        calls[0] += 1
        out = torch.nn.functional.softplus(A @ x - 0.5) + noise
        return out * float("nan") if nan_after is not None and calls[0] > nan_after else out

    def sampler(gen):
        return 0.05 * torch.randn(4, generator=gen, dtype=torch.float64, device=gen.device).to(dtype)

    u = fc.inner_value(4)
    exact = torch.zeros(4, dtype=dtype, device=device)
    problem = fc.CompositeProblem(
        outer=cp.max(u), inner=inner, domain=fc.L1Ball(10, 2.0), sampler=sampler, full_batch=exact
    )
    calls[0] = 0  # count the run's calls only
    return problem


def dc(dtype: torch.dtype = torch.float64, shift: float = 1.0, nan_after: int | None = None):
    """phi - psi = sum (x - b)^2 - |x|_1 with noisy b around ``shift`` (a difference of convex functions)."""
    calls = [0]

    def sampler(gen):
        calls[0] += 1
        b = shift + 0.1 * torch.randn(3, generator=gen, dtype=torch.float64).to(dtype)
        return b * float("nan") if nan_after is not None and calls[0] > nan_after else b

    return fc.DMaxProblem(
        lambda x, b: ((x - b) ** 2).sum(),
        lambda x, b: x.abs().sum(),
        x0=torch.zeros(3, dtype=dtype),
        sampler=sampler,
        full_batch=torch.full((3,), shift, dtype=dtype),
    )


def minimax(dtype: torch.dtype = torch.float64, shift: float = 1.0, nan_after: int | None = None):
    """min over x = {w, s} of max over y in a ball of (w - b)^2 + s^2 + y.w - |y|^2 / 2."""
    calls = [0]

    def sampler(gen):
        calls[0] += 1
        b = shift + 0.1 * torch.randn(3, generator=gen, dtype=torch.float64).to(dtype)
        return b * float("nan") if nan_after is not None and calls[0] > nan_after else b

    def phi(x, y, b):
        return ((x["w"] - b) ** 2).sum() + (x["s"] ** 2).sum() + y @ x["w"] - 0.5 * (y @ y)

    x0 = {"w": torch.zeros(3, dtype=dtype), "s": torch.ones(2, dtype=dtype)}
    return fc.DMaxProblem(
        phi,
        x0=x0,
        y0=torch.zeros(3, dtype=dtype),
        Y=fc.L2Ball(3, 5.0),
        sampler=sampler,
        full_batch=torch.full((3,), shift, dtype=dtype),
    )


#: method -> (problem factory, required hyperparameters)
CASES = {
    "hmsfw": (composite, {}),
    "hmsfw-ii": (composite, {}),
    "hmsfw-i": (composite, {}),
    "hmsfw-exact": (composite, {}),
    "scfw": (composite, {}),
    "clipped-scfw": (composite, {"clip": 5.0}),
    "psg": (composite, {}),
    "prox-linear": (composite, {}),
    "linasa-icg": (composite, {"icg_steps": 3}),
    "smag": (minimax, {"gamma": 0.5, "eta0": 0.1, "eta1": 0.1}),
    "sgd": (dc, {"eta": 0.05}),
    "sdca": (dc, {"eta": 0.05, "outer": 0.9, "inner_iters": 3}),
    "ssdc-spg": (dc, {"eta": 0.2, "gamma": 1.0, "inner_iters": 3}),
    "ssdc-adagrad": (dc, {"eta": 0.2, "gamma": 1.0, "inner_iters": 3}),
    "sbcd": (dc, {"eta": 0.05, "mu": 1.0, "inner_iters": 3}),
    "sgda": (minimax, {"eta_x": 0.05, "eta_y": 0.05}),
    "epoch-gda": (minimax, {"eta_x": 0.05, "eta_y": 0.05, "gamma": 0.1}),
    "sopa": (minimax, {"eta": 0.05, "eta_s": 0.05}),
}


def run(method: str, **options):
    factory, required = CASES[method]
    make = options.pop("problem", None) or factory
    return fc.solve(make() if callable(make) else make, method, **{**required, "progress": False, **options})
