"""Data of the papers' experiments: ratings (HMSFW paper, Section 6), images and tables (SMAG paper, Section 5).

* :func:`movielens` reads MovieLens-100K / MovieLens-1M files (seven age groups, saved 80/10/10 split with seed
  20260927, training-mean centering).
* :func:`synthetic_ratings` makes data with the same structure at any size, without a dense matrix.
* :class:`RatingData` holds either: per-split entries ordered by group, group slices for minibatch sampling.
* :func:`mnist`, :func:`fashion_mnist`, :func:`cifar10`, :func:`fer2013`, :func:`mnist5k`, :func:`digits` and
  :func:`pu_split` / :func:`pu_problem` are the PU-learning data (SMAG paper, Section 5.1).
* :func:`adult`, :func:`german_credit` and :class:`CelebA` are the fairness data (SMAG paper, Section 5.2).
* :func:`huber`, :func:`huber_np`, :func:`group_losses`, :func:`worst_group` and :func:`average_group` are the
  experiments' losses (Huber, delta 1, as a mean over each group's ratings).
"""

from fullcomp.datasets.celeba import CelebA
from fullcomp.datasets.images import ImageData, cifar10, digits, fashion_mnist, fer2013, mnist, mnist5k
from fullcomp.datasets.losses import average_group, group_losses, huber, huber_np, worst_group
from fullcomp.datasets.movielens import movielens
from fullcomp.datasets.pu import PUData, pu_problem, pu_risk, pu_split
from fullcomp.datasets.ratings import AGE_GROUP_NAMES, DEFAULT_SPLIT_SEED, RatingData, RatingSplit, split_assignment
from fullcomp.datasets.synthetic import synthetic_ratings
from fullcomp.datasets.tabular import Split, TabularData, adult, german_credit

__all__ = [
    "AGE_GROUP_NAMES",
    "DEFAULT_SPLIT_SEED",
    "RatingData",
    "RatingSplit",
    "average_group",
    "group_losses",
    "huber",
    "huber_np",
    "movielens",
    "split_assignment",
    "synthetic_ratings",
    "worst_group",
    "CelebA",
    "ImageData",
    "cifar10",
    "digits",
    "fashion_mnist",
    "fer2013",
    "mnist",
    "mnist5k",
    "PUData",
    "pu_problem",
    "pu_risk",
    "pu_split",
    "Split",
    "TabularData",
    "adult",
    "german_credit",
]
