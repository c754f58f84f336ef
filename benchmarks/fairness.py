"""Logistic regression on UCI Adult under a demographic-parity gap <= 0.05 (sensitive feature: sex).

Contenders, on the same random train/test split per seed (the rows of adult.data and adult.test pooled,
2/3 train and 1/3 test, the first ``--rows`` of the training part kept, features encoded by
``fullcomp_lab.datasets.tabular.adult``):

* ``sklearn LR``: ``LogisticRegression(max_iter=1000)``, no constraint;
* ``fairlearn EG``: ``ExponentiatedGradient(LogisticRegression(max_iter=1000),
  DemographicParity(difference_bound=0.05))``, a randomized classifier constrained on its hard
  predictions' positive rates (its loss and soft gap are those of its mixture's probabilities);
* ``fullcomp``: ``fc.hmsfw(exact=True)`` on u = (mean logistic loss, mean predicted probability of men,
  mean predicted probability of women), F = u[0], the constraint ``cp.abs(u[1] - u[2]) <= 0.05`` on the
  mean predicted probability (not on the hard predictions' rates), weights and bias in an l2 ball of radius
  ``--radius``; and ``fullcomp, no constraint``, the same run without it.

Reported per contender: the training loss (mean logistic loss), the test accuracy, the test DP gap of the
hard predictions (threshold 0.5; fairlearn's own randomized ``predict``) and of the mean probability, the
training gap of the mean probability, and the fit's wall-clock and CPU seconds (the CPU time is the fairer
measure on a shared machine: every contender runs on one thread); mean and standard deviation over the seeds.

    python benchmarks/fairness.py --data ../shared/data/adult           # 3 seeds of 8,000 training rows
    python benchmarks/fairness.py --data ../shared/data/adult --quick   # 2 seeds of 4,000 rows, 300 iterations

The default data path is ``shared/data/adult`` beside the repository.  Every library runs on one thread.
Nothing is written to disk.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import cvxpy as cp
import numpy as np
import torch
from threadpoolctl import threadpool_limits

import fullcomp as fc

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "adult"
BOUND = 0.05


def split(path: Path, seed: int, rows: int | None) -> tuple[tuple, tuple]:
    """(X, y, a) for training and test: Adult's rows pooled and split 2:1 at random by ``seed``."""
    from fullcomp_lab.datasets.tabular import adult

    data = adult(path)
    X = np.concatenate([s.X for s in data.splits().values()]).astype(np.float64)
    y = np.concatenate([s.y for s in data.splits().values()])
    a = np.concatenate([s.a for s in data.splits().values()])
    X = np.hstack([X, np.ones((len(y), 1))])  # the bias as a last feature
    order = np.random.default_rng(seed).permutation(len(y))
    cut = 2 * len(y) // 3
    train, test = order[:cut], order[cut:]
    if rows is not None:
        train = train[:rows]
    return (X[train], y[train], a[train]), (X[test], y[test], a[test])


