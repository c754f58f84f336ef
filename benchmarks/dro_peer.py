"""fullcomp's oce route against the `dro` package (namkoong-lab, PyPI dro 0.4.3) on robust logistic regression.

Run:  python benchmarks/dro_peer.py [--sizes 1000,10000,100000,1000000] [--risks cvar,chi2,kl] [--quick]
(--quick: n = 1,000 only, each fullcomp run timed in this process, without its peak memory.)

For each size n and risk: synthetic logistic data (seeded, d = 20 features and an intercept); `dro` fits the
risk by one CVXPY program over all n rows (CVaRDRO alpha = 0.1, Chi2DRO eps = 1, KLDRO eps = 0.1, logistic
model, its default solver Clarabel, SCS where Clarabel fails); fullcomp's exact objective at dro's solution
is checked to equal dro's reported objective; then fullcomp solves the same risk (fc.cvar(u, 0.1),
fc.chi2_dro(u, 0.5) — kappa = eps / 2 —, fc.kl_dro(u, 0.1)) of fc.PerSample logistic losses in an l2 ball of
twice the norm of dro's solution with `fc.solve(problem)` (the oce route), and the table prints the time to
reach dro's objective + 1e-3 relative (measured by fullcomp's exact objective over every row), the ratio to
dro's time, fullcomp's peak memory, and the lines of user code on each side.

`dro` is not run at n >= 100,000 (its one program takes over 5 minutes there): the target is then a
reference optimum + 1e-3 relative, the best exact objective of a long fullcomp run (80 steps, the last ones on
every row, in a ball of radius 1,000; its Frank-Wolfe gap is printed: it certifies the chi2 and KL optima,
while CVaR's nonsmooth gap is loose), computed once per case.

Each fullcomp timing is measured in a subprocess of its own (so that its peak resident memory is its own),
as the wall time of building the problem and running `fc.solve` for the number of steps that a first,
instrumented run (an exact evaluation after every step) needed to reach the target; both runs use the same
seed, so they take the same steps.  Installs nothing: without `dro`, only the fullcomp side runs, against the
reference optimum.  Machine of the table in docs/performance.md: 2 shared CPU cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import math
import resource
import subprocess
import sys
import time
import types

import numpy as np
import torch

import fullcomp as fc

D = 20
REFERENCE_STEPS = 80
RISKS = {"cvar": ("CVaRDRO", {"alpha": 0.1}), "chi2": ("Chi2DRO", {"eps": 1.0}), "kl": ("KLDRO", {"eps": 0.1})}


def logistic_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n rows of 20 Gaussian features, labels from a logistic model with a few flipped (non-separable)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    w = rng.standard_normal(D)
    y = np.sign(X @ w + 0.5) * np.where(rng.random(n) < 0.005, -1.0, 1.0)
    return X, y


# ---- the user code on each side ------------------------------------------------------------------------


def fit_dro(risk, X, y, solver="CLARABEL"):
    import dro.linear_model as dl

    name, params = RISKS[risk]
    model = getattr(dl, name)(input_dim=X.shape[1], model_type="logistic", solver=solver)
    model.update(params)
    model.fit(X, y)
    return np.append(np.asarray(model.theta, dtype=float).reshape(-1), float(model.b)), model.robust_obj


def fullcomp_problem(risk, X, y, radius):
    A = torch.from_numpy(np.hstack([X, np.ones((len(y), 1))]))
    labels = torch.from_numpy(y)

    def loss(x, rows):
        a, b = rows
        return torch.nn.functional.softplus(-b * (a @ x))

    u = fc.inner_value(len(y))
    F = {"cvar": fc.cvar(u, 0.1), "chi2": fc.chi2_dro(u, 0.5), "kl": fc.kl_dro(u, 0.1)}[risk]
    return fc.CompositeProblem(F, fc.PerSample(loss, (A, labels)), fc.L2Ball(A.shape[1], radius))


# ---- measurement ---------------------------------------------------------------------------------------


def load_dro() -> bool:
    """Import dro's linear models without its package __init__, whose neural and tree models import
    torchvision and xgboost (not needed here, and torchvision may not match the installed torch)."""
    if "dro.linear_model" in sys.modules:
        return True
    spec = importlib.util.find_spec("dro")
    if spec is None:
        return False
    package = types.ModuleType("dro")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["dro"] = package
    import dro.linear_model  # noqa: F401

    return True


def run_dro(risk: str, X: np.ndarray, y: np.ndarray) -> dict:
    """dro's fit: its time, solution and objective, with the solver that solved it."""
    import cvxpy as cp

    for solver in ("CLARABEL", "SCS"):
        start = time.perf_counter()
        try:
            x, objective = fit_dro(risk, X, y, solver)
        except Exception as exc:  # noqa: BLE001 - dro raises its own error classes, or CVXPY's
            failed = f"{solver}: {type(exc).__name__}"
            continue
        if objective is not None and np.all(np.isfinite(x)):
            seconds = time.perf_counter() - start
            return {"seconds": seconds, "x": x, "objective": objective, "solver": solver}
        failed = f"{solver}: {cp.__name__} gave no solution"
    raise RuntimeError(f"dro could not fit {risk} ({failed})")


