"""SGDA, SOPA and SMAG (pAUC protocol) and SGD and SMAG (PU protocol) against hand-written torch loops.

Each floor is the same update written as a user would in plain torch: the problem's own phi (and psi) on a
flat leaf vector viewed as the model (``problem.x.view``), ``torch.autograd.grad``, and the update rule in
a few tensor operations, with the batches drawn from the same sampler and generator.  fullcomp's figure is
its optimizer time (``result.info["optimizer_seconds"]``: sampling and update; history rows, the closing
evaluation and the progress bar are outside it) and its wall time.  Rounds alternate; medians are printed.

    python benchmarks/dmax_overhead.py                # synthetic tabular data (Adult-sized batches)
    python benchmarks/dmax_overhead.py --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import fullcomp as fc
from fullcomp.model.dmax import to_run
from fullcomp_lab.datasets import digits, pu_problem, pu_split
from fullcomp_lab.pauc import pauc_problem

torch.set_num_threads(1)


def tabular(n: int = 4000, d: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n)
    X = rng.normal(size=(n, d)) + 0.8 * a[:, None] * np.eye(d)[0]
    y = (X[:, 1] + 0.5 * X[:, 0] + 0.5 * rng.normal(size=n) > 0.3).astype(int)
    return X.astype(np.float32), y, a


def floor(problem: fc.DMaxProblem, method: str, settings: dict, iters: int, seed: int) -> float:
    """Seconds per iteration of the hand-written loop of ``method``'s update."""
    gen = torch.Generator().manual_seed(seed)
    dtype = problem.dtype
    x = problem.x.flat(dtype, "cpu")
    Y = problem.Y

    def project(v):
        return v if Y is None else Y.project(v.view(Y.shape)).reshape(-1)

    def view_y(v):
        return None if problem.y is None else problem.y.view(v)

    y = None if problem.y is None else project(problem.y.flat(dtype, "cpu"))
    x_phi, x_psi = x.clone(), x.clone()
    mask = None
    if method == "sopa":
        mask = torch.cat([torch.full((k,), name.endswith("u")) for name, k in zip(problem.x.names, problem.x.numels)])

    def grads(*points):
        leaves = [p.detach().requires_grad_(True) for p in points]
        return leaves

    start = time.perf_counter()
    for _ in range(iters):
        batch, psi_batch = problem.sample(gen)
        batch = to_run(batch, dtype, "cpu")
        if method == "sgda":
            xl, yl = grads(x, y)
            loss = problem.phi(problem.x.view(xl), view_y(yl), batch)
            gx, gy = torch.autograd.grad(loss, (xl, yl))
            x = x - settings["eta_x"] * gx
            y = project(y + settings["eta_y"] * gy)
        elif method == "sopa":
            (xl,) = grads(x)
            (gx,) = torch.autograd.grad(problem.phi(problem.x.view(xl), view_y(y), batch), xl)
            x = x - torch.where(mask, settings["eta_s"] * gx, settings["eta"] * gx)
        elif method == "smag-minimax":
            eta0, eta1, gamma = settings["eta0"], settings["eta1"], settings["gamma"]
            xl, yl = grads(x_phi, y)
            gx, gy = torch.autograd.grad(problem.phi(problem.x.view(xl), view_y(yl), batch), (xl, yl))
            x_phi = x_phi - eta1 * (gx + (x_phi - x) / gamma)
            y = project(y + eta1 * gy)
            x = x - eta0 * (x - x_phi) / gamma
        elif method == "sgd":
            (xl,) = grads(x)
            loss = problem.phi(problem.x.view(xl), batch) - problem.psi(problem.x.view(xl), batch)
            (g,) = torch.autograd.grad(loss, xl)
            x = x - settings["eta"] * g
        elif method == "smag-dc":
            eta0, eta1, gamma = settings["eta0"], settings["eta1"], settings["gamma"]
            a, b = grads(x_phi, x_psi)
            psi_batch = batch if psi_batch is None else to_run(psi_batch, dtype, "cpu")
            loss = problem.phi(problem.x.view(a), batch) + problem.psi(problem.x.view(b), psi_batch)
            ga, gb = torch.autograd.grad(loss, (a, b))
            x_phi = x_phi - eta1 * (ga + (x_phi - x) / gamma)
            x_psi = x_psi - eta1 * (gb + (x_psi - x) / gamma)
            x = x - eta0 * (x_psi - x_phi) / gamma
    return (time.perf_counter() - start) / iters


def measure(label, problem, method, fc_method, settings, iters, rounds, seed=3):
    fc_opt, fc_wall, hand = [], [], []
    for _ in range(rounds):
        start = time.perf_counter()
        res = fc.solve(problem, fc_method, iters=iters, seed=seed, progress=False, **settings)
        fc_wall.append((time.perf_counter() - start) / iters)
        fc_opt.append(res.info["optimizer_seconds"] / iters)
        hand.append(floor(problem, method, settings, iters, seed))
    h = statistics.median(hand)
    print(f"\n{label}: {fc_method}, {iters} iterations x {rounds} rounds")
    print(f"  hand-written torch loop   {h * 1e3:8.4f} ms/iteration")
    for kind, times in (("optimizer", fc_opt), ("wall", fc_wall)):
        value = statistics.median(times)
        print(f"  fullcomp ({kind:<9})      {value * 1e3:8.4f} ms/iteration   ratio {value / h:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=300)
    args = parser.parse_args()
    X, y, a = tabular()
    declared = pauc_problem(X, y, a, alpha=0.5)  # the protocol's MLP (64, 32) and 64 + 64 rows per batch
    p = declared.problem
    measure("pAUC-fairness", p, "sgda", "sgda", {"eta_x": 0.1, "eta_y": 0.1}, args.iters, args.rounds)
    sopa_problem = pauc_problem(X, y, a, alpha=0.0).problem
    measure(
        "pAUC (SOPA)", sopa_problem, "sopa", "sopa", {"eta": 0.1, "eta_s": 0.1, "s_key": "u"}, args.iters, args.rounds
    )
    measure(
        "pAUC-fairness", p, "smag-minimax", "smag", {"gamma": 0.5, "eta0": 0.1, "eta1": 0.1}, args.iters, args.rounds
    )
    data = digits()
    pu = pu_problem(pu_split(data, split_seed=0))
    measure("PU (digits)", pu, "sgd", "sgd", {"eta": 0.05}, args.iters, args.rounds)
    measure("PU (digits)", pu, "smag-dc", "smag", {"gamma": 0.5, "eta0": 0.1, "eta1": 0.1}, args.iters, args.rounds)


if __name__ == "__main__":
    main()
