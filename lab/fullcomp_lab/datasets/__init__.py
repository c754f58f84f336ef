"""Data of the papers' experiments: ratings (HMSFW paper, Section 6), images and tables (SMAG paper, Section 5).

* :func:`movielens` reads MovieLens-100K / MovieLens-1M files (seven age groups, saved 80/10/10 split with seed
  20260927, training-mean centering) into a :class:`fullcomp.datasets.RatingData`.
* :func:`mnist`, :func:`fashion_mnist`, :func:`cifar10`, :func:`fer2013`, :func:`mnist5k`, :func:`digits` and
  :func:`pu_split` / :func:`pu_problem` are the PU-learning data (SMAG paper, Section 5.1).
* :func:`adult`, :func:`german_credit` and :class:`CelebA` are the fairness data (SMAG paper, Section 5.2).
* :func:`huber`, :func:`huber_np`, :func:`group_losses`, :func:`worst_group` and :func:`average_group` are the
  experiments' losses (Huber, delta 1, as a mean over each group's ratings).

The synthetic generator :func:`fullcomp.datasets.synthetic_ratings` and the container
:class:`fullcomp.datasets.RatingData` belong to the library.
"""

from fullcomp_lab.datasets.celeba import CelebA
from fullcomp_lab.datasets.images import ImageData, cifar10, digits, fashion_mnist, fer2013, mnist, mnist5k
from fullcomp_lab.datasets.losses import average_group, group_losses, huber, huber_np, worst_group
from fullcomp_lab.datasets.movielens import movielens
from fullcomp_lab.datasets.pu import PUData, accuracy, pu_problem, pu_risk, pu_split
from fullcomp_lab.datasets.tabular import Split, TabularData, adult, german_credit

__all__ = [
    "average_group",
    "group_losses",
    "huber",
    "huber_np",
    "movielens",
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
    "accuracy",
    "pu_problem",
    "pu_risk",
    "pu_split",
    "Split",
    "TabularData",
    "adult",
    "german_credit",
]
