"""Measured convergence rates of HMSFW against the exponents the HMSFW paper proves.

Synthetic problems with n = 3 outputs and x in R^8 (an l1 ball of radius 2),
F = max, and oracle noise from :mod:`fullcomp_lab.noise`:

- convex: f_i(x) = softplus(a_i^T x - b_i) (convex f, nondecreasing F, so the
  model minorizes phi: Assumption 6); phi* from CVXPY.  Metric: the
  last-iterate primal error phi(y_K) - phi* of one anytime run (Theorem 2
  schedule), read at every K of the grid.
- non-convex: f_i(x) = softplus(a_i^T x - b_i) + cos(c_i^T x)/2.  Metric: the exact
  generalized Frank-Wolfe gap phi(y) - min_x F(f(y) + J(y)(x - y)) (one exact
  conic GLMO on the noiseless f and J), averaged over 32 evenly spaced
  iterates of a run of horizon K: E[gap(y_R)] for R uniform on 0..K-1, the
  quantity Theorems 1 and 3 bound.  One run per K (the schedules depend on K).

For every method the script prints the least-squares slope of log(mean error
over seeds) against log K with a 95% bootstrap interval over seeds, next to the
exponent the theory gives, and saves a log-log plot.

    python benchmarks/rates.py --quick --jobs 2           # about 1.5 minutes on 2 cores, into runs/rates/
    python benchmarks/rates.py --jobs 2 --update-docs     # docs/theory-checks.{png,json}, about 15 minutes
    python benchmarks/rates.py --replot docs/theory-checks.json           # table and plot again, no runs

The plot and the raw errors go to --out (default runs/rates/); only --update-docs rewrites the committed
docs/theory-checks.png and docs/theory-checks.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cvxpy as cp
import numpy as np
import torch

import fullcomp as fc
from fullcomp_lab import noise

N, D, RADIUS = 3, 8, 2.0
_rng = np.random.default_rng(2024)
A_NP = _rng.standard_normal((N, D))
B_NP = 0.5 * _rng.standard_normal(N)
C_NP = _rng.standard_normal((N, D))
A, B, C = torch.tensor(A_NP), torch.tensor(B_NP), torch.tensor(C_NP)


def softplus_map(x: torch.Tensor, batch: Any = None) -> torch.Tensor:
    return torch.nn.functional.softplus(A @ x - B)


def wavy_map(x: torch.Tensor, batch: Any = None) -> torch.Tensor:
    """softplus(a_i^T x - b_i) + cos(c_i^T x) / 2: indefinite Hessians, so phi = max_i f_i is not convex."""
    return torch.nn.functional.softplus(A @ x - B) + 0.5 * torch.cos(C @ x)


def make_problem(f: Callable, value_noise: Any, jacobian_noise: Any) -> fc.CompositeProblem:
    inner, sampler = noise.with_noise(f, None, n=N, d=D, value_noise=value_noise, jacobian_noise=jacobian_noise)
    return fc.CompositeProblem(
        cp.max(fc.inner_value(N)), inner, fc.L1Ball(D, RADIUS), sampler=sampler, full_batch=noise.noiseless()
    )


def convex_optimum() -> float:
    x = cp.Variable(D)
    prob = cp.Problem(cp.Minimize(cp.max(cp.logistic(A_NP @ x - B_NP))), [cp.norm1(x) <= RADIUS])
    prob.solve(solver="CLARABEL")
    return float(prob.value)


class ExactGap:
    """The generalized FW gap phi(y) - min_x F(f(y) + J(y)(x - y)) with the exact f, J and a conic GLMO."""

    def __init__(self, problem: fc.CompositeProblem, f: Callable):
        self.problem, self.f = problem, f
        self.glmo = fc.build_glmo(problem.outer, problem.domain, route="conic")

    def __call__(self, y: torch.Tensor) -> float:
        y = y.detach().reshape(-1).to(torch.float64)
        z = self.f(y).numpy()
        V = torch.func.jacrev(self.f)(y).numpy()
        res = self.glmo.solve(z, V, y.numpy())
        return float(self.problem.outer.value(z) - res.value)


# ------------------------------------------------------------------ the measured configurations

GAUSS = noise.Gaussian
HEAVY = noise.StudentT.of_order(1.5, scale=0.2, margin=0.1)  # df = 1.6: E|e|^1.5 < inf, infinite variance


@dataclass
class Case:
    """One curve: a problem, a method, the exponent the theory gives, and how the error is read."""

    group: str
    label: str
    target: float | None
    kind: str  # "anytime": one run, primal error read at each K; "horizon": one run per K, mean gap
    problem: Callable[[], tuple[fc.CompositeProblem, Callable]]
    options: Callable[[int], dict] = field(default=lambda K: {})
    scfw: bool = False


def convex_case() -> tuple[fc.CompositeProblem, Callable]:
    problem = make_problem(softplus_map, GAUSS(0.5), GAUSS(0.5))
    best = convex_optimum()
    return problem, lambda y: problem.objective(y) - best


def nonconvex_case(value_noise: Any, jacobian_noise: Any) -> Callable[[], tuple[fc.CompositeProblem, Callable]]:
    def build() -> tuple[fc.CompositeProblem, Callable]:
        problem = make_problem(wavy_map, value_noise, jacobian_noise)
        return problem, ExactGap(problem, wavy_map)

    return build


FINITE = nonconvex_case(GAUSS(0.5), GAUSS(0.5))
TAIL_F = nonconvex_case(HEAVY, GAUSS(0.2))  # r_f = 3/2, r_g = 2
TAIL_FG = nonconvex_case(HEAVY, noise.StudentT.of_order(1.5, scale=0.1))  # r_f = r_g = 3/2

CASES: dict[str, Case] = {
    c.label: c
    for c in [
        Case("convex", "convex: HMSFW II, Theorem 2", -1 / 3, "anytime", convex_case,
             lambda K: {"schedule": "theorem2"}),
        Case("convex", "convex: Vanilla SCFW", None, "anytime", convex_case, scfw=True),
        Case("non-convex", "non-convex: HMSFW II, Theorem 1", -1 / 4, "horizon", FINITE,
             lambda K: {"schedule": "theorem1"}),
        Case("non-convex", "non-convex: HMSFW II + STORM, Theorem 3", -1 / 3, "horizon", FINITE,
             lambda K: {"schedule": "theorem3", "tracker": "storm"}),
        Case("non-convex", "non-convex: HMSFW II + Hessian, Theorem 3", -1 / 3, "horizon", FINITE,
             lambda K: {"schedule": "theorem3", "tracker": "hessian"}),
        Case("non-convex", "non-convex: Vanilla SCFW", None, "horizon", FINITE, scfw=True),
        Case("heavy r_f=3/2, r_g=2", "r_f=3/2, r_g=2: HMSFW II, Theorem 1", -1 / 4, "horizon", TAIL_F,
             lambda K: {"schedule": "theorem1", "r_f": 1.5, "r_g": 2.0}),
        Case("heavy r_f=3/2, r_g=2", "r_f=3/2, r_g=2: HMSFW I, Theorem 1", -1 / 5, "horizon", TAIL_F,
             lambda K: {"schedule": "theorem1", "r_f": 1.5, "r_g": 2.0, "variant": "polyak"}),
        Case("heavy r_f=3/2, r_g=2", "r_f=3/2, r_g=2: HMSFW I, Variant II's schedule", None, "horizon", TAIL_F,
             lambda K: {"schedule": fc.Schedule.theorem1(K, r_f=1.5, r_g=2.0), "variant": "polyak"}),
        Case("heavy r_f=3/2, r_g=2", "r_f=3/2, r_g=2: Vanilla SCFW", None, "horizon", TAIL_F, scfw=True),
        Case("heavy r_f=r_g=3/2", "r_f=r_g=3/2: HMSFW II, Theorem 1", -1 / 5, "horizon", TAIL_FG,
             lambda K: {"schedule": "theorem1", "r_f": 1.5, "r_g": 1.5}),
        Case("heavy r_f=r_g=3/2", "r_f=r_g=3/2: HMSFW I, Theorem 1", -1 / 5, "horizon", TAIL_FG,
             lambda K: {"schedule": "theorem1", "r_f": 1.5, "r_g": 1.5, "variant": "polyak"}),
    ]
}  # fmt: skip


def evaluation_points(K: int, count: int = 32) -> list[int]:
    """Midpoints of ``count`` equal blocks of 0..K-1: the average over them estimates E[gap(y_R)], R uniform."""
    m = min(K, count)
    return sorted({int((j + 0.5) * K / m) for j in range(m)})


def run_one(label: str, seed: int, Ks: tuple[int, ...]) -> tuple[str, int, dict[int, float], float]:
    """The error of one case and seed at each K (one anytime run, or one run per K)."""
    torch.set_num_threads(1)
    case = CASES[label]
    problem, metric = case.problem()
    solver = fc.scfw if case.scfw else fc.hmsfw
    started = time.perf_counter()
    errors: dict[int, float] = {}
    if case.kind == "anytime":
        wanted = set(Ks)

        def read(it: Any) -> None:
            if it.k in wanted:
                errors[it.k] = metric(it.x)

        solver(problem, iters=max(Ks), seed=seed, glmo="conic", callback=read, progress=False, **case.options(max(Ks)))
    else:
        for K in Ks:
            points, gaps = set(evaluation_points(K)), []

            def read(it: Any, points: set = points, gaps: list = gaps) -> None:
                if it.k in points:
                    gaps.append(metric(it.x))

            solver(problem, iters=K, seed=seed, glmo="conic", callback=read, progress=False, **case.options(K))
            errors[K] = float(np.mean(gaps))
    return label, seed, errors, time.perf_counter() - started


def fit_slope(Ks: np.ndarray, errors: np.ndarray, boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Least-squares slope of log(mean over seeds) on log K; 95% percentile bootstrap over seeds."""
    x = np.log(Ks)

    def slope(E: np.ndarray) -> float:
        return float(np.polyfit(x, np.log(E.mean(axis=0)), 1)[0])

    rng = np.random.default_rng(seed)
    draws = [slope(errors[rng.integers(0, len(errors), len(errors))]) for _ in range(boot)]
    low, high = np.percentile(draws, [2.5, 97.5])
    return slope(errors), float(low), float(high)


