"""fullcomp against the floor: a hand-written torch loop of the same update on the same problem, in one process.

Problems (all float64, one torch thread, F declared as F(u) = u so the GLMO is one LMO):

- least squares over an l1 ball, 200 x 500 and 5000 x 20000, deterministic Frank-Wolfe (``hmsfw-exact``,
  gamma_k = 2/(k+2)) and stochastic Frank-Wolfe on minibatches of 32 rows (``scfw``: a fresh gradient each
  step), against loops that draw the same minibatches from the same generator;
- matrix completion 40 x 50 over a nuclear ball with ``reads=`` (the map reads the observed entries only),
  the mean squared error, stochastic Frank-Wolfe on minibatches of 32 ratings.

Two floors per problem: the loop taking its gradient by ``torch.autograd.grad`` (the work fullcomp must do
given a torch map) and, for least squares, by the closed form A^T (A x - b) (what copt does).  fullcomp's
time is optimizer time (``result.info["optimizer_seconds"]``, evaluation and logging excluded) and wall
time of the whole call after its first iteration; the set-up (building the problem, then the run before its
first iteration, the first sample and the objective at x0 included) is printed separately.  It follows
other problems in one process, so a fresh process's one-off costs (lazy imports) are not in it:
benchmarks/first_update.py measures those.  Rounds alternate, and medians are printed, so load on the
shared machine hits every contender alike.  Final iterates are compared with the floor's.

    python benchmarks/overhead.py               # all problems
    python benchmarks/overhead.py --quick       # the small problems only
"""

from __future__ import annotations

import argparse
import statistics
import time

import cvxpy as cp
import numpy as np
import torch

import fullcomp as fc

torch.set_num_threads(1)


_DATA: dict = {}


def least_squares(m: int, d: int, batch: int | None, radius: float = 5.0):
    """(problem, data) for min ||A x - b||^2 / (2 rows) over the l1 ball, rows sampled ``batch`` at a time."""
    A, b = _DATA[(m, d)]

    def inner(x, rows):
        r = (A @ x - b) if rows is None else (A[rows] @ x - b[rows])
        return (0.5 * (r @ r) / r.numel()).reshape(1)

    sampler = None if batch is None else (lambda g: torch.randint(m, (batch,), generator=g))
    u = fc.inner_value(1)
    return fc.CompositeProblem(cp.sum(u), inner, fc.L1Ball(d, radius), sampler=sampler), (A, b, radius)


def l1_lmo(g: torch.Tensor, radius: float) -> torch.Tensor:
    i = int(torch.argmax(g.abs()))
    s = torch.zeros_like(g)
    s[i] = -radius * torch.sign(g[i])
    return s


def ls_floor(data, iters: int, batch: int | None, seed: int, closed_form: bool) -> tuple[float, torch.Tensor]:
    """Hand-written Frank-Wolfe on the least-squares problem; seconds per iteration and the final x."""
    A, b, radius = data
    gen = torch.Generator().manual_seed(seed)
    x = torch.zeros(A.shape[1], dtype=torch.float64)
    start = time.perf_counter()
    for k in range(iters):
        rows = None if batch is None else torch.randint(A.shape[0], (batch,), generator=gen)
        Ak, bk = (A, b) if rows is None else (A[rows], b[rows])
        if closed_form:
            g = Ak.T @ (Ak @ x - bk) / bk.numel()
        else:
            xg = x.detach().requires_grad_(True)
            r = Ak @ xg - bk
            (g,) = torch.autograd.grad(0.5 * (r @ r) / r.numel(), xg)
        x = x + 2.0 / (k + 2) * (l1_lmo(g, radius) - x)
    return (time.perf_counter() - start) / iters, x


