"""Rating data for the group-robust matrix-completion experiments (HMSFW paper, Section 6 and Appendix A.1).

* :func:`movielens` reads MovieLens-100K / MovieLens-1M files (seven age groups, saved 80/10/10 split with seed
  20260927, training-mean centering).
* :func:`synthetic_ratings` makes data with the same structure at any size, without a dense matrix.
* :class:`RatingData` holds either: per-split entries ordered by group, group slices for minibatch sampling.
* :func:`huber`, :func:`huber_np`, :func:`group_losses`, :func:`worst_group` and :func:`average_group` are the
  experiments' losses (Huber, delta 1, as a mean over each group's ratings).
"""

from fullcomp.datasets.losses import average_group, group_losses, huber, huber_np, worst_group
from fullcomp.datasets.movielens import movielens
from fullcomp.datasets.ratings import AGE_GROUP_NAMES, DEFAULT_SPLIT_SEED, RatingData, RatingSplit, split_assignment
from fullcomp.datasets.synthetic import synthetic_ratings

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
]