def plot(results: dict[str, np.ndarray], grids: dict[str, np.ndarray], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys(CASES[label].group for label in results))
    cols = min(2, len(groups))
    rows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.0 * cols, 4.2 * rows), squeeze=False)
    for ax in axes.flat[len(groups) :]:
        ax.set_visible(False)
    for ax, group in zip(axes.flat, groups):
        for label, E in results.items():
            case = CASES[label]
            if case.group != group:
                continue
            Ks = grids[label]
            mean = E.mean(axis=0)
            sd = E.std(axis=0, ddof=1) / math.sqrt(len(E)) if len(E) > 1 else 0 * mean
            s, _, _ = fit_slope(Ks, E, boot=1)
            line = ax.errorbar(
                Ks, mean, yerr=sd, marker="o", ms=3, capsize=2, label=f"{label.split(': ')[1]} ({s:+.2f})"
            )
            if case.target is not None:  # the theory's exponent, anchored at the first point
                ax.plot(Ks, mean[0] * (Ks / Ks[0]) ** case.target, ls="--", lw=0.8, color=line[0].get_color())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("K")
        ax.set_title(group, fontsize=10)
        ax.set_ylabel("last-iterate primal error" if group == "convex" else "mean generalized FW gap")
        ax.legend(fontsize=7)
    fig.suptitle("HMSFW measured rates (dashed: the theorem's exponent; fitted slope in parentheses)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def report(results: dict[str, dict], plot_path: Path | None) -> None:
    """Print the fitted slopes (and per-K means) and draw the plot; ``results[label]`` holds Ks, errors, seconds."""
    print(f"\n{'configuration':52s} {'theory':>7s} {'slope':>7s}  {'95% CI':>17s}  {'err at K_min':>12s} "
          f"{'err at K_max':>12s} {'cpu s':>6s}")  # fmt: skip
    for label, r in results.items():
        Ks, E = np.array(r["Ks"], dtype=float), np.array(r["errors"])
        s, low, high = fit_slope(Ks, E)
        target = CASES[label].target
        theory = "-" if target is None else f"{target:+.3f}"
        mean = E.mean(axis=0)
        print(f"{label:52s} {theory:>7s} {s:+7.3f}  [{low:+.3f}, {high:+.3f}]  {mean[0]:12.4e} {mean[-1]:12.4e} "
              f"{r['seconds']:6.0f}")  # fmt: skip
    if plot_path is not None:
        plot_path.parent.mkdir(parents=True, exist_ok=True)
        plot(
            {label: np.array(r["errors"]) for label, r in results.items()},
            {label: np.array(r["Ks"], dtype=float) for label, r in results.items()},
            plot_path,
        )
        print(f"\nplot: {plot_path}")


def options(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the plot and JSON paths resolved: under --out, or the docs' with --update-docs."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="K up to 256, 3 seeds, no Hessian tracker")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per configuration (default 6, quick 3)")
    parser.add_argument("--kmin", type=int, default=None, help="smallest K, a power of 2 (default 32)")
    parser.add_argument("--kmax", type=int, default=None, help="largest K, a power of 2 (default 1024, quick 256)")
    parser.add_argument(
        "--anytime-factor", type=int, default=4, help="the anytime (convex) runs go to this times --kmax (default 4)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--only", default=None, help="run only the cases whose label contains this text")
    parser.add_argument("--out", type=Path, default=Path("runs/rates"), help="output folder (default runs/rates)")
    parser.add_argument("--plot", type=Path, default=None, help="where to save the plot (default OUT/rates.png)")
    parser.add_argument("--json", type=Path, default=None, help="where to save the raw errors (default OUT/rates.json)")
    parser.add_argument(
        "--update-docs", action="store_true", help="write docs/theory-checks.png and .json (the committed figure)"
    )
    parser.add_argument("--replot", type=Path, default=None, help="print and plot a saved JSON file; run nothing")
    args = parser.parse_args(argv)
    docs = Path(__file__).resolve().parents[1] / "docs"
    if args.update_docs:
        args.plot, args.json = docs / "theory-checks.png", docs / "theory-checks.json"
    args.plot = args.plot or args.out / "rates.png"
    args.json = args.json or args.out / "rates.json"
    return args


def main() -> None:
    args = options()
    for path in (args.plot, args.json):
        path.parent.mkdir(parents=True, exist_ok=True)
    if args.replot is not None:
        report(json.loads(args.replot.read_text()), args.plot)
        return
    seeds = args.seeds or (3 if args.quick else 6)
    kmin, kmax = args.kmin or 32, args.kmax or (256 if args.quick else 1024)
    Ks = tuple(2**j for j in range(int(math.log2(kmin)), int(math.log2(kmax)) + 1))
    # One anytime run reads every K, so the convex curves cost less per point and reach further.
    Ks_any = tuple(2**j for j in range(int(math.log2(kmin)), int(math.log2(kmax * args.anytime_factor)) + 1))
    grid = {label: Ks_any if CASES[label].kind == "anytime" else Ks for label in CASES}
    labels = [
        label
        for label in CASES
        if (args.only is None or args.only in label) and not (args.quick and "Hessian" in label)
    ]
    print(
        f"K = {list(Ks)} (anytime runs to {Ks_any[-1]}), {seeds} seeds, {len(labels)} configurations, {args.jobs} jobs"
    )
    started = time.perf_counter()
    tasks = [(label, seed, grid[label]) for label in labels for seed in range(seeds)]
    errors: dict[str, dict[int, dict[int, float]]] = {label: {} for label in labels}
    seconds: dict[str, float] = dict.fromkeys(labels, 0.0)
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            done = pool.map(run_one, *zip(*tasks))
            for label, seed, errs, took in done:
                errors[label][seed], seconds[label] = errs, seconds[label] + took
    else:
        for task in tasks:
            label, seed, errs, took = run_one(*task)
            errors[label][seed], seconds[label] = errs, seconds[label] + took
    results = {
        label: {
            "Ks": list(grid[label]),
            "errors": [[errors[label][s][K] for K in grid[label]] for s in range(seeds)],
            "seconds": seconds[label],
        }
        for label in labels
    }
    args.json.write_text(json.dumps(results, indent=1))
    report(results, args.plot)
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
