"""CelebA in its official layout, as a torch ``Dataset`` of (image, label, sensitive attribute).

Expected files under ``root`` (as distributed by the CelebA authors):

* ``list_attr_celeba.txt``: first line the number of images N, second line the
  40 attribute names, then N lines ``000001.jpg -1 1 ...`` (values -1/1);
* ``img_align_celeba/``: the aligned images named in the attribute file;
* ``list_eval_partition.txt`` (optional): ``000001.jpg 0`` with 0/1/2 for
  train/validation/test.  Without it, the SMAG paper's random 80/10/10 split
  is drawn with ``split_seed``.

Images are decoded with Pillow (imported when the first image is read, so the
attribute tables work without it) into float tensors (3, H, W) in [0, 1];
``transform`` then maps them as the encoder needs (resize, normalise, ...),
with no dependency on torchvision.  Any torch encoder of those tensors plugs
into :func:`fullcomp_lab.pauc.pauc_problem`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fullcomp.errors import DataError, OptionError

ATTRIBUTE_FILE = "list_attr_celeba.txt"
PARTITION_FILE = "list_eval_partition.txt"
IMAGE_FOLDER = "img_align_celeba"
SPLITS = {"train": 0, "val": 1, "test": 2}
DEFAULT_SPLIT_SEED = 20260929


def read_attributes(path: str | os.PathLike) -> tuple[list[str], list[str], np.ndarray]:
    """(image names, attribute names, values as an (N, 40) int8 array of 0/1) from ``list_attr_celeba.txt``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} not found; put the official {ATTRIBUTE_FILE} in the CelebA folder")
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    if len(lines) < 2:
        raise DataError(f"{path}: expected the image count on line 1 and the attribute names on line 2")
    try:
        count = int(lines[0].strip())
    except ValueError:
        raise DataError(f"{path}, line 1: expected the number of images, found {lines[0].strip()!r}") from None
    attributes = lines[1].split()
    if not attributes:
        raise DataError(f"{path}, line 2: expected the attribute names (Attractive, Male, ...), found nothing")
    names, values = [], []
    for line_no, line in enumerate(lines[2:], 3):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != len(attributes) + 1:
            raise DataError(
                f"{path}, line {line_no}: expected an image name and {len(attributes)} values, found "
                f"{len(parts)} fields; fix the line or re-download {ATTRIBUTE_FILE}"
            )
        row = parts[1:]
        if any(v not in ("1", "-1") for v in row):
            bad = next(v for v in row if v not in ("1", "-1"))
            raise DataError(f"{path}, line {line_no}: attribute values must be 1 or -1, found {bad!r}")
        names.append(parts[0])
        values.append([v == "1" for v in row])
    if len(names) != count:
        raise DataError(
            f"{path}: line 1 announces {count} images but {len(names)} rows follow; the file is truncated or edited"
        )
    return names, attributes, np.asarray(values, dtype=np.int8).reshape(len(names), len(attributes))


def read_partition(path: str | os.PathLike, names: list[str]) -> np.ndarray:
    """The official partition (0 train, 1 validation, 2 test) of each image in ``names``."""
    path = Path(path)
    table = {}
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or parts[1] not in ("0", "1", "2"):
                raise DataError(f"{path}, line {line_no}: expected '<image> <0|1|2>', found {line.strip()!r}")
            table[parts[0]] = int(parts[1])
    missing = [n for n in names if n not in table]
    if missing:
        raise DataError(f"{path} has no partition for {len(missing)} image(s), e.g. {missing[0]}; use matching files")
    return np.asarray([table[n] for n in names], dtype=np.int64)


def random_partition(n: int, seed: int = DEFAULT_SPLIT_SEED) -> np.ndarray:
    """An 80/10/10 train/validation/test partition (0/1/2) of n items drawn with ``seed``."""
    order = np.random.default_rng(seed).permutation(n)
    part = np.zeros(n, dtype=np.int64)
    n_train, n_val = int(round(0.8 * n)), int(round(0.1 * n))
    part[order[n_train : n_train + n_val]] = 1
    part[order[n_train + n_val :]] = 2
    return part