def completion(P: int = 40, Q: int = 50, batch: int = 32, radius: float = 10.0):
    rng = np.random.default_rng(0)
    truth = rng.normal(size=(P, 3)) @ rng.normal(size=(3, Q))
    observed = rng.choice(P * Q, size=P * Q // 3, replace=False)
    ratings = torch.as_tensor(truth.reshape(-1)[observed])

    def inner(values, picks):
        err = values[picks] - ratings[picks]
        return (err @ err / picks.numel()).reshape(1)

    u = fc.inner_value(1)
    sampler = lambda g: torch.randint(observed.size, (batch,), generator=g)  # noqa: E731
    problem = fc.CompositeProblem(cp.sum(u), inner, fc.NuclearBall((P, Q), radius), sampler=sampler, reads=observed)
    return problem, (observed, ratings, radius, (P, Q), batch)


def completion_floor(data, iters: int, seed: int) -> tuple[float, torch.Tensor]:
    """Hand-written stochastic Frank-Wolfe on the observed entries, the LMO by a dense SVD of the gradient."""
    observed, ratings, radius, shape, batch = data
    gen = torch.Generator().manual_seed(seed)
    rows, cols = np.divmod(observed, shape[1])
    values = torch.zeros(observed.size, dtype=torch.float64)
    start = time.perf_counter()
    for k in range(iters):
        picks = torch.randint(observed.size, (batch,), generator=gen)
        v = values.detach().requires_grad_(True)
        err = v[picks] - ratings[picks]
        (g,) = torch.autograd.grad(err @ err / picks.numel(), v)
        G = np.zeros(shape)
        np.add.at(G, (rows, cols), g.numpy())
        U, _, Vt = np.linalg.svd(G)
        atom = -radius * U[rows, 0] * Vt[0, cols]
        values = values + 2.0 / (k + 2) * (torch.as_tensor(atom) - values)
    return (time.perf_counter() - start) / iters, values


def fullcomp_run(problem, method: str, iters: int, seed: int) -> tuple[float, float, float, torch.Tensor]:
    """(set-up s before the first iteration, optimizer s per iteration, wall s per iteration after the first
    one, final x at the read entries)."""
    marks = []

    def first(it):  # the callback runs outside optimizer time; its first call comes after the first iteration
        if not marks:
            marks.append(time.perf_counter())

    start = time.perf_counter()
    res = fc.solve(problem, method, iters=iters, seed=seed, progress=False, callback=first, eval_every=iters)
    end = time.perf_counter()
    x = res.x_entries if problem.reads is not None else res.x
    # Row 1's time is the optimizer time of iteration 0, which the callback's mark follows: the rest is set-up
    # (and the objective at k = 0, which every run records).
    setup = marks[0] - start - res.history.rows[1]["time"]
    return setup, res.info["optimizer_seconds"] / iters, (end - marks[0]) / (iters - 1), x


def make_data(m: int, d: int) -> None:
    """Generate the least-squares data once, outside any timing."""
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(m, d, generator=gen, dtype=torch.float64)
    _DATA[(m, d)] = (A, A[:, :10].sum(1) + 0.1 * torch.randn(m, generator=gen, dtype=torch.float64))


def compare(name, build, method, floors, iters, rounds, seed=1):
    t0 = time.perf_counter()
    problem, data = build()
    construct = time.perf_counter() - t0
    times = {"fullcomp (optimizer)": [], "fullcomp (wall)": [], **{label: [] for label in floors}}
    setups, diffs = [], {}
    for _ in range(rounds):
        setup, opt, wall, x = fullcomp_run(problem, method, iters, seed)
        setups.append(setup)
        times["fullcomp (optimizer)"].append(opt)
        times["fullcomp (wall)"].append(wall)
        for label, floor in floors.items():
            per, xf = floor(data, iters, seed)
            times[label].append(per)
            diffs[label] = float((x.reshape(-1) - xf.reshape(-1)).abs().max())
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med[next(iter(floors))]
    print(f"\n{name}  ({method}, {iters} iterations x {rounds} rounds)")
    first = statistics.median(setups) * 1e3
    print(f"  set-up: problem {construct * 1e3:.1f} ms, then {first:.1f} ms before the first iteration")
    for label, value in med.items():
        print(f"  {label:<30} {value * 1e3:9.4f} ms/iteration   ratio to {next(iter(floors))}: {value / base:5.2f}")
    for label, diff in diffs.items():
        print(f"  max |x - x_floor| ({label}): {diff:.2e}")
    return med


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the small problems only")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    def ls_floors(batch):
        return {
            "floor (autograd)": lambda data, it, s: ls_floor(data, it, batch, s, closed_form=False),
            "floor (closed-form gradient)": lambda data, it, s: ls_floor(data, it, batch, s, closed_form=True),
        }

    for shape in ((200, 500), (5000, 200)) + (() if args.quick else ((5000, 20000),)):
        make_data(*shape)
    compare(
        "least squares 200 x 500, deterministic",
        lambda: least_squares(200, 500, None),
        "hmsfw-exact",
        ls_floors(None),
        300,
        args.rounds,
    )
    compare(
        "least squares 5000 x 200, minibatch 32",
        lambda: least_squares(5000, 200, 32),
        "scfw",
        ls_floors(32),
        300,
        args.rounds,
    )
    compare(
        "least squares 200 x 500, minibatch 32",
        lambda: least_squares(200, 500, 32),
        "scfw",
        ls_floors(32),
        300,
        args.rounds,
    )
    compare(
        "completion 40 x 50, reads=, minibatch 32",
        completion,
        "scfw",
        {"floor (autograd, dense SVD)": completion_floor},
        300,
        args.rounds,
    )
    if not args.quick:
        compare(
            "least squares 5000 x 20000, deterministic",
            lambda: least_squares(5000, 20000, None),
            "hmsfw-exact",
            ls_floors(None),
            10,
            3,
        )
        compare(
            "least squares 5000 x 20000, minibatch 32",
            lambda: least_squares(5000, 20000, 32),
            "scfw",
            ls_floors(32),
            300,
            3,
        )


if __name__ == "__main__":
    main()
