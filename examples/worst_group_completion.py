"""Group-robust matrix completion over a nuclear-norm ball (Section 6 of the HMSFW paper).

Users fall into seven age groups (<18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+).
Group g's loss f_g(X) is the mean Huber loss (delta 1) of X_ij against the
centred rating over the group's training ratings, and we minimize the worst
group (``--objective max``) or the CVaR_0.3 of the seven losses (``--objective
cvar``) over {||X||_* <= tau}.  Each iteration samples a minibatch of ratings
per group.

By default the data are synthetic and MovieLens-like, generated on the spot (no
download): a 60 x 80 low-rank-plus-noise rating matrix, ratings rounded to 1..5,
30% observed, seven groups of unequal sizes in MovieLens-100K's age proportions
(``fc.datasets.synthetic_ratings``).  ``--data DIR`` reads a MovieLens folder
that you downloaded yourself from GroupLens (``u.data`` + ``u.user`` for 100K,
``ratings.dat`` + ``users.dat`` for 1M) with the paper's 80/10/10 split
(``fullcomp_lab.datasets.movielens``, from the lab package of this repository); fullcomp never
ships MovieLens files.

    fullcomp run examples/worst_group_completion.py --seconds 60 --out runs/demo
    fullcomp run examples/worst_group_completion.py --method hmsfw-i --seconds 120 -- --data ~/ml-100k --objective cvar
    python examples/worst_group_completion.py --seconds 30 --out runs/direct   # the same as `fullcomp run`

Script options (after `--`, which follows the `fullcomp run` ones): --data DIR, --objective max|cvar, --alpha A (CVaR
tail, default 0.3), --batch B (ratings per group and step; default 64 synthetic, 1024 MovieLens as in
the paper), --radius-scale S (tau = S sqrt(P Q), default 1.5), --users P --items Q --density D
(synthetic data).

The map is declared on the structured path: ``reads=`` the training entries, so
Jacobians (7 x #train), trackers and LMO directions live on observed ratings,
never on all P Q entries; ``track=`` the test entries, so evaluation reads the
iterate there.  ``fullcomp_lab.completion_problem`` packages the same
declaration for the experiments; this file spells it out.
"""

from __future__ import annotations

import argparse
import sys

import cvxpy as cp
import numpy as np
import torch

import fullcomp as fc

DELTA = 1.0  # Huber threshold, in rating units


def huber(r: torch.Tensor) -> torch.Tensor:
    a = r.abs()
    return torch.where(a <= DELTA, 0.5 * r**2, DELTA * (a - 0.5 * DELTA))


def group_mean_huber(values: torch.Tensor, ratings: torch.Tensor, positions: torch.Tensor, weights: torch.Tensor):
    """(groups,) weighted Huber losses of ``values`` (X at a split's entries) against the split's ratings.

    ``positions`` and ``weights`` are (groups, m): a minibatch (weights 1/m) or a whole split padded
    to its largest group (weights 1/|group|, 0 on padding), so both give group means.
    """
    device = values.device  # the data tensors live on the CPU; the iterate may not
    positions = positions.to(device)
    return (weights.to(device) * huber(values[positions] - ratings.to(device)[positions])).sum(dim=1)


