"""Tabular fairness data (UCI Adult, Statlog German credit) as standardized arrays with a sensitive attribute.

Both loaders return a :class:`TabularData`: train / validation / test splits of
features ``X`` (float32; categorical attributes one-hot, numeric attributes
standardized with training-split statistics only), labels ``y`` (0/1) and the
binary sensitive attribute ``a`` (0/1).  The sensitive attribute stays among
the features, as in the image experiments where the face shows it; the
adversary's job is to keep the representation from encoding it.

* :func:`adult`: ``adult.data`` (split 8/9 train, 1/9 validation: the 80:10
  ratio, since Adult has its own test file) and ``adult.test`` (the test
  split; its first line ``|1x3 Cross validator`` is skipped and the trailing
  period of its labels stripped).  Label: income ``>50K``; sensitive: ``sex``
  (1 = Male).  Missing values ``?`` are a category of their own.
* :func:`german_credit`: ``german.data``, split 80/10/10 stratified by label.
  Label: good credit (class 1), so the partial AUC at low FPR ranks applicants
  while accepting few bad ones (the costly error in ``german.doc``);
  sensitive: sex from attribute 9 (1 = male: A91, A93, A94; 0 = female: A92, A95).

Malformed rows raise :class:`~fullcomp.errors.DataError` naming the file, the
line and what to fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fullcomp.errors import DataError

#: Split seed of the validation (and German test) split; fixed so every method sees the same rows.
DEFAULT_SPLIT_SEED = 20260929

ADULT_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
)
ADULT_NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")

#: German credit: 1-based attribute numbers of the numerical attributes (german.doc).
GERMAN_NUMERIC = (2, 5, 8, 11, 13, 16, 18)
GERMAN_MALE = {"A91", "A93", "A94"}
GERMAN_FEMALE = {"A92", "A95"}


@dataclass
class Split:
    """One split: features ``X`` (n, d) float32, labels ``y`` (n,) int64 in {0, 1}, sensitive ``a`` (n,) in {0, 1}."""

    X: np.ndarray
    y: np.ndarray
    a: np.ndarray

    def __len__(self) -> int:
        return int(self.y.size)


@dataclass
class TabularData:
    """Train, validation and test splits of one data set, with the feature names and provenance."""

    name: str
    train: Split
    val: Split
    test: Split
    features: list[str]
    source: str = ""
    label: str = ""
    sensitive: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return int(self.train.X.shape[1])

    def splits(self) -> dict[str, Split]:
        return {"train": self.train, "val": self.val, "test": self.test}


# -------------------------------------------------------------------------------------------- parsing


def _need(path: Path, hint: str) -> Path:
    if not path.is_file():
        raise DataError(f"{path} not found; {hint}")
    return path


def _read_adult(path: Path) -> tuple[list[list[str]], list[int]]:
    """Rows of 14 attribute strings and 0/1 labels; blank lines and the test file's ``|`` header skipped."""
    rows, labels = [], []
    with open(path, encoding="latin-1") as fh:
        for line_no, line in enumerate(fh, 1):
            text = line.strip()
            if not text or text.startswith("|"):
                continue
            parts = [p.strip() for p in text.split(",")]
            if len(parts) != 15:
                raise DataError(
                    f"{path}, line {line_no}: expected 15 comma-separated fields (14 attributes and the income "
                    f"label), found {len(parts)}; fix or delete the line (adult.names lists the columns)"
                )
            label = parts[14].rstrip(".")
            if label not in ("<=50K", ">50K"):
                raise DataError(
                    f"{path}, line {line_no}: the label must be <=50K or >50K (a trailing period is allowed), "
                    f"found {parts[14]!r}; fix the last field"
                )
            for name in ADULT_NUMERIC:
                value = parts[ADULT_COLUMNS.index(name)]
                try:
                    float(value)
                except ValueError:
                    raise DataError(
                        f"{path}, line {line_no}: attribute {name!r} must be a number, found {value!r}; fix the "
                        "field (missing values of numeric attributes are not allowed)"
                    ) from None
            if parts[ADULT_COLUMNS.index("sex")] not in ("Male", "Female"):
                raise DataError(
                    f"{path}, line {line_no}: sex must be Male or Female, found "
                    f"{parts[ADULT_COLUMNS.index('sex')]!r}; fix the 10th field"
                )
            rows.append(parts[:14])
            labels.append(int(label == ">50K"))
    if not rows:
        raise DataError(f"{path} has no data rows; pass the UCI Adult file (comma-separated, 15 fields a line)")
    return rows, labels