def decode_image(path: str | os.PathLike) -> torch.Tensor:
    """An image file as a float32 tensor (3, H, W) in [0, 1], via Pillow."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow is installed here; the message is for other machines
        raise DataError("decoding CelebA images needs Pillow: pip install pillow") from None
    try:
        with Image.open(path) as img:
            array = np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot decode the image ({exc}); re-extract img_align_celeba") from None
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


class CelebA(torch.utils.data.Dataset):
    """CelebA images with one target attribute and one sensitive attribute.

    ``dataset[i]`` is ``(image, y, a)``: the transformed image, and 0/1 int64 tensors.
    ``labels`` and ``groups`` hold y and a of the whole split as arrays (no decoding).

    Parameters
    ----------
    root
        Folder with ``list_attr_celeba.txt`` and ``img_align_celeba/`` (see the module docstring).
    target
        Attribute predicted (default ``"Attractive"``; the paper also uses ``"Big_Nose"``
        and ``"Bags_Under_Eyes"``).
    sensitive
        The binary sensitive attribute (default ``"Male"``).
    split
        ``"train"``, ``"val"``, ``"test"`` or None (all images).
    transform
        Optional ``transform(image_tensor) -> tensor`` (resize, normalise ...).
    split_seed
        Seed of the random 80/10/10 split used when ``list_eval_partition.txt`` is absent.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        target: str = "Attractive",
        sensitive: str = "Male",
        split: str | None = "train",
        transform: Callable[[torch.Tensor], Any] | None = None,
        split_seed: int = DEFAULT_SPLIT_SEED,
    ):
        self.root = Path(root)
        if not self.root.is_dir():
            raise DataError(f"{self.root} is not a folder; pass the CelebA folder holding {ATTRIBUTE_FILE}")
        if split is not None and split not in SPLITS:
            raise OptionError(f"split must be 'train', 'val', 'test' or None, got {split!r}")
        if transform is not None and not callable(transform):
            raise OptionError("transform must be a callable image_tensor -> tensor, or None")
        names, attributes, values = read_attributes(self.root / ATTRIBUTE_FILE)
        for role, name in (("target", target), ("sensitive", sensitive)):
            if name not in attributes:
                raise OptionError(f"{role} attribute {name!r} is not in {ATTRIBUTE_FILE}; choose from {attributes}")
        self.images = self.root / IMAGE_FOLDER
        if not self.images.is_dir():
            raise DataError(f"{self.images} not found; extract the aligned images into {IMAGE_FOLDER}/")
        partition_file = self.root / PARTITION_FILE
        if partition_file.is_file():
            partition, self.partition_source = read_partition(partition_file, names), PARTITION_FILE
        else:
            partition, self.partition_source = (
                random_partition(len(names), split_seed),
                f"random 80/10/10 ({split_seed})",
            )
        keep = np.ones(len(names), bool) if split is None else partition == SPLITS[split]
        self.names = [n for n, k in zip(names, keep) if k]
        self.labels = values[keep, attributes.index(target)].astype(np.int64)
        self.groups = values[keep, attributes.index(sensitive)].astype(np.int64)
        self.target, self.sensitive, self.split, self.transform = target, sensitive, split, transform

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> tuple[Any, torch.Tensor, torch.Tensor]:
        path = self.images / self.names[i]
        if not path.is_file():
            raise DataError(f"{path} not found: {ATTRIBUTE_FILE} lists it but {IMAGE_FOLDER}/ lacks it")
        image = decode_image(path)
        if self.transform is not None:
            image = self.transform(image)
        return image, torch.tensor(self.labels[i]), torch.tensor(self.groups[i])

    def arrays(self, indices: Any = None) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """Decoded images (stacked; all of the same size after ``transform``), labels and groups."""
        idx = range(len(self)) if indices is None else indices
        items = [self[int(i)] for i in idx]
        if not items:
            raise DataError(f"the {self.split} split of {self.root} is empty")
        images = torch.stack([it[0] for it in items])
        return images, self.labels[list(idx)], self.groups[list(idx)]


__all__ = ["CelebA", "read_attributes", "read_partition", "random_partition", "decode_image"]
