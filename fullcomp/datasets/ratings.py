"""The rating container shared by the MovieLens loader and the synthetic generator.

A :class:`RatingData` holds a P x Q rating matrix's observed entries, split at
random into train / validation / test (80 / 10 / 10 by default), centred by the
*training* mean only, with every rating tagged by its user's group.  Within each
split the entries are ordered by (group, row, column), so a group's entries form
one contiguous slice: per-group minibatch sampling is two integer operations
and needs no index lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp.errors import OptionError

SPLITS = ("train", "val", "test")
AGE_GROUP_NAMES = ("under 18", "18-24", "25-34", "35-44", "45-49", "50-55", "56+")
DEFAULT_SPLIT_SEED = 20260927


@dataclass(frozen=True, eq=False)
class RatingSplit:
    """One split's observed entries, ordered by (group, row, column).

    ``rows``/``cols`` (int64) index the rating matrix, ``ratings`` (float64) are
    centred by the training mean of the owning :class:`RatingData`, and
    ``groups`` (int64) is the group of each rating's user.
    """

    rows: np.ndarray
    cols: np.ndarray
    ratings: np.ndarray
    groups: np.ndarray

    def __len__(self) -> int:
        return int(self.rows.shape[0])


@dataclass(frozen=True, eq=False)
class RatingData:
    """Observed entries of a P x Q rating matrix, split into train / val / test, with user groups.

    Attributes
    ----------
    label:
        What the data is, stated honestly: ``"ml-100k"``, ``"ml-1m"``, ``"ml-1m-partial (users
        1-2999; not MovieLens-1M)"``, ``"synthetic ..."``.  Report results under this name.
    layout:
        The file layout it was read from (``"ml-100k"``, ``"ml-1m"``) or ``"synthetic"``.
    shape:
        (P, Q): rated users x rated items.
    mean:
        Training mean subtracted from every split's ratings; ``ratings + mean`` is the original scale.
    train, val, test:
        The three :class:`RatingSplit` objects.
    user_groups:
        (P,) int64 group of every matrix row.
    group_names:
        One name per group (the seven MovieLens age groups by default).
    user_ids, item_ids:
        Original ID of every row / column (rows and columns are the sorted rated IDs).
    split_seed:
        Seed of the random 80/10/10 rating split (``numpy.random.default_rng``).
    source:
        Where the data came from (folder or generator call).
    split_file:
        The saved split that was read or written, or ``None`` when nothing is on disk.
    split_status:
        ``"reused"``, ``"created"``, ``"recomputed (...)"`` or ``"not saved (...)"``.
    """

    label: str
    layout: str
    shape: tuple[int, int]
    mean: float
    train: RatingSplit
    val: RatingSplit
    test: RatingSplit
    user_groups: np.ndarray
    group_names: tuple[str, ...]
    user_ids: np.ndarray
    item_ids: np.ndarray
    split_seed: int
    source: str
    split_file: Path | None = None
    split_status: str = "not saved"
    _slices: dict[str, list[slice]] = field(default_factory=dict, init=False, repr=False, compare=False)

    # ---- access --------------------------------------------------------------------------------------

    @property
    def n_groups(self) -> int:
        """Number of user groups (7 for MovieLens)."""
        return len(self.group_names)

    @property
    def n_ratings(self) -> int:
        """Total number of observed ratings over the three splits."""
        return len(self.train) + len(self.val) + len(self.test)

    def split(self, name: str) -> RatingSplit:
        """The split called ``name`` (``"train"``, ``"val"`` or ``"test"``)."""
        if name not in SPLITS:
            raise OptionError(f"unknown split {name!r}; use one of {', '.join(SPLITS)}")
        return getattr(self, name)

    def flat_index(self, split: str = "train") -> np.ndarray:
        """Row-major flat positions ``rows * Q + cols`` (int64) of a split's entries."""
        s = self.split(split)
        return s.rows * np.int64(self.shape[1]) + s.cols

    def original_ratings(self, split: str = "train") -> np.ndarray:
        """A split's ratings on the original 1-5 scale (centred ratings plus the training mean)."""
        return self.split(split).ratings + self.mean

    def group_counts(self, split: str = "train") -> np.ndarray:
        """(n_groups,) int64 number of ratings of each group in a split."""
        return np.bincount(self.split(split).groups, minlength=self.n_groups).astype(np.int64)

    def group_slices(self, split: str = "train") -> list[slice]:
        """One slice per group into the split's arrays; entries are ordered by group, so each is contiguous."""
        if split not in self._slices:
            bounds = np.concatenate([[0], np.cumsum(self.group_counts(split))])
            self._slices[split] = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        return self._slices[split]

    def group_indices(self, split: str = "train") -> list[np.ndarray]:
        """One int64 index array per group into the split's arrays (``arange`` of its slice)."""
        return [np.arange(s.start, s.stop, dtype=np.int64) for s in self.group_slices(split)]

    def sample_groups(self, batch: int, rng: np.random.Generator, split: str = "train") -> np.ndarray:
        """(n_groups, batch) positions into a split, drawn uniformly with replacement within each group.

        Sampling with replacement keeps every group's minibatch mean an unbiased estimate of that
        group's loss, whatever the group's size (the paper's 1,024 ratings per group exceed the smallest
        groups of small data sets).  Raises :class:`OptionError` when a group has no entry in the split.
        """
        if batch < 1:
            raise OptionError(f"batch must be a positive integer, got {batch}")
        slices = self.group_slices(split)
        counts = np.array([s.stop - s.start for s in slices], dtype=np.int64)
        if (counts == 0).any():
            empty = [self.group_names[g] for g in np.flatnonzero(counts == 0)]
            raise OptionError(f"cannot sample the {split} split: group(s) {', '.join(empty)} have no ratings")
        starts = np.array([s.start for s in slices], dtype=np.int64)
        return starts[:, None] + rng.integers(0, counts[:, None], size=(len(slices), batch))

    def values_at(self, x: Any, split: str = "train") -> Any:
        """Entries of a dense P x Q matrix (numpy array or torch tensor) at a split's positions."""
        s = self.split(split)
        if tuple(x.shape) != self.shape:
            raise OptionError(f"values_at needs a {self.shape} matrix, got shape {tuple(x.shape)}")
        if isinstance(x, np.ndarray):
            return x[s.rows, s.cols]
        import torch

        return x[torch.from_numpy(s.rows).to(x.device), torch.from_numpy(s.cols).to(x.device)]

    def summary(self) -> str:
        """A few lines of text: label, shape, split sizes, mean, groups and where the split is saved."""
        P, Q = self.shape
        n = self.n_ratings
        lines = [
            f"{self.label}: {P:,} users x {Q:,} items, {n:,} ratings (density {n / (P * Q):.4%})",
            f"split (seed {self.split_seed}): train {len(self.train):,} / val {len(self.val):,} / "
            f"test {len(self.test):,}; {self.split_status}" + (f" [{self.split_file}]" if self.split_file else ""),
            f"training mean {self.mean:.4f} (subtracted from all splits)",
            f"{'group':>10} {'users':>8} {'train':>10} {'val':>9} {'test':>9}",
        ]
        users = np.bincount(self.user_groups, minlength=self.n_groups)
        counts = [self.group_counts(s) for s in SPLITS]
        for g, name in enumerate(self.group_names):
            lines.append(f"{name:>10} {users[g]:>8,} {counts[0][g]:>10,} {counts[1][g]:>9,} {counts[2][g]:>9,}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        P, Q = self.shape
        return (
            f"RatingData({self.label!r}, {P}x{Q}, train/val/test={len(self.train)}/{len(self.val)}/{len(self.test)}, "
            f"mean={self.mean:.4f})"
        )


# ---- construction shared by the loaders --------------------------------------------------------------


def split_sizes(n: int) -> tuple[int, int, int]:
    """(train, val, test) sizes of the 80/10/10 split of n ratings: floor(0.8 n), floor(0.1 n), the rest."""
    n_train = (8 * n) // 10
    n_val = n // 10
    return n_train, n_val, n - n_train - n_val


def split_assignment(n: int, seed: int = DEFAULT_SPLIT_SEED) -> np.ndarray:
    """(n,) int8 split label (0 train, 1 val, 2 test) of each rating, from ``default_rng(seed)``.

    The held-out 20% are one draw without replacement, ``rng.choice(n, n_val + n_test, replace=False)``, in
    random order: its first n_val are validation, the rest test.  (Drawing only the held-out part is 3x
    faster than a full permutation at ten million ratings.)  The labels refer to the ratings in canonical
    (row, column) order, so the split does not depend on the order of lines in a file.  NumPy does not
    promise the same ``Generator`` stream across versions, which is why the MovieLens loader saves the split.
    """
    _, n_val, n_test = split_sizes(n)
    held = np.random.default_rng(seed).choice(n, size=n_val + n_test, replace=False)
    labels = np.zeros(n, dtype=np.int8)
    labels[held[:n_val]] = 1
    labels[held[n_val:]] = 2
    return labels


def valid_assignment(labels: Any, n: int) -> bool:
    """Whether ``labels`` is an 80/10/10 split label array for n ratings."""
    if not isinstance(labels, np.ndarray) or labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
        return False
    if n and (labels.min() < 0 or labels.max() > 2):
        return False
    counts = np.bincount(labels.astype(np.int64), minlength=3)
    return tuple(int(c) for c in counts) == split_sizes(n)


def assemble(
    rows: np.ndarray,
    cols: np.ndarray,
    ratings: np.ndarray,
    user_groups: np.ndarray,
    labels: np.ndarray,
    *,
    shape: tuple[int, int],
    label: str,
    layout: str,
    group_names: Sequence[str],
    user_ids: np.ndarray,
    item_ids: np.ndarray,
    split_seed: int,
    source: str,
    split_file: Path | None,
    split_status: str,
) -> RatingData:
    """Build a :class:`RatingData` from entries in canonical (row, column) order and their split labels.

    Centres by the mean of the training ratings only, so no held-out rating leaks into the model's offset.
    """
    n_groups = len(group_names)
    n = rows.shape[0]
    sizes = np.bincount(labels, minlength=3)
    if sizes.shape != (3,) or sizes[0] == 0:
        raise OptionError("split labels must be 0 (train), 1 (val) or 2 (test), with a non-empty training split")
    mean = float(np.bincount(labels, weights=ratings, minlength=3)[0] / sizes[0])
    groups_all = user_groups[rows].astype(np.int64, copy=False)
    # One stable sort on (split, group) orders every split by group and keeps the canonical (row, column)
    # order inside each group; on a 16-bit key numpy's stable sort is a linear-time radix sort.
    if 3 * n_groups <= np.iinfo(np.int16).max:
        key = labels.astype(np.int16) * np.int16(n_groups) + groups_all.astype(np.int16)
    else:
        key = labels.astype(np.int64) * n_groups + groups_all
    order = np.argsort(key, kind="stable")
    del key
    bounds = [0, int(sizes[0]), int(sizes[0] + sizes[1]), n]
    rows_o = rows[order].astype(np.int64, copy=False)
    cols_o = cols[order].astype(np.int64, copy=False)
    ratings_o = ratings[order].astype(np.float64, copy=False)
    ratings_o -= mean  # ratings[order] is a fresh array, so centring in place touches no caller data
    groups_o = groups_all[order]
    del order, groups_all
    # Each split is a contiguous view of the ordered arrays: no second copy of ten million entries.
    parts = [
        RatingSplit(rows=rows_o[a:b], cols=cols_o[a:b], ratings=ratings_o[a:b], groups=groups_o[a:b])
        for a, b in zip(bounds[:-1], bounds[1:])
    ]
    return RatingData(
        label=label,
        layout=layout,
        shape=(int(shape[0]), int(shape[1])),
        mean=mean,
        train=parts[0],
        val=parts[1],
        test=parts[2],
        user_groups=user_groups.astype(np.int64, copy=False),
        group_names=tuple(group_names),
        user_ids=user_ids,
        item_ids=item_ids,
        split_seed=int(split_seed),
        source=source,
        split_file=split_file,
        split_status=split_status,
    )
