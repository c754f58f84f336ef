"""Synthetic data generators for examples, docs and tests; no file reader lives here.

* :func:`synthetic_ratings` makes MovieLens-like rating data at any size, without a dense matrix.
* :class:`RatingData` holds rating data: per-split entries ordered by group, group slices for minibatch sampling.
* :func:`assemble` builds a :class:`RatingData` from a reader's entries and their split labels
  (:func:`split_assignment`, checked by :func:`valid_assignment`), so a reader of another rating file needs
  nothing else.

Readers of the papers' data sets (MovieLens, the PU image sets, Adult, German credit, CelebA) belong to the
``fullcomp-lab`` package of this repository (``fullcomp_lab.datasets``).
"""

from fullcomp.datasets.ratings import (
    AGE_GROUP_NAMES,
    DEFAULT_SPLIT_SEED,
    RatingData,
    RatingSplit,
    assemble,
    split_assignment,
    valid_assignment,
)
from fullcomp.datasets.synthetic import synthetic_ratings

__all__ = [
    "AGE_GROUP_NAMES",
    "DEFAULT_SPLIT_SEED",
    "RatingData",
    "RatingSplit",
    "assemble",
    "split_assignment",
    "synthetic_ratings",
    "valid_assignment",
]
