"""Quickstart: CVaR of five group regression losses, minimized over the simplex.

Group g draws features a ~ N(0, I) and targets b = a^T w_g + sigma_g e, so its
expected squared loss is f_g(x) = E (a^T x - b)^2 = ||x - w_g||^2 + sigma_g^2.
HMSFW only sees minibatches; CVXPY solves the exact problem for comparison.

    python examples/quickstart.py              # solve and compare with CVXPY
    fullcomp run examples/quickstart.py --iters 300 --out runs/quickstart
"""

import argparse

import cvxpy as cp
import numpy as np
import torch

import fullcomp as fc

GROUPS, DIM, BATCH = 5, 10, 128
W = torch.tensor(np.random.default_rng(0).dirichlet(np.ones(DIM), size=GROUPS))  # true weights, (5, 10)
SIGMA = torch.linspace(0.1, 0.5, GROUPS, dtype=torch.float64)  # noise level of each group


def sampler(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One minibatch per group: Gaussian features (5, BATCH, 10) and target noise (5, BATCH)."""
    like = {"generator": gen, "dtype": torch.float64, "device": gen.device}  # on the device fullcomp runs on
    return torch.randn(GROUPS, BATCH, DIM, **like), torch.randn(GROUPS, BATCH, **like)


def group_losses(x: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    a, e = batch
    w, sigma = W.to(x.device), SIGMA.to(x.device)
    targets = a @ w.unsqueeze(-1) + sigma[:, None, None] * e.unsqueeze(-1)  # (5, BATCH, 1)
    return ((a @ x - targets.squeeze(-1)) ** 2).mean(dim=1)  # (5,): one mean squared error per group


def build(args: list[str] | None = None) -> fc.CompositeProblem:
    u = fc.inner_value(GROUPS)
    return fc.CompositeProblem(outer=fc.cvar(u, 0.4), inner=group_losses, domain=fc.Simplex(DIM), sampler=sampler)


def exact_problem() -> tuple[cp.Problem, cp.Variable]:
    """The deterministic problem min_x CVaR_0.4(||x - w_g||^2 + sigma_g^2) over the simplex, in CVXPY."""
    x = cp.Variable(DIM)
    losses = cp.hstack([cp.sum_squares(x - w) + s**2 for w, s in zip(W.numpy(), SIGMA.numpy())])
    return cp.Problem(cp.Minimize(fc.cvar(losses, 0.4)), [x >= 0, cp.sum(x) == 1]), x


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=300, help="HMSFW iterations (default 300)")
    iters = parser.parse_args().iters
    result = fc.hmsfw(build(), iters=iters, seed=0)
    last = result.history[-1]
    print(
        f"HMSFW, {iters} iterations: objective estimate {last['objective_estimate']:.5f}, "
        f"gap estimate {last['gap_estimate']:.2e}"
    )
    exact, x = exact_problem()
    optimum = exact.solve()
    x.value = result.x.numpy()  # the exact objective at the HMSFW iterate
    print(f"exact objective at the HMSFW iterate {exact.objective.value:.5f}; CVXPY optimum {optimum:.5f}")