def _read_german(path: Path) -> tuple[list[list[str]], list[int]]:
    rows, labels = [], []
    with open(path, encoding="latin-1") as fh:
        for line_no, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 21:
                raise DataError(
                    f"{path}, line {line_no}: expected 21 space-separated fields (20 attributes and the class), "
                    f"found {len(parts)}; pass the symbolic german.data (not german.data-numeric) or fix the line"
                )
            if parts[20] not in ("1", "2"):
                raise DataError(f"{path}, line {line_no}: the class must be 1 (good) or 2 (bad), found {parts[20]!r}")
            for number in GERMAN_NUMERIC:
                try:
                    float(parts[number - 1])
                except ValueError:
                    raise DataError(
                        f"{path}, line {line_no}: attribute {number} must be a number, found {parts[number - 1]!r}"
                    ) from None
            if parts[8] not in GERMAN_MALE | GERMAN_FEMALE:
                raise DataError(
                    f"{path}, line {line_no}: attribute 9 (personal status and sex) must be one of A91-A95, "
                    f"found {parts[8]!r}"
                )
            rows.append(parts[:20])
            labels.append(int(parts[20] == "1"))
    if not rows:
        raise DataError(f"{path} has no data rows; pass the Statlog german.data file")
    return rows, labels


# ------------------------------------------------------------------------------------------- encoding


class Encoder:
    """One-hot for categorical columns (categories seen in training; others encode as all zeros) and
    standardization for numeric columns, both fitted on the training rows only."""

    def __init__(self, names: list[str], numeric: set[int], rows: list[list[str]]):
        self.names, self.numeric = names, numeric
        columns = list(zip(*rows))
        self.stats: dict[int, tuple[float, float]] = {}
        self.categories: dict[int, list[str]] = {}
        for j, col in enumerate(columns):
            if j in numeric:
                v = np.asarray(col, dtype=np.float64)
                sd = float(v.std())
                self.stats[j] = (float(v.mean()), sd if sd > 0 else 1.0)
            else:
                self.categories[j] = sorted(set(col))
        self.features = []
        for j, name in enumerate(names):
            self.features += [name] if j in numeric else [f"{name}={c}" for c in self.categories[j]]

    def __call__(self, rows: list[list[str]]) -> np.ndarray:
        blocks = []
        columns = list(zip(*rows)) if rows else [[] for _ in self.names]
        for j, col in enumerate(columns):
            if j in self.numeric:
                mean, sd = self.stats[j]
                blocks.append(((np.asarray(col, dtype=np.float64) - mean) / sd)[:, None])
            else:
                cats = self.categories[j]
                index = {c: i for i, c in enumerate(cats)}
                onehot = np.zeros((len(col), len(cats)))
                where = np.fromiter((index.get(c, -1) for c in col), dtype=np.int64, count=len(col))
                seen = where >= 0
                onehot[np.nonzero(seen)[0], where[seen]] = 1.0
                blocks.append(onehot)
        return np.concatenate(blocks, axis=1).astype(np.float32)