def gap(values: np.ndarray, a: np.ndarray) -> float:
    """|mean over a = 1 - mean over a = 0|: the DP gap of hard predictions or of probabilities."""
    return float(abs(values[a == 1].mean() - values[a == 0].mean()))


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def scores(model: str, fitted: object, X: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(probability of the positive class, hard prediction) of a fitted contender."""
    if model == "fairlearn EG":  # the mixture of its logistic regressions, by their weights
        members = zip(fitted.weights_, fitted.predictors_)
        p = sum(weight * member.predict_proba(X[:, :-1])[:, 1] for weight, member in members)
        return p, np.asarray(fitted.predict(X[:, :-1], random_state=seed))
    if model.startswith("fullcomp"):
        p = 1 / (1 + np.exp(-(X @ fitted)))
        return p, (p > 0.5).astype(int)
    p = fitted.predict_proba(X[:, :-1])[:, 1]
    return p, (p > 0.5).astype(int)


def fit_fullcomp(train: tuple, iters: int, radius: float, constrained: bool) -> np.ndarray:
    X, y, a = (torch.tensor(v) for v in train)
    men, women, sign = a == 1, a == 0, 2.0 * y.double() - 1

    def inner(w: torch.Tensor, batch: object) -> torch.Tensor:
        s = X @ w
        p = torch.sigmoid(s)
        return torch.stack([torch.nn.functional.softplus(-sign * s).mean(), p[men].mean(), p[women].mean()])

    u = fc.inner_value(3)
    keep = {"dp gap": cp.abs(u[1] - u[2]) <= BOUND} if constrained else None
    problem = fc.CompositeProblem(u[0], inner, fc.L2Ball(X.shape[1], radius), constraints=keep)
    result = fc.hmsfw(problem, exact=True, iters=iters, seed=0, progress=False, eval_every=max(iters // 4, 1))
    return np.asarray(result.x, dtype=np.float64)


def fit(model: str, train: tuple, seed: int, args: argparse.Namespace) -> object:
    from fairlearn.reductions import DemographicParity, ExponentiatedGradient
    from sklearn.linear_model import LogisticRegression

    X, y, a = train
    if model == "sklearn LR":
        return LogisticRegression(max_iter=1000).fit(X[:, :-1], y)
    if model == "fairlearn EG":
        eg = ExponentiatedGradient(LogisticRegression(max_iter=1000), DemographicParity(difference_bound=BOUND))
        return eg.fit(X[:, :-1], y, sensitive_features=a)
    return fit_fullcomp(train, args.iters, args.radius, constrained=model == "fullcomp")


MODELS = ("sklearn LR", "fairlearn EG", "fullcomp, no constraint", "fullcomp")


def measure(model: str, train: tuple, test: tuple, seed: int, args: argparse.Namespace) -> dict:
    start, cpu = time.perf_counter(), time.process_time()
    fitted = fit(model, train, seed, args)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    p_train, _ = scores(model, fitted, train[0], seed)
    p_test, hard = scores(model, fitted, test[0], seed)
    return {
        "train loss": log_loss(p_train, train[1]),
        "test accuracy": float(np.mean(hard == test[1])),
        "test DP gap (hard)": gap(hard, test[2]),
        "test DP gap (mean prob.)": gap(p_test, test[2]),
        "train DP gap (mean prob.)": gap(p_train, train[2]),
        "fit seconds": seconds,
        "fit CPU seconds": cpu,
    }


def table(rows: dict[str, list[dict]]) -> str:
    keys = list(next(iter(rows.values()))[0])
    lines = ["| model | " + " | ".join(keys) + " |", "| --- |" + " ---: |" * len(keys)]
    for model, runs in rows.items():
        cells = []
        for k in keys:
            values = [r[k] for r in runs]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            digits = 1 if "seconds" in k else 4
            cells.append(f"{statistics.mean(values):.{digits}f} ± {spread:.{digits}f}")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with adult.data and adult.test")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=400, help="HMSFW iterations")
    parser.add_argument("--radius", type=float, default=8.0, help="l2 radius of the weights and bias")
    parser.add_argument("--rows", type=int, default=8000, help="training rows kept (0: all 32,561)")
    parser.add_argument("--quick", action="store_true", help="2 seeds, 4,000 training rows, 300 iterations")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.rows, args.iters = 2, 4000, 300
    args.rows = args.rows or None
    torch.set_num_threads(1)
    with threadpool_limits(1):  # numpy's and sklearn's BLAS on one thread too, as torch
        rows = run(args)
    print(
        f"UCI Adult, sex, DP gap <= {BOUND}: {args.seeds} seeds, {args.rows or 'all'} training rows "
        f"(of 2/3 of the pooled rows), the other 1/3 as test rows; HMSFW {args.iters} iterations, radius {args.radius}"
    )
    print(table(rows))


def run(args: argparse.Namespace) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {m: [] for m in MODELS}
    for seed in range(args.seeds):
        train, test = split(args.data, seed, args.rows)
        for model in MODELS:
            rows[model].append(measure(model, train, test, seed, args))
            print(f"seed {seed}, {model}: {rows[model][-1]}", flush=True)
    return rows


if __name__ == "__main__":
    main()