def exact_objective(risk: str, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> float:
    problem = fullcomp_problem(risk, X, y, radius=2.0 * float(np.linalg.norm(x)) + 1.0)
    return problem.objective(x)


def instrumented(risk: str, n: int, radius: float, target: float, iters: int, X=None, y=None) -> dict:
    """Steps until the exact objective (evaluated after every step) reaches ``target``: the step count."""
    if X is None:
        X, y = logistic_data(n)
    found = {}

    def stop(it):
        if it.row.get("objective", math.inf) <= target:
            found.setdefault("k", it.k)
            return False
        return None

    problem = fullcomp_problem(risk, X, y, radius)
    result = fc.solve(problem, iters=iters, seconds=300, eval_every=1, callback=stop, progress=False)
    best = min(r["objective"] for r in result.history.rows if "objective" in r)
    return {"k": found.get("k"), "best": best}


def peak_mib() -> float:
    """This process's peak resident memory: VmHWM, which starts afresh at exec (getrusage's ru_maxrss keeps
    the high-water mark of the parent at fork, which here holds the data and the reference run)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def timed(risk: str, n: int, radius: float, k: int) -> dict:
    """The wall time of building the problem and taking k steps (the run of the table), in this process."""
    torch.set_num_threads(1)
    X, y = logistic_data(n)
    start = time.perf_counter()
    result = fc.solve(fullcomp_problem(risk, X, y, radius), iters=k, progress=False)
    seconds = time.perf_counter() - start
    peak = peak_mib()
    return {"seconds": seconds, "objective": result.history.rows[-1]["objective"], "peak_mib": peak}


def reference(risk: str, n: int, X=None, y=None) -> dict:
    """A long fullcomp run in a ball of radius 1,000: its best exact objective, its last Frank-Wolfe gap, and a
    certified lower bound on the optimum over the ball of twice its norm (the domain the table's runs take)."""
    if X is None:
        X, y = logistic_data(n)
    problem = fullcomp_problem(risk, X, y, 1000.0)
    result = fc.solve(problem, "oce", iters=REFERENCE_STEPS, eval_every=10, gap_tol=1e-9, progress=False)
    rows = [r for r in result.history.rows if "objective" in r]
    best = min(rows, key=lambda r: r["objective"])
    x = result.x.detach().cpu().double().numpy()
    return {
        "objective": best["objective"],
        "fw_gap": rows[-1]["fw_gap"],
        "lower": lower_bound(risk, X, y, x, 2.0 * float(np.linalg.norm(x))),
        "norm": float(result.x.norm()),
    }


def lower_bound(risk: str, X: np.ndarray, y: np.ndarray, x: np.ndarray, radius: float, cuts: int = 40) -> float:
    """A certified lower bound on min over the ball of F(l(x)): F o l is convex (F convex and nondecreasing,
    the logistic losses convex), so it lies above its cutting-plane model built from its values and
    subgradients J^T q at x and at points around x (scales 1 to 1e-6 of |x|); the model's minimum over
    the ball, a small second-order cone program in 21 variables, is below the optimum."""
    import cvxpy as cp
    from scipy.special import expit

    A = np.hstack([X, np.ones((len(y), 1))])
    F = fullcomp_problem(risk, X, y, radius).outer.expr
    rng = np.random.default_rng(1)
    scale = max(float(np.linalg.norm(x)), 1.0) / np.sqrt(x.size)
    points = [x] + [x + s * scale * rng.standard_normal(x.size) for s in np.logspace(0, -6, cuts - 1)]
    P = np.array(points)
    values, G = np.empty(len(points)), np.empty_like(P)
    for i, p in enumerate(points):
        margins = y * (A @ p)
        losses = np.logaddexp(0.0, -margins)
        q = fc.risk_weights(F, losses)
        values[i] = q @ losses  # these risks' sup forms have no penalty: q attains F
        G[i] = A.T @ (q * -y * expit(-margins))
    s, t = cp.Variable(x.size), cp.Variable()
    model = [t >= values + G @ s - np.einsum("ij,ij->i", G, P), cp.norm(s, 2) <= radius]
    return float(cp.Problem(cp.Minimize(t), model).solve(solver=cp.CLARABEL))


def in_subprocess(command: str, **args) -> dict:
    """Run this script's ``command`` in a fresh process (its own peak memory), and read its JSON answer."""
    out = subprocess.run(
        [sys.executable, __file__, "--case", json.dumps({"command": command, **args})],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def user_lines(fn) -> int:
    """Lines of a function's body that are code (no blank lines, comments or its def line)."""
    lines = inspect.getsource(fn).splitlines()[1:]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


# ---- the table -----------------------------------------------------------------------------------------


def case(risk: str, n: int, have_dro: bool, quick: bool = False) -> dict:
    X, y = logistic_data(n)
    row = {"n": n, "risk": risk}
    if have_dro and n < 100_000:
        peer = run_dro(risk, X, y)
        row.update(dro_s=peer["seconds"], solver=peer["solver"], target_from="dro")
        row["check"] = exact_objective(risk, X, y, peer["x"]) / peer["objective"] - 1.0
        best, radius = peer["objective"], 2.0 * float(np.linalg.norm(peer["x"]))
    else:
        ref = reference(risk, n, X, y)
        row.update(target_from="reference", ref_gap=(ref["objective"] - ref["lower"]) / abs(ref["objective"]))
        best, radius = ref["objective"], 2.0 * ref["norm"]
    target = best + 1e-3 * abs(best)
    found = instrumented(risk, n, radius, target, 300, X, y)
    row["target"], row["best"] = target, found["best"]
    if found["k"] is None:
        row["fc_s"] = math.inf
        return row
    if quick:  # in this process: no interpreter start-ups, and no peak memory of its own
        run = {**timed(risk, n, radius, found["k"]), "peak_mib": float("nan")}
    else:
        run = in_subprocess("timed", risk=risk, n=n, radius=radius, k=found["k"])
    row.update(fc_s=run["seconds"], steps=found["k"], peak_mib=run["peak_mib"], reached=run["objective"])
    return row


def show(row: dict) -> str:
    ratio = f"{row['fc_s'] / row['dro_s']:.3f}" if "dro_s" in row else "-"
    dro_s = f"{row['dro_s']:.2f} ({row['solver']})" if "dro_s" in row else "not run"
    check = f"{row['check']:+.1e}" if "check" in row else f"cert {row['ref_gap']:.1e}"
    return (
        f"{row['n']:>9,} {row['risk']:<5} {dro_s:>17} {row['fc_s']:>8.3f} {ratio:>7} {row.get('steps', '-'):>5} "
        f"{row.get('peak_mib', float('nan')):>8.0f} {row['target_from']:>9} {check:>13}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--risks", default="cvar,chi2,kl")
    parser.add_argument(
        "--quick", action="store_true", help="n = 1,000 only, timed in this process (no peak memory; under a minute)"
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.case:
        spec = json.loads(args.case)
        command = {"instrumented": instrumented, "timed": timed, "reference": reference}[spec.pop("command")]
        print(json.dumps(command(**spec)))
        return
    sizes = [1000] if args.quick else [int(s) for s in args.sizes.split(",")]
    risks = args.risks.split(",")
    have_dro = load_dro()
    print(f"dro: {'present' if have_dro else 'absent (fullcomp against the reference optimum only)'}")
    print(f"user code lines: dro {user_lines(fit_dro)}, fullcomp {user_lines(fullcomp_problem) + 1} (with fc.solve)")
    print(
        f"{'n':>9} {'risk':<5} {'dro s (solver)':>17} {'fc s':>8} {'fc/dro':>7} {'steps':>5} {'peak MiB':>8} "
        f"{'target':>9} {'check':>13}"
    )
    for n in sizes:
        for risk in risks:
            print(show(case(risk, n, have_dro, args.quick)), flush=True)
    print(
        "check: fullcomp's exact objective at dro's solution / dro's objective - 1; cert: the reference "
        "optimum's certified relative gap (its value less a cutting-plane lower bound, over its value); "
        "fc s: build + fc.solve to the target (dro's objective, or the reference, + 1e-3 relative)"
    )


if __name__ == "__main__":
    main()