def whole_split(data: fc.datasets.RatingData, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions, weights) covering every rating of ``split`` once: the exact group means."""
    slices = data.group_slices(split)
    width = max(max(s.stop - s.start for s in slices), 1)
    positions = torch.zeros(len(slices), width, dtype=torch.int64)
    weights = torch.zeros(len(slices), width, dtype=torch.float64)
    for g, s in enumerate(slices):
        positions[g, : s.stop - s.start] = torch.arange(s.start, s.stop)
        weights[g, : s.stop - s.start] = 1.0 / max(s.stop - s.start, 1)
    return positions, weights


def minibatch_sampler(data: fc.datasets.RatingData, batch: int):
    """Draw ``batch`` training ratings per group, uniformly with replacement, with the generator given."""
    slices = data.group_slices("train")
    starts = torch.tensor([s.start for s in slices], dtype=torch.int64)
    counts = torch.tensor([s.stop - s.start for s in slices], dtype=torch.float64)
    weights = torch.full((len(slices), batch), 1.0 / batch, dtype=torch.float64)

    def sampler(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        # Training entries are ordered by group, so group g owns positions starts[g] .. starts[g] + counts[g] - 1.
        # Draw on the generator's device (fullcomp's run device), then index on the CPU data.
        draws = torch.rand(len(slices), batch, generator=gen, dtype=torch.float64, device=gen.device).cpu()
        return starts[:, None] + (draws * counts[:, None]).long(), weights

    return sampler


def options(args: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="worst_group_completion.py", description="script options")
    parser.add_argument("--data", help="MovieLens folder (100K or 1M layout); default: synthetic data")
    parser.add_argument("--objective", choices=("max", "cvar"), default="max", help="worst group or CVaR (default max)")
    parser.add_argument("--alpha", type=float, default=0.3, help="CVaR tail fraction (default 0.3)")
    parser.add_argument("--batch", type=int, help="ratings per group per step (default 64 synthetic, 1024 MovieLens)")
    parser.add_argument("--radius-scale", type=float, default=1.5, help="tau = S sqrt(P Q) (default 1.5)")
    parser.add_argument("--users", type=int, default=60, help="synthetic users P (default 60)")
    parser.add_argument("--items", type=int, default=80, help="synthetic items Q (default 80)")
    parser.add_argument("--density", type=float, default=0.3, help="synthetic fraction observed (default 0.3)")
    ns = parser.parse_args(args or [])
    if ns.batch is not None and ns.batch < 1:
        parser.error(f"--batch must be a positive number of ratings per group, got {ns.batch}")
    if not 0 < ns.radius_scale < float("inf"):
        parser.error(f"--radius-scale must be a positive number, got {ns.radius_scale}")
    if not 0 < ns.alpha <= 1:
        parser.error(f"--alpha must lie in (0, 1] (the CVaR tail fraction), got {ns.alpha}")
    if not 0 < ns.density <= 1:
        parser.error(f"--density must lie in (0, 1], got {ns.density}")
    return ns


def load(ns: argparse.Namespace) -> fc.datasets.RatingData:
    if ns.data:
        from fullcomp_lab.datasets import movielens  # the paper's reader; synthetic data need no lab

        return movielens(ns.data)
    n_ratings = max(int(ns.density * ns.users * ns.items), 1)
    return fc.datasets.synthetic_ratings(shape=(ns.users, ns.items), n_ratings=n_ratings, seed=0)


def build(args: list[str] | None = None):
    """The CompositeProblem plus ``evaluate(x)``, which `fullcomp run` records outside optimizer time."""
    ns = options(args)
    data = load(ns)
    P, Q = data.shape
    train_ratings = torch.from_numpy(data.train.ratings)
    test_ratings = torch.from_numpy(data.test.ratings)
    u = fc.inner_value(data.n_groups)
    problem = fc.CompositeProblem(
        outer=cp.max(u) if ns.objective == "max" else fc.cvar(u, ns.alpha),
        # `values` is X at the training entries (reads=), in data.train order.
        inner=lambda values, batch: group_mean_huber(values, train_ratings, *batch),
        domain=fc.NuclearBall((P, Q), radius=ns.radius_scale * np.sqrt(P * Q)),
        sampler=minibatch_sampler(data, ns.batch or (1024 if ns.data else 64)),
        full_batch=whole_split(data, "train"),  # the exact f, for --method hmsfw-exact
        reads=data.flat_index("train"),
        track=data.flat_index("test"),
    )
    train_all, test_all = whole_split(data, "train"), whole_split(data, "test")
    n_train = len(data.train)

    def evaluate(x: torch.Tensor) -> dict[str, float]:
        # On the structured path the iterate holds X at the training entries, then at the test entries.
        with torch.no_grad():
            train = group_mean_huber(x[:n_train], train_ratings, *train_all)
            test = group_mean_huber(x[n_train:], test_ratings, *test_all)
        return {
            "train_objective": problem.outer.value(train.numpy()),
            "train_worst": float(train.max()),
            "test_worst": float(test.max()),
            "test_average": float(test.mean()),  # groups weighted equally, as in the paper
        }

    return problem, evaluate


if __name__ == "__main__":
    from fullcomp.cli import main

    sys.exit(main(["run", __file__, *sys.argv[1:]]))