def _stratified(labels: np.ndarray, fractions: tuple[float, ...], seed: int) -> list[np.ndarray]:
    """Index sets with the given fractions, each class split in the same proportions (sorted indices)."""
    rng = np.random.default_rng(seed)
    parts: list[list[int]] = [[] for _ in fractions]
    for value in np.unique(labels):
        idx = rng.permutation(np.nonzero(labels == value)[0])
        cuts = np.round(np.cumsum(fractions)[:-1] * idx.size).astype(int)
        for p, chunk in zip(parts, np.split(idx, cuts)):
            p += chunk.tolist()
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _build(
    name: str,
    rows: list[list[str]],
    y: np.ndarray,
    a: np.ndarray,
    parts: dict[str, np.ndarray | tuple],
    encoder_args: tuple[list[str], set[int]],
    **info,
) -> TabularData:
    train_idx = parts["train"]
    encoder = Encoder(*encoder_args, [rows[i] for i in train_idx])
    splits = {}
    for key, value in parts.items():
        if isinstance(value, tuple):  # rows of another file (Adult's test file)
            other_rows, other_y, other_a = value
            splits[key] = Split(encoder(other_rows), other_y, other_a)
        else:
            splits[key] = Split(encoder([rows[i] for i in value]), y[value], a[value])
    return TabularData(name, splits["train"], splits["val"], splits["test"], encoder.features, **info)


# -------------------------------------------------------------------------------------------- loaders


def adult(path: str | os.PathLike, split_seed: int = DEFAULT_SPLIT_SEED) -> TabularData:
    """UCI Adult from a folder holding ``adult.data`` and ``adult.test`` (see the module docstring).

    ``split_seed`` (default :data:`DEFAULT_SPLIT_SEED`) draws the validation rows
    (1/9 of ``adult.data``, stratified by label); ``adult.test`` is the test split.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder; pass the folder holding adult.data and adult.test")
    hint = "download the UCI Adult files (adult.data, adult.test) into this folder"
    train_rows, train_labels = _read_adult(_need(folder / "adult.data", hint))
    test_rows, test_labels = _read_adult(_need(folder / "adult.test", hint))
    sex = ADULT_COLUMNS.index("sex")
    y = np.asarray(train_labels, dtype=np.int64)
    a = np.asarray([int(r[sex] == "Male") for r in train_rows], dtype=np.int64)
    train_idx, val_idx = _stratified(y, (8 / 9, 1 / 9), split_seed)
    test = (
        test_rows,
        np.asarray(test_labels, dtype=np.int64),
        np.asarray([int(r[sex] == "Male") for r in test_rows], dtype=np.int64),
    )
    numeric = {ADULT_COLUMNS.index(c) for c in ADULT_NUMERIC}
    return _build(
        "adult",
        train_rows,
        y,
        a,
        {"train": train_idx, "val": val_idx, "test": test},
        (list(ADULT_COLUMNS), numeric),
        source=str(folder),
        label="income >50K",
        sensitive="sex (1 = Male)",
        meta={"split_seed": split_seed, "split": "adult.data 8/9 train, 1/9 validation; adult.test test"},
    )


def german_credit(path: str | os.PathLike, split_seed: int = DEFAULT_SPLIT_SEED) -> TabularData:
    """Statlog German credit from ``german.data`` or the folder holding it (see the module docstring).

    ``split_seed`` (default :data:`DEFAULT_SPLIT_SEED`) draws the 80/10/10
    train/validation/test split, stratified by label.
    """
    file = Path(path)
    if file.is_dir():
        file = file / "german.data"
    rows, labels = _read_german(_need(file, "pass the folder holding the Statlog german.data file"))
    y = np.asarray(labels, dtype=np.int64)
    a = np.asarray([int(r[8] in GERMAN_MALE) for r in rows], dtype=np.int64)
    train_idx, val_idx, test_idx = _stratified(y, (0.8, 0.1, 0.1), split_seed)
    names = [f"attr{j}" for j in range(1, 21)]
    numeric = {j - 1 for j in GERMAN_NUMERIC}
    return _build(
        "german-credit",
        rows,
        y,
        a,
        {"train": train_idx, "val": val_idx, "test": test_idx},
        (names, numeric),
        source=str(file),
        label="good credit (class 1)",
        sensitive="sex from attribute 9 (1 = male: A91, A93, A94)",
        meta={"split_seed": split_seed, "split": "german.data 80/10/10, stratified by label"},
    )


__all__ = ["DEFAULT_SPLIT_SEED", "Split", "TabularData", "adult", "german_credit"]
